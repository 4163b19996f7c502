//! Anthropic Messages: `POST {base}/v1/messages` with `stream: true`.

mod request;
pub(crate) mod stream;

use askloop::{Model, ModelError, ModelRequest, ModelStream};
use async_trait::async_trait;

use crate::http::{self, HttpConfig};

/// The API version this crate speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The default `max_tokens`: Anthropic requires one, and 4096 leaves room
/// for a long answer without letting a runaway turn run up a large bill.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Where and how to reach Anthropic (or a server that speaks its API).
///
/// ```
/// use askloop_providers::AnthropicConfig;
///
/// let config = AnthropicConfig::new("claude-sonnet-4-5", "sk-ant-...").max_tokens(1024);
/// assert_eq!(config.base_url, "https://api.anthropic.com");
/// ```
#[derive(Clone, PartialEq)]
pub struct AnthropicConfig {
    /// The model id sent in the request, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The base URL, without `/v1`: `https://api.anthropic.com`.
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: String,
    /// The most tokens one turn may generate.
    pub max_tokens: u32,
    /// Timeouts and retries.
    pub http: HttpConfig,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("max_tokens", &self.max_tokens)
            .field("http", &self.http)
            .finish()
    }
}

impl AnthropicConfig {
    /// A model on `https://api.anthropic.com` with this key.
    pub fn new(model: impl Into<String>, api_key: impl Into<String>) -> Self {
        AnthropicConfig {
            model: model.into(),
            base_url: "https://api.anthropic.com".to_owned(),
            api_key: api_key.into(),
            max_tokens: DEFAULT_MAX_TOKENS,
            http: HttpConfig::default(),
        }
    }

    /// Sets the base URL.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets `max_tokens`.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens.max(1);
        self
    }

    /// Sets timeouts and retries.
    pub fn http(mut self, http: HttpConfig) -> Self {
        self.http = http;
        self
    }
}

/// A Claude model behind the Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicModel {
    name: String,
    config: AnthropicConfig,
    endpoint: http::Endpoint,
    client: reqwest::Client,
}

const PROVIDER: &str = "anthropic";

impl AnthropicModel {
    /// A model called `name` (what [`Model::name`] returns) reached with
    /// `config`.
    pub fn new(name: impl Into<String>, config: AnthropicConfig) -> Result<Self, ModelError> {
        let client = http::client(PROVIDER, &config.http)?;
        // Accept a base given with or without the version.
        let base = config.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let url = format!("{base}/v1/messages");
        let endpoint = http::Endpoint::new(url);
        Ok(AnthropicModel {
            name: name.into(),
            config,
            endpoint,
            client,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn name(&self) -> &str {
        &self.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let body = request::messages_request(&self.config.model, self.config.max_tokens, &request);
        let body = serde_json::to_vec(&body).map_err(|err| ModelError::Protocol {
            provider: PROVIDER.to_owned(),
            message: format!("cannot serialise the request: {err}"),
        })?;
        let body = bytes::Bytes::from(body);
        let deadline = http::Deadline::start(&self.config.http);
        let response = http::send_with_retries(PROVIDER, &self.endpoint, &self.config.http, deadline, || {
            self.endpoint
                .post(&self.client)
                .header("x-api-key", &self.config.api_key)
                .header("anthropic-version", ANTHROPIC_VERSION)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .body(body.clone())
        })
        .await?;
        let fallback_id = format!("{}_{}", request.run_id, request.messages.len());
        let parser = stream::MessagesStreamParser::new(PROVIDER, fallback_id);
        Ok(crate::sse::model_stream(
            PROVIDER,
            response,
            parser,
            &self.config.http,
            deadline,
        ))
    }
}
