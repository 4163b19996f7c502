//! askloop's fuzz targets: one function per input that comes from outside
//! the process, each taking bytes (what `cargo fuzz` hands out) and
//! panicking only when askloop broke a promise about that input: a panic
//! inside askloop, a result that contradicts another way of computing it, a
//! run left neither waiting nor finished, an error without a message, a 5xx
//! for a client's body.
//!
//! Two drivers share these functions: `tests/fuzz.rs` (proptest, stable
//! Rust, time-bounded; what CI runs) and the cargo-fuzz crate in `fuzz/`
//! (libFuzzer, nightly). `docs/reliability.md` lists the targets, how long
//! each runs and what they found.
#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a fuzz target reports a broken promise by panicking

mod agent_inputs;
mod server_bodies;
mod streams;

pub use agent_inputs::{answer_check, answer_check_case, ask_user_input, config_file, script_file};
pub use server_bodies::{ROUTES, server_body, server_body_case};
pub use streams::{anthropic_stream, openai_stream, sse_decoder, sse_decoder_case, stream_case};

/// A fuzz target: bytes in, a panic when a promise broke.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the corpus folders
/// (`fuzz/corpus/<name>/`) name them.
pub const TARGETS: [(&str, Target); 8] = [
    ("ask_user_input", ask_user_input),
    ("answer_check", answer_check),
    ("openai_stream", openai_stream),
    ("anthropic_stream", anthropic_stream),
    ("sse_decoder", sse_decoder),
    ("script_file", script_file),
    ("config_file", config_file),
    ("server_body", server_body),
];

/// Runs a future to its end on this thread's runtime (one per thread, made
/// once: a fuzz case must stay cheap).
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// Cuts `body` into chunks whose sizes come from `seed`: a deterministic
/// split (any byte may end a chunk), so a bytes-only fuzzer still tries
/// split points.
pub fn cuts_from_seed(seed: u8, body: &[u8]) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut state = u32::from(seed).wrapping_mul(2654435761) | 1;
    let mut at = 0usize;
    while at < body.len() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        at += (state % 17) as usize + usize::from(seed.is_multiple_of(3)) * 40;
        if at < body.len() {
            cuts.push(at);
        }
    }
    cuts
}

/// `body` split at `cuts` (sorted, deduplicated, clamped to the body).
pub fn split_at_cuts<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(body.len())).collect();
    points.sort_unstable();
    points.dedup();
    let mut chunks = Vec::with_capacity(points.len() + 1);
    let mut from = 0;
    for point in points {
        chunks.push(&body[from..point]);
        from = point;
    }
    chunks.push(&body[from..]);
    chunks
}
