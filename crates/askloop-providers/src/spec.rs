//! Model names as users write them (`openai/gpt-4o-mini`), resolved with
//! keys and URLs from the environment into a provider configuration.

use std::sync::Arc;

use askloop::{Model, ModelError};

use crate::anthropic::{AnthropicConfig, AnthropicModel};
use crate::http::HttpConfig;
use crate::openai::{OpenAiConfig, OpenAiModel};

/// OpenAI's API.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Anthropic's API.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// A local Ollama's OpenAI-compatible endpoint.
pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434/v1";

/// The forms [`from_spec`] accepts, for error messages and docs.
pub const ACCEPTED_SPECS: &str = "openai/<model> (OPENAI_API_KEY, optional OPENAI_BASE_URL), \
anthropic/<model> (ANTHROPIC_API_KEY, optional ANTHROPIC_BASE_URL), \
ollama/<model> (no key; OLLAMA_BASE_URL, default http://127.0.0.1:11434/v1), \
openai-compatible/<model>@<base-url> (any OpenAI-compatible server, e.g. \
openai-compatible/llama3@http://127.0.0.1:8000/v1; optional OPENAI_COMPATIBLE_API_KEY)";

/// A model spec resolved into the provider configuration it stands for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ResolvedSpec {
    /// An OpenAI-compatible Chat Completions server.
    OpenAi(OpenAiConfig),
    /// Anthropic's Messages API.
    Anthropic(AnthropicConfig),
}

/// Where a resolved spec sends its requests: the provider and the base URL
/// (never the key). A host that stores a conversation can record it, and
/// later send the rest of the conversation to the same place even when the
/// environment has changed (see [`ResolvedSpec::with_base_url`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The provider's name: `openai`, `anthropic`, `ollama`,
    /// `openai-compatible`.
    pub provider: String,
    /// The base URL requests go to.
    pub base_url: String,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.provider, self.base_url)
    }
}

impl ResolvedSpec {
    /// Where requests go.
    ///
    /// ```
    /// let resolved = askloop_providers::resolve_spec("ollama/qwen2.5", |_| None, Default::default()).unwrap();
    /// let endpoint = resolved.endpoint();
    /// assert_eq!((endpoint.provider.as_str(), endpoint.base_url.as_str()), ("ollama", "http://127.0.0.1:11434/v1"));
    /// ```
    pub fn endpoint(&self) -> Endpoint {
        match self {
            ResolvedSpec::OpenAi(config) => Endpoint {
                provider: config.provider.clone(),
                base_url: config.base_url.clone(),
            },
            ResolvedSpec::Anthropic(config) => Endpoint {
                provider: "anthropic".to_owned(),
                base_url: config.base_url.clone(),
            },
        }
    }

    /// The same model, key and settings, sending to `base_url` instead.
    pub fn with_base_url(self, base_url: impl Into<String>) -> Self {
        match self {
            ResolvedSpec::OpenAi(mut config) => {
                config.base_url = base_url.into();
                ResolvedSpec::OpenAi(config)
            }
            ResolvedSpec::Anthropic(mut config) => {
                config.base_url = base_url.into();
                ResolvedSpec::Anthropic(config)
            }
        }
    }

    /// Builds the model; `name` is what [`Model::name`] returns.
    pub fn into_model(self, name: &str) -> Result<Arc<dyn Model>, ModelError> {
        Ok(match self {
            ResolvedSpec::OpenAi(config) => Arc::new(OpenAiModel::new(name, config)?),
            ResolvedSpec::Anthropic(config) => Arc::new(AnthropicModel::new(name, config)?),
        })
    }
}

/// A model from its name, with keys and URLs from the process environment.
///
/// | spec | key | base URL |
/// |---|---|---|
/// | `openai/<model>` | `OPENAI_API_KEY` (required) | `OPENAI_BASE_URL`, default `https://api.openai.com/v1` |
/// | `anthropic/<model>` | `ANTHROPIC_API_KEY` (required) | `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com` |
/// | `ollama/<model>` | none | `OLLAMA_BASE_URL` (`/v1` added if missing), default `http://127.0.0.1:11434/v1` |
/// | `openai-compatible/<model>@<base-url>` | `OPENAI_COMPATIBLE_API_KEY` (optional) | the given URL, up to and including `/v1` |
///
/// `ASKLOOP_MODEL_TIMEOUT` (default 600 s) bounds a whole model call, retries
/// and stream included; `ASKLOOP_MODEL_IDLE_TIMEOUT` (default 300 s) the wait
/// for the next event, keep-alive comments not counting (`90`, `90s`,
/// `500ms`, `10m`).
///
/// A missing key is [`ModelError::MissingApiKey`] naming the variable, before
/// any request; an unknown form, or a timeout that is not a duration, is
/// [`ModelError::UnknownModel`] saying what is accepted. [`Model::name`]
/// returns `spec` as written.
///
/// ```
/// use askloop::ModelError;
///
/// let err = askloop_providers::from_spec_with("gpt-4o", |_| None, Default::default()).unwrap_err();
/// assert!(matches!(err, ModelError::UnknownModel { .. }));
/// let model = askloop_providers::from_spec_with("ollama/qwen2.5", |_| None, Default::default()).unwrap();
/// assert_eq!(model.name(), "ollama/qwen2.5");
/// ```
pub fn from_spec(spec: &str) -> Result<Arc<dyn Model>, ModelError> {
    from_spec_with(spec, |name| std::env::var(name).ok(), HttpConfig::default())
}

/// [`from_spec`] with the environment given as a lookup function (tests,
/// configuration files) and explicit timeouts and retries; the timeout
/// variables, when `env` has them, override `http`'s.
pub fn from_spec_with(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
    http: HttpConfig,
) -> Result<Arc<dyn Model>, ModelError> {
    resolve_spec(spec, env, http)?.into_model(spec)
}

/// Resolves a spec without building the model: which provider, model id,
/// base URL and key it stands for.
pub fn resolve_spec(
    spec: &str,
    env: impl Fn(&str) -> Option<String>,
    http: HttpConfig,
) -> Result<ResolvedSpec, ModelError> {
    // An empty variable counts as unset, as it does for most tools.
    let var = |name: &str| env(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let unknown = |reason: &str| ModelError::UnknownModel {
        spec: spec.to_owned(),
        reason: format!("{reason}; accepted forms: {ACCEPTED_SPECS}"),
    };
    let spec = spec.trim();
    let Some((prefix, model)) = spec.split_once('/') else {
        return Err(unknown("expected <provider>/<model>"));
    };
    if model.trim().is_empty() {
        return Err(unknown("the model name is empty"));
    }
    let http = crate::settings::with_env_timeouts(http, var).map_err(|err| ModelError::UnknownModel {
        spec: spec.to_owned(),
        reason: err.to_string(),
    })?;
    let missing = |provider: &str, variable: &str| ModelError::MissingApiKey {
        provider: provider.to_owned(),
        variable: variable.to_owned(),
    };
    Ok(match prefix {
        "openai" => {
            let key = var("OPENAI_API_KEY").ok_or_else(|| missing("openai", "OPENAI_API_KEY"))?;
            let base = var("OPENAI_BASE_URL").unwrap_or_else(|| OPENAI_DEFAULT_BASE_URL.to_owned());
            ResolvedSpec::OpenAi(OpenAiConfig::new(model, base).api_key(key).http(http))
        }
        "ollama" => {
            // Ollama serves its OpenAI-compatible API under /v1 only; a base
            // written the way Ollama's own clients take it (no /v1) gets it.
            let base = match var("OLLAMA_BASE_URL") {
                Some(base) if base.trim_end_matches('/').ends_with("/v1") => base,
                Some(base) => format!("{}/v1", base.trim_end_matches('/')),
                None => OLLAMA_DEFAULT_BASE_URL.to_owned(),
            };
            ResolvedSpec::OpenAi(OpenAiConfig::new(model, base).provider("ollama").http(http))
        }
        "openai-compatible" => {
            // The model may itself contain `/` and `@`; the URL starts at the
            // last `@http://` or `@https://`.
            let at = ["@http://", "@https://"]
                .iter()
                .filter_map(|marker| model.rfind(marker))
                .max()
                .ok_or_else(|| {
                    unknown("openai-compatible needs the server's URL: openai-compatible/<model>@<base-url>")
                })?;
            let (name, base) = (&model[..at], &model[at + 1..]);
            if name.is_empty() {
                return Err(unknown("the model name before `@` is empty"));
            }
            let mut config = OpenAiConfig::new(name, base).provider("openai-compatible").http(http);
            config.api_key = var("OPENAI_COMPATIBLE_API_KEY");
            ResolvedSpec::OpenAi(config)
        }
        "anthropic" => {
            let key = var("ANTHROPIC_API_KEY").ok_or_else(|| missing("anthropic", "ANTHROPIC_API_KEY"))?;
            let base = var("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_DEFAULT_BASE_URL.to_owned());
            ResolvedSpec::Anthropic(AnthropicConfig::new(model, key).base_url(base).http(http))
        }
        other => return Err(unknown(&format!("unknown provider `{other}`"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    fn resolve(spec: &str, pairs: &[(&str, &str)]) -> Result<ResolvedSpec, ModelError> {
        resolve_spec(spec, env(pairs), HttpConfig::default())
    }

    #[test]
    fn openai_needs_its_key_and_names_the_variable() {
        let err = resolve("openai/gpt-4o-mini", &[("OPENAI_API_KEY", "  ")]).unwrap_err();
        assert_eq!(
            err,
            ModelError::MissingApiKey {
                provider: "openai".into(),
                variable: "OPENAI_API_KEY".into()
            }
        );
        assert!(err.to_string().contains("OPENAI_API_KEY"));
        let ResolvedSpec::OpenAi(config) = resolve("openai/gpt-4o-mini", &[("OPENAI_API_KEY", "sk")]).unwrap() else {
            panic!("not openai")
        };
        assert_eq!(config.model, "gpt-4o-mini");
        assert_eq!(config.base_url, OPENAI_DEFAULT_BASE_URL);
        assert_eq!(config.api_key.as_deref(), Some("sk"));
    }

    #[test]
    fn base_urls_come_from_the_usual_variables() {
        let ResolvedSpec::OpenAi(openai) = resolve(
            "openai/gpt-4o-mini",
            &[("OPENAI_API_KEY", "sk"), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")],
        )
        .unwrap() else {
            panic!("not openai")
        };
        assert_eq!(openai.base_url, "http://127.0.0.1:9/v1");
        let ResolvedSpec::OpenAi(ollama) = resolve("ollama/qwen2.5", &[]).unwrap() else {
            panic!("not openai-compatible")
        };
        assert_eq!(
            (ollama.base_url.as_str(), ollama.api_key.clone()),
            (OLLAMA_DEFAULT_BASE_URL, None)
        );
        assert_eq!(ollama.provider, "ollama");
        let ResolvedSpec::OpenAi(ollama) =
            resolve("ollama/qwen2.5", &[("OLLAMA_BASE_URL", "http://gpu-box:11434/v1")]).unwrap()
        else {
            panic!("not openai-compatible")
        };
        assert_eq!(ollama.base_url, "http://gpu-box:11434/v1");
        let ResolvedSpec::OpenAi(ollama) =
            resolve("ollama/qwen2.5", &[("OLLAMA_BASE_URL", "http://gpu-box:11434/")]).unwrap()
        else {
            panic!("not openai-compatible")
        };
        assert_eq!(ollama.base_url, "http://gpu-box:11434/v1", "/v1 is added for Ollama");
        let ResolvedSpec::Anthropic(anthropic) = resolve(
            "anthropic/claude-sonnet-4-5",
            &[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")],
        )
        .unwrap() else {
            panic!("not anthropic")
        };
        assert_eq!(
            (
                anthropic.model.as_str(),
                anthropic.base_url.as_str(),
                anthropic.max_tokens
            ),
            ("claude-sonnet-4-5", "http://127.0.0.1:9", 4096)
        );
        assert!(matches!(
            resolve("anthropic/claude-sonnet-4-5", &[]),
            Err(ModelError::MissingApiKey { variable, .. }) if variable == "ANTHROPIC_API_KEY"
        ));
    }

    #[test]
    fn openai_compatible_takes_the_url_after_the_last_at() {
        let ResolvedSpec::OpenAi(config) = resolve(
            "openai-compatible/meta-llama/Llama-3.1-8B@v2@https://vllm.internal:8000/v1",
            &[],
        )
        .unwrap() else {
            panic!("not openai-compatible")
        };
        assert_eq!(config.model, "meta-llama/Llama-3.1-8B@v2");
        assert_eq!(config.base_url, "https://vllm.internal:8000/v1");
        assert_eq!(config.api_key, None);
        assert!(matches!(
            resolve("openai-compatible/llama3", &[]),
            Err(ModelError::UnknownModel { .. })
        ));
    }

    #[test]
    fn unknown_forms_list_what_is_accepted() {
        for spec in ["gpt-4o", "mistral/large", "openai/", ""] {
            let err = resolve(spec, &[]).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, ModelError::UnknownModel { .. }), "{spec}: {text}");
            assert!(
                text.contains("anthropic/<model>") && text.contains("openai-compatible/"),
                "{text}"
            );
        }
    }

    #[test]
    fn timeout_variables_set_the_http_config_and_a_bad_one_is_refused() {
        let ResolvedSpec::OpenAi(config) = resolve("ollama/qwen2.5", &[("ASKLOOP_MODEL_TIMEOUT", "15m")]).unwrap()
        else {
            panic!("not openai-compatible")
        };
        assert_eq!(config.http.total_timeout, std::time::Duration::from_secs(900));
        let err = resolve("ollama/qwen2.5", &[("ASKLOOP_MODEL_IDLE_TIMEOUT", "forever")]).unwrap_err();
        assert!(matches!(err, ModelError::UnknownModel { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("ASKLOOP_MODEL_IDLE_TIMEOUT: \"forever\" is not a duration"),
            "{err}"
        );
    }

    #[test]
    fn the_endpoint_names_provider_and_url_and_can_be_pinned() {
        let openai = resolve(
            "openai/gpt-4o-mini",
            &[("OPENAI_API_KEY", "sk"), ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")],
        )
        .unwrap();
        assert_eq!(
            openai.endpoint(),
            Endpoint {
                provider: "openai".into(),
                base_url: "http://127.0.0.1:9/v1".into()
            }
        );
        let pinned = openai.with_base_url("http://10.0.0.1:8000/v1");
        let ResolvedSpec::OpenAi(config) = &pinned else {
            panic!("not openai")
        };
        assert_eq!(config.base_url, "http://10.0.0.1:8000/v1");
        assert_eq!(config.api_key.as_deref(), Some("sk"), "the key is the environment's");
        let anthropic = resolve("anthropic/claude-sonnet-4-5", &[("ANTHROPIC_API_KEY", "k")]).unwrap();
        assert_eq!(
            anthropic.endpoint().to_string(),
            "anthropic at https://api.anthropic.com"
        );
        let anthropic = anthropic.with_base_url("http://127.0.0.1:7");
        assert_eq!(anthropic.endpoint().base_url, "http://127.0.0.1:7");
    }

    #[test]
    fn the_model_is_named_by_the_spec_as_written() {
        let model = from_spec_with(
            "openai/gpt-4o-mini",
            env(&[("OPENAI_API_KEY", "sk")]),
            HttpConfig::default(),
        )
        .unwrap();
        assert_eq!(model.name(), "openai/gpt-4o-mini");
    }
}
