//! The client half of the `http` modes: a run streamed over HTTP from
//! `askloop serve` until it suspends, and resumed until it finishes, read as
//! a Mastra client reads it (SSE frames `data: <chunk>`, then `data: [DONE]`).
//!
//! Only the chunks the checks need are parsed (the question, the final
//! text, an error): the client shares the machine with the server it
//! measures, so it does no more work than it must.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop_testkit::workload;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::environment::AGENT_ID;
use crate::run::{DEPLOY_ANSWER, DEPLOY_EXPECTED};

/// What a stream over HTTP showed, and how long it took.
#[derive(Debug, Default)]
pub struct HttpStreamed {
    /// From sending the request to the end of the body.
    pub elapsed: Duration,
    /// The run id of the chunks.
    pub run_id: Option<String>,
    /// The `tool-call-suspended` chunk's call id and question.
    pub suspended: Option<(String, Option<String>)>,
    /// The `finish` chunk's text.
    pub finished: Option<String>,
    /// An `error` chunk's message.
    pub error: Option<String>,
    /// Whether the body ended with `data: [DONE]`.
    pub done: bool,
}

/// Starts a run of the bench's agent and reads its stream to the end.
pub async fn start(client: &reqwest::Client, api: &str) -> anyhow::Result<HttpStreamed> {
    let url = format!("{api}/agents/{AGENT_ID}/stream");
    stream(client, &url, &json!({"messages": workload::DEPLOY_PROMPT})).await
}

/// Answers a suspended run and reads the resumed stream to the end.
pub async fn resume(
    client: &reqwest::Client,
    api: &str,
    run_id: &str,
    tool_call_id: &str,
) -> anyhow::Result<HttpStreamed> {
    let url = format!("{api}/agents/{AGENT_ID}/resume-stream");
    let body = json!({"runId": run_id, "toolCallId": tool_call_id, "resumeData": DEPLOY_ANSWER});
    stream(client, &url, &body).await
}

/// A suspended run: its id and the call to answer, checked against the
/// bench's question.
pub fn expect_question(streamed: &HttpStreamed) -> anyhow::Result<(String, String)> {
    match (&streamed.run_id, &streamed.suspended) {
        (Some(run_id), Some((call, Some(question)))) if question == workload::DEPLOY_QUESTION && streamed.done => {
            Ok((run_id.clone(), call.clone()))
        }
        _ => bail!(
            "the stream should have suspended on {:?}; it showed {streamed:?}",
            workload::DEPLOY_QUESTION
        ),
    }
}

/// Checks a resumed stream finished with the bench's expected text.
pub fn expect_finish(streamed: &HttpStreamed) -> anyhow::Result<()> {
    match &streamed.finished {
        Some(text) if text == DEPLOY_EXPECTED && streamed.done && streamed.suspended.is_none() => Ok(()),
        _ => bail!("the resumed stream should have finished with {DEPLOY_EXPECTED:?}; it showed {streamed:?}"),
    }
}

/// One round trip over HTTP, checked: (suspend time, resume time).
pub async fn round_trip(client: &reqwest::Client, api: &str) -> anyhow::Result<(Duration, Duration)> {
    let suspended = start(client, api).await?;
    let (run_id, call) = expect_question(&suspended)?;
    let resumed = resume(client, api, &run_id, &call).await?;
    expect_finish(&resumed)?;
    Ok((suspended.elapsed, resumed.elapsed))
}

async fn stream(client: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<HttpStreamed> {
    let started = Instant::now();
    let response = client
        .post(url)
        .json(body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        bail!("POST {url}: {status}: {text}");
    }
    let mut streamed = HttpStreamed::default();
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    while let Some(bytes) = body.next().await {
        buffer.extend_from_slice(&bytes.with_context(|| format!("reading the stream of {url}"))?);
        let mut consumed = 0;
        while let Some(end) = find_frame_end(&buffer[consumed..]) {
            read_frame(&buffer[consumed..consumed + end], &mut streamed)?;
            consumed += end + 2;
        }
        buffer.drain(..consumed);
    }
    if !buffer.iter().all(u8::is_ascii_whitespace) {
        bail!("the stream of {url} ended inside a frame");
    }
    streamed.elapsed = started.elapsed();
    Ok(streamed)
}

fn find_frame_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\n\n")
}

/// The chunk types the checks read; every chunk begins with its type
/// (`{"type":"...`), so the others are skipped unparsed.
const READ: [&str; 3] = [
    r#"{"type":"tool-call-suspended""#,
    r#"{"type":"finish""#,
    r#"{"type":"error""#,
];

fn read_frame(frame: &[u8], streamed: &mut HttpStreamed) -> anyhow::Result<()> {
    let Some(data) = frame.strip_prefix(b"data: ") else {
        bail!("an SSE frame without `data: `: {}", String::from_utf8_lossy(frame));
    };
    if data == b"[DONE]" {
        streamed.done = true;
        return Ok(());
    }
    if streamed.done {
        bail!("a frame after `data: [DONE]`");
    }
    if !READ.iter().any(|prefix| data.starts_with(prefix.as_bytes())) && streamed.run_id.is_some() {
        return Ok(());
    }
    let chunk: Value = serde_json::from_slice(data).context("a chunk that is not JSON")?;
    if streamed.run_id.is_none() {
        streamed.run_id = chunk["runId"].as_str().map(str::to_owned);
    }
    let payload = &chunk["payload"];
    match chunk["type"].as_str() {
        Some("tool-call-suspended") => {
            let call = payload["toolCallId"].as_str().unwrap_or_default().to_owned();
            let question = payload["suspendPayload"]["question"].as_str().map(str::to_owned);
            streamed.suspended = Some((call, question));
        }
        Some("finish") => streamed.finished = payload["output"]["text"].as_str().map(str::to_owned),
        Some("error") => streamed.error = Some(payload["error"]["message"].to_string()),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_give_the_run_the_question_and_the_end() {
        let mut streamed = HttpStreamed::default();
        let frames = [
            r#"data: {"type":"start","runId":"r1","from":"AGENT","payload":{}}"#,
            r#"data: {"type":"text-delta","runId":"r1","from":"AGENT","payload":{"text":"x"}}"#,
            r#"data: {"type":"tool-call-suspended","runId":"r1","from":"AGENT","payload":{"toolCallId":"c1","suspendPayload":{"question":"Which environment should I deploy to?"}}}"#,
            "data: [DONE]",
        ];
        for frame in frames {
            read_frame(frame.as_bytes(), &mut streamed).unwrap();
        }
        assert_eq!(expect_question(&streamed).unwrap(), ("r1".to_owned(), "c1".to_owned()));
        assert!(expect_finish(&streamed).is_err());
        assert!(read_frame(b"data: {}", &mut streamed).is_err(), "nothing after [DONE]");
        assert!(read_frame(b"event: x", &mut HttpStreamed::default()).is_err());
    }
}
