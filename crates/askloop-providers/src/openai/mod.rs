//! OpenAI-compatible Chat Completions: OpenAI itself, Ollama, vLLM,
//! LM Studio, OpenRouter, Groq and anything else that speaks
//! `POST {base}/chat/completions` with `stream: true`.

mod request;
pub(crate) mod stream;

use std::sync::{Arc, Mutex, PoisonError};

use askloop::{Model, ModelError, ModelRequest, ModelStream, ToolSpec};
use async_trait::async_trait;
use reqwest::header::HeaderValue;
use serde_json::value::RawValue;

use crate::http::{self, HttpConfig};

pub(crate) use stream::shorten;

/// Where and how to reach an OpenAI-compatible server.
///
/// ```
/// use askloop_providers::OpenAiConfig;
///
/// let config = OpenAiConfig::new("qwen2.5", "http://127.0.0.1:11434/v1").provider("ollama");
/// assert_eq!(config.api_key, None);
/// ```
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// The model id sent in the request, e.g. `gpt-4o-mini`.
    pub model: String,
    /// The base URL, up to and including the version: `https://api.openai.com/v1`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// The provider's name in errors and logs (`openai`, `ollama`, ...).
    pub provider: String,
    /// Timeouts and retries.
    pub http: HttpConfig,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("provider", &self.provider)
            .field("http", &self.http)
            .finish()
    }
}

impl OpenAiConfig {
    /// A model at a base URL, without a key, named `openai` in errors.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        OpenAiConfig {
            model: model.into(),
            base_url: base_url.into(),
            api_key: None,
            provider: "openai".to_owned(),
            http: HttpConfig::default(),
        }
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the provider's name used in errors.
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = provider.into();
        self
    }

    /// Sets timeouts and retries.
    pub fn http(mut self, http: HttpConfig) -> Self {
        self.http = http;
        self
    }
}

/// A model behind an OpenAI-compatible Chat Completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    name: String,
    config: OpenAiConfig,
    endpoint: http::Endpoint,
    /// `Bearer <key>`, when there is a key and it is a valid header value.
    authorization: Option<HeaderValue>,
    tools: Arc<ToolsCache>,
    client: reqwest::Client,
}

/// The `tools` of the last request, serialised. An agent sends the same
/// tools with every request, and their schemas are a large part of a short
/// conversation's body; they are serialised again only when they differ
/// (compared exactly, see [`request::same_tools`]).
#[derive(Debug, Default)]
struct ToolsCache(Mutex<Option<Arc<CachedTools>>>);

#[derive(Debug)]
struct CachedTools {
    specs: Vec<ToolSpec>,
    json: Box<RawValue>,
}

impl ToolsCache {
    fn get(&self, specs: &[ToolSpec]) -> Result<Option<Arc<CachedTools>>, serde_json::Error> {
        let last = self.0.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(last) = last
            && request::same_tools(&last.specs, specs)
        {
            return Ok(Some(last));
        }
        let Some(json) = request::tools_json(specs)? else {
            return Ok(None);
        };
        let tools = Arc::new(CachedTools {
            specs: specs.to_vec(),
            json,
        });
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&tools));
        Ok(Some(tools))
    }
}

impl OpenAiModel {
    /// A model called `name` (what [`Model::name`] returns, e.g. the spec
    /// `openai/gpt-4o-mini`) reached with `config`.
    pub fn new(name: impl Into<String>, config: OpenAiConfig) -> Result<Self, ModelError> {
        let client = http::client(&config.provider, &config.http)?;
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let authorization = config
            .api_key
            .as_ref()
            .and_then(|key| http::sensitive_header(format!("Bearer {key}")));
        let endpoint = http::Endpoint::new(url);
        Ok(OpenAiModel {
            name: name.into(),
            config,
            endpoint,
            authorization,
            tools: Arc::default(),
            client,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let provider = &self.config.provider;
        let serialise_error = |err: serde_json::Error| ModelError::Protocol {
            provider: provider.clone(),
            message: format!("cannot serialise the request: {err}"),
        };
        let tools = self.tools.get(request.tools).map_err(serialise_error)?;
        let tools = tools.as_deref().map(|tools| &*tools.json);
        let body =
            serde_json::to_vec(&request::chat_request(&self.config.model, &request, tools)).map_err(serialise_error)?;
        let body = bytes::Bytes::from(body);
        let deadline = http::Deadline::start(&self.config.http);
        let response = http::send_with_retries(provider, &self.endpoint, &self.config.http, deadline, || {
            let mut builder = self
                .endpoint
                .post(&self.client)
                .header(
                    reqwest::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )
                .header(reqwest::header::ACCEPT, HeaderValue::from_static("text/event-stream"))
                .body(body.clone());
            match (&self.authorization, &self.config.api_key) {
                (Some(authorization), _) => {
                    builder = builder.header(reqwest::header::AUTHORIZATION, authorization.clone());
                }
                // Not a valid header value: reqwest reports it.
                (None, Some(key)) => builder = builder.bearer_auth(key),
                (None, None) => {}
            }
            builder
        })
        .await?;
        // Made-up call ids, when a server sends none, name the request.
        let fallback_id = format!("{}_{}", request.run_id, request.messages.len());
        let parser = stream::ChatStreamParser::new(provider.clone(), fallback_id);
        Ok(crate::sse::model_stream(
            provider,
            response,
            parser,
            &self.config.http,
            deadline,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_tools_are_serialised_again_only_when_they_change() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: "d".into(),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        };
        let cache = ToolsCache::default();
        assert!(cache.get(&[]).unwrap().is_none());
        let first = cache.get(&[spec("a")]).unwrap().unwrap();
        let again = cache.get(&[spec("a")]).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = cache.get(&[spec("b")]).unwrap().unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(
            other.json.get(),
            // The schema keeps its own key order (serde_json's `preserve_order`).
            r#"[{"type":"function","function":{"name":"b","description":"d","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]"#
        );
        assert!(cache.get(&[]).unwrap().is_none());
        let back = cache.get(&[spec("a")]).unwrap().unwrap();
        assert_eq!(back.json.get(), first.json.get());
    }
}
