//! A run's trace: one OpenTelemetry trace for the whole life of a run,
//! however long it waits and whichever process drives it.
//!
//! The library only describes spans (with `tracing`, plus the OpenTelemetry
//! API for the wait, whose times come from the store): nothing is exported
//! unless the program installs an OpenTelemetry tracer provider and the
//! `tracing-opentelemetry` layer (the `askloop` binary does when export is
//! on). Without them every call here costs a span that no one records.
//!
//! - The first drive of a run (`drive`, exported as `invoke_agent <agent>`)
//!   is a child of whatever span is current when the run starts (a server's
//!   request span, itself a child of the caller's `traceparent`). Its W3C
//!   `traceparent` is stored with the run ([`RunRecord::trace_parent`]).
//! - Every later drive (a resume, an approval, a recovery, an expiry), in
//!   this process or another, is a child of that stored context, and links
//!   the span current when it began (the resuming request) instead of
//!   becoming its child.
//! - Each model call is a `chat <model>` span and each tool call an
//!   `execute_tool <tool>` span, with the OpenTelemetry GenAI attributes.
//! - A question raised is an `askloop.question` event on the drive; when
//!   the wait ends a `wait <tool>` span is written with the stored times
//!   (from the run's last write before the claim to the decision) and who
//!   decided, from the run's audit record.
//!
//! A run stored with export off has no trace context: its later drives
//! start traces of their own.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, global};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::message::{FinishReason, Usage};
use crate::store::{Author, PendingKind, PendingToolCall, ResolutionKind, RunRecord};

/// The instrumentation scope of the spans written with the OpenTelemetry
/// API directly (the waits).
const SCOPE: &str = "askloop";

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

/// Whether spans carry message contents: the model's output text
/// (`gen_ai.output.messages`) and a tool call's arguments
/// (`gen_ai.tool.call.arguments`). Off by default: they may hold what
/// people typed. Set once at start-up by the program.
pub fn capture_message_content(on: bool) {
    CAPTURE_CONTENT.store(on, Ordering::Relaxed);
}

pub(crate) fn captures_content() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// How a drive of a run began, as the `askloop.drive` attribute says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DriveKind {
    Start,
    Resume,
    Recover,
}

impl DriveKind {
    fn as_str(self) -> &'static str {
        match self {
            DriveKind::Start => "start",
            DriveKind::Resume => "resume",
            DriveKind::Recover => "recover",
        }
    }
}

/// The span of one drive of a run. Made when the drive is set up (not
/// when it is first polled), so a new run's drive is a child of the span
/// current then. A drive of a run that has a stored trace context
/// continues it, and links the span current now.
pub(crate) fn drive_span(run_id: &str, agent_id: &str, trace_parent: Option<&str>, kind: DriveKind) -> tracing::Span {
    let span = tracing::info_span!(
        "drive",
        run_id = %run_id,
        agent_id = %agent_id,
        trace_id = tracing::field::Empty,
        otel.name = %format_args!("invoke_agent {agent_id}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.id = %agent_id,
        askloop.run.id = %run_id,
        askloop.drive = kind.as_str(),
    );
    if span.is_disabled() {
        return span;
    }
    if kind != DriveKind::Start
        && let Some(stored) = trace_parent.and_then(parse_traceparent)
    {
        let current = tracing::Span::current().context().span().span_context().clone();
        // Ignored when no OpenTelemetry layer is installed.
        let _ = span.set_parent(Context::new().with_remote_span_context(stored.clone()));
        if current.is_valid() && current.trace_id() != stored.trace_id() {
            span.add_link(current);
        }
    }
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        // Every log line of the drive carries the trace it belongs to.
        span.record("trace_id", tracing::field::display(own.trace_id()));
    }
    span
}

/// The trace context to store with a new run: its first drive's, as a
/// W3C `traceparent`; `None` when nothing is exported.
pub(crate) fn stored_context(drive: &tracing::Span) -> Option<String> {
    format_traceparent(drive.context().span().span_context())
}

/// The span of one model call (`chat <model>`), with the usage and
/// finish reason recorded when it ends ([`model_call_ended`]).
pub(crate) fn model_span(run_id: &str, step: u32, model_name: &str) -> tracing::Span {
    // Model names are written `provider/model` (`openai/gpt-4o-mini`).
    let (provider, model) = model_name.split_once('/').unwrap_or((model_name, model_name));
    tracing::info_span!(
        "model_step",
        run_id = %run_id,
        step,
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.system = %provider,
        gen_ai.request.model = %model,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.output.messages = tracing::field::Empty,
        askloop.run.id = %run_id,
    )
}

/// Records what a model call used and why it stopped (and its text, when
/// contents are captured) on its span.
pub(crate) fn model_call_ended(span: &tracing::Span, usage: Usage, finish_reason: &FinishReason, text: &str) {
    if span.is_disabled() {
        // Nothing records it (export off, logs below info): no work.
        return;
    }
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    if let Ok(serde_json::Value::String(reason)) = serde_json::to_value(finish_reason) {
        span.record("gen_ai.response.finish_reasons", reason);
    }
    if captures_content() {
        // The GenAI conventions' shape: the output messages as JSON.
        let messages = serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]);
        span.record("gen_ai.output.messages", tracing::field::display(messages));
    }
}

/// The span of one tool call (`execute_tool <tool>`).
pub(crate) fn tool_span(run_id: &str, tool_call_id: &str, tool_name: &str, args: &serde_json::Value) -> tracing::Span {
    let span = tracing::info_span!(
        "tool_call",
        tool_call_id = %tool_call_id,
        tool = %tool_name,
        otel.name = %format_args!("execute_tool {tool_name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool_name,
        gen_ai.tool.call.id = %tool_call_id,
        gen_ai.tool.call.arguments = tracing::field::Empty,
        askloop.tool.outcome = tracing::field::Empty,
        askloop.run.id = %run_id,
    );
    if captures_content() && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", tracing::field::display(args));
    }
    span
}

/// A question (`kind`: `question`) or an approval (`approval`) the run
/// now waits on, stored: an event on the drive's span.
pub(crate) fn question_raised(tool_name: &str, tool_call_id: &str, kind: &'static str) {
    tracing::info!(
        target: "askloop::trace",
        message = "askloop.question",
        gen_ai.tool.name = %tool_name,
        gen_ai.tool.call.id = %tool_call_id,
        askloop.question.kind = kind,
    );
}

fn pending_kind(kind: PendingKind) -> &'static str {
    match kind {
        PendingKind::Suspended => "question",
        PendingKind::Approval => "approval",
    }
}

/// The wait of one call, ended by a decision at `resolved_at`: a span
/// from `raised_at` (the run's last stored write before the decision) in
/// the run's stored trace. Nothing when the run has no trace context.
pub(crate) fn wait_ended(
    record: &RunRecord,
    call: &PendingToolCall,
    how: ResolutionKind,
    author: Option<&Author>,
    raised_at: DateTime<Utc>,
    resolved_at: DateTime<Utc>,
) {
    let Some(parent) = record.trace_parent.as_deref().and_then(parse_traceparent) else {
        return;
    };
    let tracer = global::tracer(SCOPE);
    let mut attributes = vec![
        KeyValue::new("askloop.run.id", record.run_id.clone()),
        KeyValue::new("run_id", record.run_id.clone()),
        KeyValue::new("gen_ai.tool.name", call.tool_name.clone()),
        KeyValue::new("gen_ai.tool.call.id", call.tool_call_id.clone()),
        KeyValue::new("askloop.question.kind", pending_kind(call.kind)),
        KeyValue::new("askloop.wait.resolution", how.as_str()),
        KeyValue::new("askloop.wait.raised_at", crate::rfc3339(raised_at)),
        KeyValue::new("askloop.wait.resolved_at", crate::rfc3339(resolved_at)),
    ];
    if let Some(author) = author {
        attributes.push(KeyValue::new("askloop.wait.via", author.via.as_str()));
        if let Some(by) = &author.by {
            attributes.push(KeyValue::new("askloop.wait.by", by.clone()));
        }
    }
    let mut span = tracer
        .span_builder(format!("wait {}", call.tool_name))
        .with_kind(SpanKind::Internal)
        .with_start_time(std::time::SystemTime::from(raised_at))
        .with_attributes(attributes)
        .start_with_context(&tracer, &Context::new().with_remote_span_context(parent));
    span.end_with_timestamp(std::time::SystemTime::from(resolved_at.max(raised_at)));
}

/// Makes `span` (a server's span of one request, not yet entered) a
/// child of the caller's trace, named by its W3C `traceparent` header: a
/// run started by the request is then part of the caller's trace, and a
/// later drive of a run links it. A value outside the W3C form is ignored,
/// as the W3C Trace Context rules ask.
pub fn continue_caller_trace(span: &tracing::Span, traceparent: &str) {
    if let Some(caller) = parse_traceparent(traceparent) {
        // Ignored when no OpenTelemetry layer is installed.
        let _ = span.set_parent(Context::new().with_remote_span_context(caller));
    }
}

/// A span context as a W3C `traceparent` header value
/// (`00-<trace id>-<span id>-<flags>`); `None` for an invalid context.
pub fn format_traceparent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// A W3C `traceparent` header value as a remote span context: `None` for
/// anything the W3C Trace Context format does not accept (a version other
/// than a two-digit hex number below `ff`, ids of the wrong length, not
/// lowercase hex or all zeros).
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    let rest = parts.next();
    let lower_hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !lower_hex(version, 2)
        || version == "ff"
        || !lower_hex(trace_id, 32)
        || !lower_hex(span_id, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    // Version 00 has exactly four fields; later versions may add more.
    if version == "00" && rest.is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_through_the_w3c_form() {
        let value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(value).unwrap();
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled());
        assert!(context.is_remote());
        assert_eq!(format_traceparent(&context).as_deref(), Some(value));
    }

    #[test]
    fn traceparents_outside_the_w3c_form_are_refused() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let value = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(parse_traceparent(value).is_some());
    }

    #[test]
    fn without_an_exporter_a_new_run_stores_no_trace_context() {
        let span = drive_span("run", "agent", None, DriveKind::Start);
        assert_eq!(stored_context(&span), None);
    }
}
