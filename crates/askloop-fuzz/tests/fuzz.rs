//! The fuzz targets (`askloop_fuzz::TARGETS`) driven by proptest on stable
//! Rust: inputs are seeds from `fuzz/corpus/<target>/` mutated byte-wise
//! (flips, inserts of JSON/SSE/TOML tokens, deletions, duplications,
//! truncation, splices of two seeds), plus plain random bytes; stream
//! bodies are also cut at generated points, and the answer check gets
//! generated questions and answers.
//!
//! Each target runs for `ASKLOOP_FUZZ_SECONDS` (default 3; `.ci/run` sets
//! 60). A failure is shrunk by proptest and printed as the bytes to add to
//! `tests/regressions.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use askloop_providers::fuzzing::Format;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestError, TestRunner};
use serde_json::{Value, json};

fn budget() -> Duration {
    let seconds = std::env::var("ASKLOOP_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(3);
    Duration::from_secs(seconds)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the seed corpus {} cannot be read: {err}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// Tokens that make a parser take another branch.
const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"0.5",
    b"\\u0000",
    b"\\ud800",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"data: ",
    b"event: ",
    b": ping\n",
    b"[DONE]",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\"\"",
    b"[]",
    b"{}",
    b"=",
    b"[agents.a]\n",
    b"\"label\"",
    b"\"options\"",
    b"\"selectionMode\"",
    b"\"multi_select\"",
    b"\"tool_calls\"",
    b"\"index\":1",
    b"\"index\":-1",
    b"\"index\":99999999999",
    b"\"content_block_delta\"",
    b"\"input_json_delta\"",
    b"\"message_stop\"",
    b"\"toolCalls\"",
    b"{{toolResults}}",
    b"{{input}}",
    b"$RUN",
    b"\xe2\x82\xac",
    b"\t",
    b"'",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(Index, u8),
    Insert(Index, Index),
    Delete(Index, usize),
    Duplicate(Index, usize),
    Truncate(Index),
    Splice(Index, Index, Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<Index>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<Index>(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<Index>(), any::<Index>()).prop_map(|(a, s, b)| Mutation::Splice(a, s, b)),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation], seeds: &[Vec<u8>]) -> Vec<u8> {
    for m in mutations {
        let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
        match m {
            Mutation::Flip(i, b) if !bytes.is_empty() => {
                let i = i.index(bytes.len());
                bytes[i] ^= b | 1;
            }
            Mutation::Flip(..) => {}
            Mutation::Insert(i, t) => {
                let at = at(i, bytes.len());
                let token = TOKENS[t.index(TOKENS.len())];
                bytes.splice(at..at, token.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let at = at(i, bytes.len()).min(bytes.len());
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
            Mutation::Duplicate(i, n) => {
                let at = at(i, bytes.len()).min(bytes.len());
                let end = (at + n).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(end..end, copy);
            }
            Mutation::Truncate(i) => {
                let at = at(i, bytes.len()).min(bytes.len());
                bytes.truncate(at.max(1));
            }
            Mutation::Splice(a, s, b) => {
                let other = &seeds[s.index(seeds.len())];
                let at = at(a, bytes.len()).min(bytes.len());
                let from = at_index(b, other.len());
                bytes.truncate(at);
                bytes.extend_from_slice(&other[from..]);
            }
        }
    }
    bytes
}

fn at_index(i: &Index, len: usize) -> usize {
    if len == 0 { 0 } else { i.index(len) }
}

/// A byte input, shown as a byte string to paste into a regression test.
#[derive(Clone)]
struct Input(Vec<u8>);

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// Seeds mutated, or (one case in eight) random bytes.
fn inputs(target: &str) -> BoxedStrategy<Input> {
    let seeds = corpus(target);
    let first = seeds
        .iter()
        .map(|s| s.first().copied().unwrap_or(0))
        .collect::<Vec<u8>>();
    let mutated = (any::<Index>(), prop::collection::vec(mutation(), 0..8)).prop_map(move |(pick, mutations)| {
        let seed = seeds[pick.index(seeds.len())].clone();
        apply(seed, &mutations, &seeds)
    });
    let random = (prop::sample::select(first), prop::collection::vec(any::<u8>(), 0..300)).prop_map(|(b, mut rest)| {
        rest.insert(0, b);
        rest
    });
    prop_oneof![7 => mutated, 1 => random].prop_map(Input).boxed()
}

/// Runs `check` on cases from `strategy` until the budget is spent; panics
/// with the shrunk input on the first failure.
fn fuzz_for<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value)) -> usize
where
    S::Value: std::fmt::Debug,
{
    let budget = budget();
    let started = Instant::now();
    let config = Config {
        cases: 64,
        failure_persistence: None,
        max_shrink_time: 60_000,
        ..Config::default()
    };
    // A runner stops after `cases` successes: each round gets a new one, on
    // a fork of one random generator.
    let mut parent = TestRunner::new(config.clone());
    let mut cases = 0;
    quiet_panics(true);
    let mut failure = None;
    while started.elapsed() < budget {
        let mut runner = TestRunner::new_with_rng(config.clone(), parent.new_rng());
        let result = runner.run(&strategy, |value| {
            check(value);
            Ok(())
        });
        match result {
            Ok(()) => cases += 64,
            Err(TestError::Fail(reason, value)) => {
                failure = Some(format!("{reason}; minimal input: {value:?}"));
                break;
            }
            Err(TestError::Abort(reason)) => {
                failure = Some(format!("aborted: {reason}"));
                break;
            }
        }
    }
    quiet_panics(false);
    if let Some(failure) = failure {
        panic!("fuzz target {name} failed after {cases} cases: {failure}");
    }
    eprintln!(
        "fuzz target {name}: {cases} cases in {:.1} s, no failure",
        started.elapsed().as_secs_f64()
    );
    cases
}

thread_local! {
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Silences, on this thread only, the panic messages of the cases proptest
/// shrinks through; the shrunk input is reported instead.
fn quiet_panics(quiet: bool) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                default(info);
            }
        }));
    });
    QUIET.with(|q| q.set(quiet));
}

fn bytes_target(name: &str) {
    let (_, target) = askloop_fuzz::TARGETS.iter().find(|(n, _)| *n == name).unwrap();
    let cases = fuzz_for(name, inputs(name), |input| target(&input.0));
    assert!(cases > 0, "no case ran for {name}");
}

#[test]
fn ask_user_input_never_breaks_a_run() {
    bytes_target("ask_user_input");
}

#[test]
fn answer_check_agrees_with_its_schema_and_its_labels() {
    bytes_target("answer_check");
    let labels = prop::collection::vec(
        prop_oneof![Just("a".to_owned()), Just(" ".to_owned()), "[a-c ]{0,3}"],
        0..4,
    );
    let question = (
        labels,
        prop_oneof![Just(None), Just(Some("single_select")), Just(Some("multi_select"))],
    )
        .prop_map(|(labels, mode)| {
            let mut payload = json!({"question": "Which?"});
            if !labels.is_empty() {
                payload["options"] = labels.iter().map(|l| json!({"label": l})).collect();
            }
            if let Some(mode) = mode {
                payload["selectionMode"] = json!(mode);
            }
            payload
        });
    let answer = prop_oneof![
        "[a-c ]{0,3}".prop_map(Value::from),
        prop::collection::vec(prop_oneof!["[a-c ]{0,2}".prop_map(Value::from), Just(json!(1))], 0..4)
            .prop_map(Value::from),
        Just(Value::Null),
        Just(json!({"label": "a"})),
    ];
    fuzz_for(
        "answer_check (generated)",
        (question, answer, any::<bool>()),
        |(q, a, free)| askloop_fuzz::answer_check_case(&q, &a, free),
    );
}

fn stream_target(name: &str, format: Format) {
    bytes_target(name);
    let seeds = corpus(name);
    let cut = (any::<Index>(), prop::collection::vec(any::<Index>(), 0..12)).prop_map(move |(pick, cuts)| {
        let body = seeds[pick.index(seeds.len())][1..].to_vec();
        let cuts: Vec<usize> = cuts.iter().map(|c| at_index(c, body.len() + 1)).collect();
        (body, cuts)
    });
    fuzz_for(&format!("{name} (generated cuts)"), cut, |(body, cuts)| {
        askloop_fuzz::stream_case(format, &body, &cuts)
    });
}

#[test]
fn openai_stream_parses_the_same_however_it_is_cut() {
    stream_target("openai_stream", Format::OpenAi);
}

#[test]
fn anthropic_stream_parses_the_same_however_it_is_cut() {
    stream_target("anthropic_stream", Format::Anthropic);
}

#[test]
fn sse_decoder_decodes_the_same_however_it_is_cut() {
    bytes_target("sse_decoder");
}

#[test]
fn script_files_load_or_are_refused_and_their_runs_end() {
    bytes_target("script_file");
}

#[test]
fn config_files_load_or_are_refused_with_the_key() {
    bytes_target("config_file");
}

#[test]
fn server_bodies_get_a_4xx_with_a_reason_or_a_2xx() {
    bytes_target("server_body");
}

#[test]
fn every_target_has_a_seed_corpus() {
    for (name, target) in askloop_fuzz::TARGETS {
        for seed in corpus(name) {
            target(&seed);
        }
    }
}
