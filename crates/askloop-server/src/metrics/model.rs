//! A model as the metrics see it: each call timed to its first event and to
//! its end, and counted by how it ended, labelled by provider (the part of
//! the model's name before `/`: `openai`, `anthropic`, `ollama`, ...; before
//! `:` for a scripted model, `script`), never by run.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use askloop::{Model, ModelError, ModelEvent, ModelRequest, ModelStream};
use async_trait::async_trait;
use futures::Stream;

use super::Metrics;

/// `inner`, with its calls measured in `metrics`.
#[derive(Debug)]
pub(crate) struct ObservedModel {
    inner: Arc<dyn Model>,
    provider: String,
    metrics: Metrics,
}

impl ObservedModel {
    pub(crate) fn new(inner: Arc<dyn Model>, metrics: Metrics) -> Self {
        let provider = provider_of(inner.name());
        ObservedModel {
            inner,
            provider,
            metrics,
        }
    }
}

/// The provider of a model named `provider/model` (or `script:PATH`); a
/// name without one is `other`.
fn provider_of(name: &str) -> String {
    match name.find(['/', ':']) {
        Some(end) if end > 0 => name[..end].to_owned(),
        _ => "other".to_owned(),
    }
}

/// How a call that failed failed, as a label.
fn error_kind(err: &ModelError) -> &'static str {
    match err {
        ModelError::MissingApiKey { .. } => "missing_api_key",
        ModelError::UnknownModel { .. } => "unknown_model",
        ModelError::Api { .. } => "api",
        ModelError::Transport { .. } => "transport",
        ModelError::Protocol { .. } => "protocol",
        ModelError::Stream { .. } => "stream",
        _ => "other",
    }
}

#[async_trait]
impl Model for ObservedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let started = Instant::now();
        match self.inner.stream(request).await {
            Ok(stream) => Ok(Box::pin(ObservedStream {
                inner: stream,
                started,
                first_seen: false,
                ended: false,
                provider: self.provider.clone(),
                metrics: self.metrics.clone(),
            })),
            Err(err) => {
                self.metrics
                    .model_call_ended(&self.provider, error_kind(&err), started.elapsed());
                Err(err)
            }
        }
    }
}

/// A call's stream, measured as it is read: its first event, and its end
/// (the last event, or the first error). A stream dropped before its end
/// (the run was cancelled) counts nowhere.
struct ObservedStream {
    inner: ModelStream,
    started: Instant,
    first_seen: bool,
    ended: bool,
    provider: String,
    metrics: Metrics,
}

impl Stream for ObservedStream {
    type Item = Result<ModelEvent, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(item) = &polled
            && !self.ended
        {
            match item {
                Some(Ok(_)) if !self.first_seen => {
                    self.first_seen = true;
                    self.metrics.model_first_event(&self.provider, self.started.elapsed());
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    self.ended = true;
                    self.metrics
                        .model_call_ended(&self.provider, error_kind(err), self.started.elapsed());
                }
                None => {
                    self.ended = true;
                    self.metrics
                        .model_call_ended(&self.provider, "ok", self.started.elapsed());
                }
            }
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_is_the_part_of_the_name_before_the_slash() {
        assert_eq!(provider_of("openai/gpt-4o-mini"), "openai");
        assert_eq!(provider_of("ollama/llama3.2:3b"), "ollama");
        assert_eq!(provider_of("script:/tmp/deploy.json"), "script");
        assert_eq!(provider_of("scripted"), "other");
        assert_eq!(provider_of("/x"), "other");
    }
}
