//! Fake OpenAI-compatible and Anthropic servers that stream scripted
//! responses, for testing agents (askloop's and your own) and benchmarking.
//!
//! A [`FakeServer`] listens on `127.0.0.1`, answers
//! `POST /v1/chat/completions` in OpenAI's wire format and
//! `POST /v1/messages` in Anthropic's, and records every request. Answers
//! come from a queue of [`FakeResponse`]s, then from a responder closure that
//! sees the request body; any request can be made to fail
//! ([`FakeServerBuilder::fail_request`]). A [`FakeTurn`] can stream every
//! quirk real servers have (whole tool calls in one chunk, no ids, a finish
//! reason in the same chunk, error events mid-stream, dropped connections,
//! delays). A [`FaultSchedule`] injects provider faults into every `n`th
//! answer (429, 500, 529, a cut stream, a stall). A request without `stream: true` gets the same turn as one JSON
//! body (`chat.completion` / `message`), for clients that do not stream.
//!
//! [`mastra`] reads recorded traffic of a real Mastra server and checks a
//! stream's chunks against its shapes.
//!
//! ```
//! use askloop_testkit::{FakeServer, FakeTurn, FakeResponse, workload};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let server = FakeServer::builder()
//!     .respond(FakeTurn::text_in("Hello there", 3))
//!     .responder(workload::deploy_responder())
//!     .start()
//!     .await
//!     .unwrap();
//! // Point an OpenAI client at server.openai_base_url(), an Anthropic one
//! // at server.anthropic_base_url(); then inspect server.requests().
//! assert_eq!(server.request_count(), 0);
//! # });
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod faults;
pub mod mastra;
mod response;
mod server;
pub mod smtp;
mod wire;
pub mod workload;

pub use faults::{Fault, FaultSchedule};
pub use response::{FakeError, FakeResponse, FakeToolCall, FakeTurn, Finish, split_even};
pub use server::{FakeServer, FakeServerBuilder, RecordedRequest, Responder};
pub use wire::WireFormat;

/// Whether a test must be skipped because `missing` names what the machine
/// lacks: under CI (`CI=true`) that is a failure, since CI installs what
/// the tests need; elsewhere the test says why and is skipped.
///
/// # Panics
/// Under CI, when something is missing.
pub fn skipped_for_lack_of(test: &str, missing: Option<String>) -> bool {
    let Some(reason) = missing else {
        return false;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run under CI: {reason}");
    }
    eprintln!("{test}: skipped: {reason}");
    true
}
