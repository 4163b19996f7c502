//! Where the time of a resume goes, for `long --detail`: a store layer
//! that adds up the time spent in the store, split into the run row
//! (create, get, claim, update) and the conversation read (`messages`), and
//! a [`Model`] wrapper that adds up the model calls (from the request sent
//! to the last event taken). Is askloop's own cost of a resume flat as the
//! conversation grows, and what does carrying it to the model cost?

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use askloop::model::{ModelError, ModelEvent, ModelRequest, ModelStream};
use askloop::store::{Next, StoreLayer, StoreRequest, StoreResponse};
use askloop::{Model, StoreError};
use async_trait::async_trait;

/// Time spent in the store and the model so far.
#[derive(Debug, Default)]
pub struct ResumeClock {
    row_ns: AtomicU64,
    row_read_ns: AtomicU64,
    messages_ns: AtomicU64,
    model_ns: AtomicU64,
}

/// What a [`ResumeClock`] read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spent {
    /// Run row operations.
    pub row: Duration,
    /// Of which reading the row (`get`): what grows with the run's history.
    pub row_read: Duration,
    /// Conversation reads.
    pub messages: Duration,
    /// Model calls.
    pub model: Duration,
}

impl std::ops::Sub for Spent {
    type Output = Spent;

    fn sub(self, earlier: Spent) -> Spent {
        Spent {
            row: self.row - earlier.row,
            row_read: self.row_read - earlier.row_read,
            messages: self.messages - earlier.messages,
            model: self.model - earlier.model,
        }
    }
}

impl ResumeClock {
    /// What was spent so far.
    pub fn read(&self) -> Spent {
        let read = |counter: &AtomicU64| Duration::from_nanos(counter.load(Ordering::Relaxed));
        Spent {
            row: read(&self.row_ns),
            row_read: read(&self.row_read_ns),
            messages: read(&self.messages_ns),
            model: read(&self.model_ns),
        }
    }

    fn add(counter: &AtomicU64, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(ns, Ordering::Relaxed);
    }
}

/// The store's time, as a layer: put it around the store with
/// [`askloop::store::Layered`].
#[derive(Debug)]
pub struct Timed {
    pub clock: Arc<ResumeClock>,
}

#[async_trait]
impl StoreLayer for Timed {
    async fn call(&self, request: StoreRequest<'_>, next: Next<'_>) -> Result<StoreResponse, StoreError> {
        let counters: &[&AtomicU64] = match request {
            StoreRequest::Create { .. } | StoreRequest::Claim { .. } | StoreRequest::Update(_) => &[&self.clock.row_ns],
            StoreRequest::Get { .. } => &[&self.clock.row_ns, &self.clock.row_read_ns],
            StoreRequest::Messages { .. } => &[&self.clock.messages_ns],
            _ => &[],
        };
        let started = Instant::now();
        let result = next.run(request).await;
        for counter in counters {
            ResumeClock::add(counter, started);
        }
        result
    }
}

/// A model, timed from the request to the end (or drop) of its stream.
#[derive(Debug)]
pub struct TimedModel {
    pub inner: Arc<dyn Model>,
    pub clock: Arc<ResumeClock>,
}

#[async_trait]
impl Model for TimedModel {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let started = Instant::now();
        let result = self.inner.stream(request).await;
        match result {
            Ok(inner) => Ok(Box::pin(TimedStream {
                inner,
                started,
                clock: Some(Arc::clone(&self.clock)),
            })),
            Err(err) => {
                ResumeClock::add(&self.clock.model_ns, started);
                Err(err)
            }
        }
    }
}

/// A model's stream that adds its time to the clock when it ends or is
/// dropped, whichever comes first.
struct TimedStream {
    inner: ModelStream,
    started: Instant,
    clock: Option<Arc<ResumeClock>>,
}

impl TimedStream {
    fn stop(&mut self) {
        if let Some(clock) = self.clock.take() {
            ResumeClock::add(&clock.model_ns, self.started);
        }
    }
}

impl futures::Stream for TimedStream {
    type Item = Result<ModelEvent, ModelError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.stop();
        }
        polled
    }
}

impl Drop for TimedStream {
    fn drop(&mut self) {
        self.stop();
    }
}
