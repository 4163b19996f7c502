//! Provider faults injected on a schedule: every `n`th request gets the
//! next fault of a list, in turn, in the wire format of the route it came
//! in on. For load tests of what a run survives (`docs/reliability.md`).
//!
//! The faults are the ones real providers show under load:
//!
//! - [`Fault::RateLimited`]: HTTP 429 with `Retry-After: 1` and the
//!   provider's rate-limit body (OpenAI `rate_limit_exceeded`, Anthropic
//!   `rate_limit_error`);
//! - [`Fault::ServerError`]: HTTP 500 with the provider's server-error body;
//! - [`Fault::Overloaded`]: Anthropic's HTTP 529 `overloaded_error`; on the
//!   OpenAI route the 503 "engine overloaded" OpenAI sends instead;
//! - [`Fault::Disconnect`]: the answer starts streaming, then the
//!   connection is cut after two SSE frames;
//! - [`Fault::Stall`]: the response headers arrive, then no byte ever does
//!   (the client's idle timeout must end the call).
//!
//! The three statuses come before any byte of the answer, so a client may
//! retry them; the last two break a response that already began.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::response::{FakeError, FakeResponse};
use crate::wire::WireFormat;

/// One kind of provider fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// HTTP 429 with `Retry-After: 1`.
    RateLimited,
    /// HTTP 500.
    ServerError,
    /// HTTP 529 (Anthropic) or 503 (OpenAI): the provider is overloaded.
    Overloaded,
    /// The stream is cut after two frames.
    Disconnect,
    /// Headers, then silence for ever.
    Stall,
}

impl Fault {
    /// Every fault, in the order a [`FaultSchedule::every`] uses them.
    pub const ALL: [Fault; 5] = [
        Fault::RateLimited,
        Fault::ServerError,
        Fault::Overloaded,
        Fault::Disconnect,
        Fault::Stall,
    ];

    /// A short name for counts: `429`, `500`, `529/503`, `disconnect`, `stall`.
    pub fn name(self) -> &'static str {
        match self {
            Fault::RateLimited => "429",
            Fault::ServerError => "500",
            Fault::Overloaded => "529/503",
            Fault::Disconnect => "disconnect",
            Fault::Stall => "stall",
        }
    }

    /// The response that carries this fault instead of (or inside)
    /// `answer`. A disconnect or a stall needs a streamed turn; any other
    /// answer (an error status, a raw body) is sent unchanged.
    pub fn apply(self, format: WireFormat, answer: FakeResponse) -> FakeResponse {
        match (self, answer) {
            (Fault::RateLimited, _) => {
                let message = match format {
                    WireFormat::OpenAi => {
                        "Rate limit reached for gpt-4o-mini in organization org-fake on requests per min (RPM): \
                         Limit 500, Used 500, Requested 1. Please try again in 1s."
                    }
                    WireFormat::Anthropic => {
                        "This request would exceed the rate limit for your organization of 50 requests per minute."
                    }
                };
                FakeError::new(429, message).retry_after(1).into()
            }
            (Fault::ServerError, _) => match format {
                WireFormat::OpenAi => {
                    FakeError::new(500, "The server had an error while processing your request.").into()
                }
                WireFormat::Anthropic => FakeError::new(500, "Internal server error").into(),
            },
            (Fault::Overloaded, _) => match format {
                WireFormat::OpenAi => {
                    FakeError::new(503, "The engine is currently overloaded, please try again later").into()
                }
                WireFormat::Anthropic => FakeError::new(529, "Overloaded").into(),
            },
            (Fault::Disconnect, FakeResponse::Turn(turn)) => turn.disconnect_after(2).into(),
            (Fault::Stall, FakeResponse::Turn(turn)) => turn.stall_after(0).into(),
            (_, other) => other,
        }
    }
}

/// Which requests get which fault: every `n`th request (the `n`th, `2n`th,
/// ...) the next fault of the list, in turn. Counts what it injected.
///
/// ```
/// use askloop_testkit::{Fault, FaultSchedule};
///
/// let schedule = FaultSchedule::every(3, &Fault::ALL);
/// assert_eq!(schedule.fault_for(1), None);
/// assert_eq!(schedule.fault_for(3), Some(Fault::RateLimited));
/// assert_eq!(schedule.fault_for(6), Some(Fault::ServerError));
/// assert_eq!(schedule.fault_for(18), Some(Fault::RateLimited));
/// ```
#[derive(Debug)]
pub struct FaultSchedule {
    every: usize,
    faults: Vec<Fault>,
    injected: Vec<AtomicUsize>,
}

impl FaultSchedule {
    /// Every `n`th request (n at least 1) gets the next of `faults`.
    pub fn every(n: usize, faults: &[Fault]) -> Self {
        FaultSchedule {
            every: n.max(1),
            faults: faults.to_vec(),
            injected: faults.iter().map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// The fault request number `number` (1-based) gets, if any.
    pub fn fault_for(&self, number: usize) -> Option<Fault> {
        if self.faults.is_empty() || number == 0 || !number.is_multiple_of(self.every) {
            return None;
        }
        let turn = (number / self.every - 1) % self.faults.len();
        Some(self.faults[turn])
    }

    /// Applies the fault of request `number` to `answer` and counts it.
    pub(crate) fn inject(&self, number: usize, format: WireFormat, answer: FakeResponse) -> FakeResponse {
        let Some(fault) = self.fault_for(number) else {
            return answer;
        };
        let turn = (number / self.every - 1) % self.faults.len();
        self.injected[turn].fetch_add(1, Ordering::SeqCst);
        fault.apply(format, answer)
    }

    /// How many of each fault were injected so far, in the schedule's order.
    pub fn injected(&self) -> Vec<(Fault, usize)> {
        self.faults
            .iter()
            .zip(&self.injected)
            .map(|(fault, count)| (*fault, count.load(Ordering::SeqCst)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::FakeTurn;

    #[test]
    fn every_third_request_gets_the_next_fault_in_turn() {
        let schedule = FaultSchedule::every(3, &Fault::ALL);
        let faults: Vec<_> = (1..=30).filter_map(|n| schedule.fault_for(n)).collect();
        assert_eq!(faults.len(), 10);
        assert_eq!(&faults[..5], &Fault::ALL);
        assert_eq!(&faults[5..], &Fault::ALL);
    }

    #[test]
    fn statuses_follow_the_route_and_stream_faults_change_only_turns() {
        let turn = || FakeResponse::Turn(FakeTurn::text("hi"));
        let status = |r: FakeResponse| match r {
            FakeResponse::Error(e) => (e.status, e.retry_after),
            other => panic!("not an error: {other:?}"),
        };
        assert_eq!(
            status(Fault::RateLimited.apply(WireFormat::OpenAi, turn())),
            (429, Some(1))
        );
        assert_eq!(
            status(Fault::Overloaded.apply(WireFormat::Anthropic, turn())),
            (529, None)
        );
        assert_eq!(status(Fault::Overloaded.apply(WireFormat::OpenAi, turn())), (503, None));
        let FakeResponse::Turn(cut) = Fault::Disconnect.apply(WireFormat::OpenAi, turn()) else {
            panic!("a turn")
        };
        assert_eq!(cut.disconnect_after, Some(2));
        let FakeResponse::Turn(stalled) = Fault::Stall.apply(WireFormat::Anthropic, turn()) else {
            panic!("a turn")
        };
        assert_eq!(stalled.stall_after, Some(0));
        let error = FakeResponse::status(400, "bad");
        assert_eq!(Fault::Stall.apply(WireFormat::OpenAi, error.clone()), error);
    }
}
