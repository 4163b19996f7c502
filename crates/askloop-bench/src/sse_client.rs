//! The client half of the `http` modes: a run streamed over HTTP from
//! `askloop serve` until it suspends, and resumed until it finishes, read as
//! a Mastra client reads it (SSE events `data: <chunk>`, then `data: [DONE]`),
//! with askloop's SSE reader.
//!
//! Only the chunks the checks need are parsed (the question, the final
//! text, an error): the client shares the machine with the server it
//! measures, so it does no more work than it must.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use askloop::sse::{SseDecoder, SseEvent};
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

/// The bench's HTTP client: straight to the loopback servers, no proxy.
pub fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("cannot build the HTTP client")
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

/// The final text when the server is Mastra's (`bench/mastra`): Mastra's
/// `askUserTool` hands the model its result as JSON, which the fake model
/// repeats.
const MASTRA_EXPECTED: &str = r#"Deploying to {"content":"User answered: staging","isError":false}."#;

/// Checks a resumed stream finished with the bench's expected text (askloop's,
/// or Mastra's when `--server-bin` is Mastra's server).
pub fn expect_finish(streamed: &HttpStreamed) -> anyhow::Result<()> {
    match &streamed.finished {
        Some(text)
            if (text == DEPLOY_EXPECTED || text == MASTRA_EXPECTED)
                && streamed.done
                && streamed.suspended.is_none() =>
        {
            Ok(())
        }
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
    let mut reader = StreamReader::default();
    let mut body = response.bytes_stream();
    while let Some(bytes) = body.next().await {
        reader
            .push(&bytes.with_context(|| format!("reading the stream of {url}"))?)
            .with_context(|| format!("the stream of {url}"))?;
    }
    let mut streamed = reader.finish().with_context(|| format!("the stream of {url}"))?;
    streamed.elapsed = started.elapsed();
    Ok(streamed)
}

/// Reads a stream's body as its chunks arrive: the events are cut by
/// [`SseDecoder`], which looks at each byte once, and only the chunks the
/// checks need are parsed.
#[derive(Debug, Default)]
struct StreamReader {
    decoder: SseDecoder,
    streamed: HttpStreamed,
}

impl StreamReader {
    /// Reads the events `bytes` completes.
    fn push(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.decoder.push(bytes);
        while let Some(event) = self.decoder.next_event()? {
            read_event(&event, &mut self.streamed)?;
        }
        Ok(())
    }

    /// The body ended: what it showed, unless it stopped inside an event.
    fn finish(mut self) -> anyhow::Result<HttpStreamed> {
        self.decoder.end();
        if self.decoder.is_inside_event() {
            bail!("the body ended inside an event");
        }
        Ok(self.streamed)
    }
}

/// The chunk types the checks read; every chunk begins with its type
/// (`{"type":"...`), so the others are skipped unparsed.
const READ: [&str; 3] = [
    r#"{"type":"tool-call-suspended""#,
    r#"{"type":"finish""#,
    r#"{"type":"error""#,
];

fn read_event(event: &SseEvent<'_>, streamed: &mut HttpStreamed) -> anyhow::Result<()> {
    if event.event != "message" {
        bail!(
            "an `event: {}` event: askloop's streams are `data:` events only",
            event.event
        );
    }
    let data = event.data;
    if data == "[DONE]" {
        streamed.done = true;
        return Ok(());
    }
    if streamed.done {
        bail!("an event after `data: [DONE]`");
    }
    if !READ.iter().any(|prefix| data.starts_with(prefix)) && streamed.run_id.is_some() {
        return Ok(());
    }
    let chunk: Value = serde_json::from_str(data).context("a chunk that is not JSON")?;
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

    const STREAM: &str = concat!(
        r#"data: {"type":"start","runId":"r1","from":"AGENT","payload":{}}"#,
        "\n\n",
        r#"data: {"type":"text-delta","runId":"r1","from":"AGENT","payload":{"text":"x"}}"#,
        "\n\n",
        r#"data: {"type":"tool-call-suspended","runId":"r1","from":"AGENT","payload":{"toolCallId":"c1","suspendPayload":{"question":"Which environment should I deploy to?"}}}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );

    fn read(chunks: &[&[u8]]) -> anyhow::Result<HttpStreamed> {
        let mut reader = StreamReader::default();
        for chunk in chunks {
            reader.push(chunk)?;
        }
        reader.finish()
    }

    #[test]
    fn events_give_the_run_the_question_and_the_end_however_the_body_is_cut() {
        for size in [1, 7, STREAM.len()] {
            let chunks: Vec<&[u8]> = STREAM.as_bytes().chunks(size).collect();
            let streamed = read(&chunks).unwrap();
            assert_eq!(expect_question(&streamed).unwrap(), ("r1".to_owned(), "c1".to_owned()));
            assert!(expect_finish(&streamed).is_err());
        }
    }

    #[test]
    fn an_event_after_done_a_typed_event_and_a_cut_body_are_errors() {
        let after_done = format!("{STREAM}data: {{}}\n\n");
        let err = read(&[after_done.as_bytes()]).unwrap_err();
        assert!(err.to_string().contains("after `data: [DONE]`"), "{err}");
        let typed = read(&[&b"event: x\ndata: {}\n\n"[..]]).unwrap_err();
        assert!(typed.to_string().contains("`event: x`"), "{typed}");
        let cut = read(&[STREAM.as_bytes(), &b"data: {\"type\""[..]]).unwrap_err();
        assert!(cut.to_string().contains("ended inside an event"), "{cut}");
        assert!(read(&[&b"data: not json\n\n"[..]]).is_err());
    }
}
