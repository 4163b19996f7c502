//! Limits on request bodies, applied before any route reads one:
//!
//! - **A deadline for the whole body**: a body must arrive in full within
//!   [`ServerOptions::body_read_timeout`](crate::ServerOptions) of its
//!   request's head. A limit on the silence between two bytes would let a
//!   client that sends a byte just before each timeout hold a connection
//!   and a task for as long as it likes.
//! - **A declared length over the limit is refused at once**: hyper sends
//!   `100 Continue` to a client that asked for it (`Expect: 100-continue`)
//!   when the body is first read, so a `Content-Length` over the body limit
//!   is answered 413 before that, and the client never sends megabytes
//!   that would be refused. Bodies without a declared length are still cut
//!   at the limit as they are read (`DefaultBodyLimit` in the router).
//!
//! Either refusal is an [`ApiError`]: `body_timeout` (408) reaches the
//! route through its body extractor ([`ApiJson`](crate::extract::ApiJson)),
//! `body_too_large` (413) is answered here.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::AppState;
use crate::error::ApiError;

/// The middleware: refuses a declared length over the limit, and gives the
/// body its deadline.
pub(crate) async fn bound(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if declared_length(&request).is_some_and(|length| length > state.body_limit as u64) {
        return ApiError::BodyTooLarge {
            limit: state.body_limit,
        }
        .into_response();
    }
    let deadline = Instant::now() + state.body_read_timeout;
    next.run(request.map(|body| Body::new(DeadlineBody::new(body, deadline))))
        .await
}

/// The request's `Content-Length`, when it has one (hyper has checked that
/// it is a number).
fn declared_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Why a body could not be read: its deadline passed before it ended.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in full before its deadline")]
pub(crate) struct BodyDeadlinePassed;

/// A request body that fails with [`BodyDeadlinePassed`] when `deadline`
/// passes before it ends.
#[derive(Debug)]
struct DeadlineBody {
    body: Body,
    deadline: Instant,
    /// Started the first time the body has nothing to give: a body that
    /// arrives at once (nearly all) never needs a timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    fn new(body: Body, deadline: Instant) -> Self {
        DeadlineBody {
            body,
            deadline,
            timer: None,
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // What has arrived is handed on; the deadline matters only while
        // waiting for more.
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyDeadlinePassed.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
