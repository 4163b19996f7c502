//! What a person receives: one message per waiting call, with a plain-text
//! and an HTML part, saying what is asked and giving the answer link.
//!
//! The question's text, its options and a tool's arguments are the model's
//! words, not ours: in the HTML part every one of them is escaped and
//! stays text (never markup, never a link); in the plain-text part it is
//! quoted (each line starts with `> `), so a line of the model's can never
//! pass for one of ours; and the subject holds none of its line breaks or
//! other control characters, so it cannot add a header. The only link in
//! the message is the answer link. Everywhere (subject, text and HTML),
//! bidirectional controls and invisible characters are marked as their code
//! points (`<U+202E>`, [`askloop::visible`]; in the HTML part, styled apart
//! from the text), so an approval's arguments read as they will run.

use std::fmt::Write as _;

use askloop::visible::{self, Piece};
use askloop::{Notice, PendingToolCall, SelectionMode};
use chrono::{DateTime, Utc};

use crate::reach::{Asked, asked};

/// The most characters of the question the subject carries.
const SUBJECT_QUESTION_CHARS: usize = 80;

/// What one message is about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MailQuestion<'a> {
    /// The agent that asks (its id).
    pub(crate) agent: &'a str,
    /// The run.
    pub(crate) run_id: &'a str,
    /// Whom it is for (the link answers as them).
    pub(crate) recipient: &'a str,
    /// The waiting call.
    pub(crate) call: &'a PendingToolCall,
    /// The answer link.
    pub(crate) link: &'a str,
    /// When the link stops working.
    pub(crate) expires_at: DateTime<Utc>,
    /// Which notice of the question this is.
    pub(crate) notice: Notice,
    /// When the question was raised.
    pub(crate) raised_at: DateTime<Utc>,
}

/// A message's subject and its two bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Composed {
    pub(crate) subject: String,
    pub(crate) text: String,
    pub(crate) html: String,
}

/// Composes the message of `question`.
pub(crate) fn compose(question: &MailQuestion<'_>) -> Composed {
    let asked = asked(question.call);
    let agent = one_line(question.agent, 60);
    let tag = match question.notice {
        Notice::Reminder => "[askloop] Reminder:",
        Notice::Escalation => "[askloop] Still waiting:",
        _ => "[askloop]",
    };
    let subject = match &asked {
        Asked::Question(q) => format!("{tag} {agent} asks: {}", one_line(&q.text, SUBJECT_QUESTION_CHARS)),
        Asked::Approval { tool, .. } => format!("{tag} {agent} asks to run {}", one_line(tool, 60)),
        Asked::Other { tool, .. } => format!("{tag} {agent} waits on {}", one_line(tool, 60)),
    };
    Composed {
        subject,
        text: text_body(question, &asked),
        html: html_body(question, &asked),
    }
}

/// What a later notice says first: why it comes now.
fn notice_line(q: &MailQuestion<'_>) -> Option<String> {
    let raised = askloop::rfc3339(q.raised_at);
    match q.notice {
        Notice::Reminder => Some(format!(
            "A reminder: this was asked at {raised} and still waits for an answer."
        )),
        Notice::Escalation => Some(format!(
            "This was asked at {raised} and has had no answer since, so it comes to you as well."
        )),
        _ => None,
    }
}

/// `text` on one line: control characters (line breaks among them) become
/// spaces, runs of spaces one, cut to `max` characters; what a reader could
/// not see is marked.
fn one_line(text: &str, max: usize) -> String {
    let spaced: String = text
        .chars()
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let joined = visible::marked(&words.join(" ")).into_owned();
    if joined.chars().count() <= max {
        return joined;
    }
    let cut: String = joined.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// Each line of `text` prefixed with `> `, what a reader could not see
/// marked.
fn quoted(text: &str) -> String {
    visible::marked(text)
        .lines()
        .map(|line| format!("> {line}\n"))
        .collect()
}

fn mode_hint(mode: Option<SelectionMode>) -> &'static str {
    match mode {
        Some(SelectionMode::MultiSelect) => "Choose one or more of:",
        Some(SelectionMode::SingleSelect) => "Choose one of:",
        _ => "Choose one of:",
    }
}

fn text_body(q: &MailQuestion<'_>, asked: &Asked) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Hello {},\n", one_line(q.recipient, 200));
    if let Some(line) = notice_line(q) {
        let _ = writeln!(out, "{line}\n");
    }
    match asked {
        Asked::Question(question) => {
            let _ = writeln!(out, "Agent {} asks (its words, quoted):\n", one_line(q.agent, 60));
            out.push_str(&quoted(&question.text));
            if !question.options.is_empty() {
                let _ = writeln!(out, "\n{}", mode_hint(question.mode));
                for option in &question.options {
                    let line = match &option.description {
                        Some(d) => format!("{}: {}", option.label, d),
                        None => option.label.clone(),
                    };
                    out.push_str(&quoted(&format!("- {}", one_line(&line, 400))));
                }
            }
        }
        Asked::Approval { tool, args } => {
            let _ = writeln!(
                out,
                "Agent {} asks for approval to run the tool {} with these arguments:\n",
                one_line(q.agent, 60),
                one_line(tool, 200)
            );
            out.push_str(&quoted(args));
        }
        Asked::Other { tool, payload } => {
            let _ = writeln!(
                out,
                "Agent {} waits on the tool {}, which asks:\n",
                one_line(q.agent, 60),
                one_line(tool, 200)
            );
            out.push_str(&quoted(payload));
        }
    }
    let _ = write!(
        out,
        "\nAnswer here (the link works once, until {}):\n{}\n\n\
         Whoever opens this link answers as {}: do not forward this mail.\n\
         Run {}, call {}.\n",
        askloop::rfc3339(q.expires_at),
        q.link,
        one_line(q.recipient, 200),
        one_line(q.run_id, 200),
        one_line(&q.call.tool_call_id, 200),
    );
    out
}

/// `text` with the characters HTML gives meaning to escaped.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Someone else's `text` as HTML: escaped, and each character a reader
/// could not see marked as its code point, set apart from the text.
fn shown_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for piece in visible::pieces(text) {
        match piece {
            Piece::Shown(shown) => out.push_str(&escape_html(shown)),
            Piece::Marked(c) => {
                let _ = write!(
                    out,
                    "<span title=\"an invisible character, {point}\" style=\"font-family:ui-monospace,Menlo,Consolas,monospace;font-size:0.85em;color:#9a3412;background:#ffedd5;border-radius:3px;padding:0 2px;white-space:nowrap\">&lt;{point}&gt;</span>",
                    point = visible::code_point(c)
                );
            }
        }
    }
    out
}

fn html_body(q: &MailQuestion<'_>, asked: &Asked) -> String {
    let e = shown_html;
    let mut body = String::new();
    let _ = write!(body, "<p>Hello {},</p>", e(q.recipient));
    if let Some(line) = notice_line(q) {
        let _ = write!(body, "<p><b>{}</b></p>", e(&line));
    }
    match asked {
        Asked::Question(question) => {
            let _ = write!(body, "<p>Agent <b>{}</b> asks:</p>", e(q.agent));
            let _ = write!(
                body,
                "<blockquote style=\"margin:0 0 16px;padding:12px 16px;border-left:4px solid #4f6bed;background:#f4f6fb;white-space:pre-wrap\">{}</blockquote>",
                e(&question.text)
            );
            if !question.options.is_empty() {
                let _ = write!(body, "<p>{}</p><ul>", mode_hint(question.mode));
                for option in &question.options {
                    let _ = write!(body, "<li><b>{}</b>", e(&option.label));
                    if let Some(d) = &option.description {
                        let _ = write!(body, ": {}", e(d));
                    }
                    body.push_str("</li>");
                }
                body.push_str("</ul>");
            }
        }
        Asked::Approval { tool, args } => {
            let _ = write!(
                body,
                "<p>Agent <b>{}</b> asks for approval to run the tool <code>{}</code> with these arguments:</p><pre style=\"padding:12px 16px;background:#f4f6fb;white-space:pre-wrap\">{}</pre>",
                e(q.agent),
                e(tool),
                e(args)
            );
        }
        Asked::Other { tool, payload } => {
            let _ = write!(
                body,
                "<p>Agent <b>{}</b> waits on the tool <code>{}</code>, which asks:</p><pre style=\"padding:12px 16px;background:#f4f6fb;white-space:pre-wrap\">{}</pre>",
                e(q.agent),
                e(tool),
                e(payload)
            );
        }
    }
    let _ = write!(
        body,
        "<p><a href=\"{link}\" style=\"display:inline-block;padding:10px 18px;background:#4f6bed;color:#fff;border-radius:6px;text-decoration:none\">Open the question and answer</a></p>\
         <p style=\"color:#555;font-size:13px\">The link works once, until {expires}. Whoever opens it answers as {to}: do not forward this mail.<br>Run {run}, call {call}.</p>",
        link = escape_html(q.link),
        expires = e(&askloop::rfc3339(q.expires_at)),
        to = e(q.recipient),
        run = e(q.run_id),
        call = e(&q.call.tool_call_id),
    );
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title></head>\
         <body style=\"font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:640px;margin:24px auto;padding:0 16px;color:#1d1d1f;line-height:1.5\">{body}</body></html>",
        escape_html(&visible::marked(&format!("Question from {}", q.agent)))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop::PendingKind;
    use serde_json::json;

    fn call(payload: serde_json::Value) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: "call_1".into(),
            tool_name: "ask_user".into(),
            args: payload.clone().into(),
            kind: PendingKind::Suspended,
            suspend_payload: Some(payload.into()),
            resume_schema: None,
            expires_at: None,
            started_at: None,
        }
    }

    fn call_with(question: &str) -> PendingToolCall {
        call(json!({ "question": question }))
    }

    fn composed(call: &PendingToolCall) -> Composed {
        composed_as(call, Notice::First)
    }

    fn composed_as(call: &PendingToolCall, notice: Notice) -> Composed {
        compose(&MailQuestion {
            agent: "deployer",
            run_id: "run_1",
            recipient: "Alice",
            call,
            link: "https://askloop.example.com/links/tok",
            expires_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            notice,
            raised_at: DateTime::from_timestamp(1_799_990_000, 0).unwrap(),
        })
    }

    #[test]
    fn a_reminder_and_an_escalation_say_so_in_the_subject_and_first_in_both_bodies() {
        let call = call_with("Deploy to production?");
        let first = composed_as(&call, Notice::First);
        assert_eq!(first.subject, "[askloop] deployer asks: Deploy to production?");
        assert!(!first.text.contains("still waits"), "{}", first.text);

        let reminder = composed_as(&call, Notice::Reminder);
        assert_eq!(
            reminder.subject,
            "[askloop] Reminder: deployer asks: Deploy to production?"
        );
        let said = "A reminder: this was asked at 2027-01-15T05:13:20.000Z and still waits for an answer.";
        assert!(
            reminder.text.starts_with(&format!("Hello Alice,\n\n{said}\n")),
            "{}",
            reminder.text
        );
        assert!(
            reminder.html.contains(&format!("<p><b>{said}</b></p>")),
            "{}",
            reminder.html
        );

        let escalation = composed_as(&call, Notice::Escalation);
        assert_eq!(
            escalation.subject,
            "[askloop] Still waiting: deployer asks: Deploy to production?"
        );
        assert!(
            escalation
                .text
                .contains("has had no answer since, so it comes to you as well"),
            "{}",
            escalation.text
        );
    }

    #[test]
    fn a_hostile_question_stays_text_in_html_quoted_in_text_and_out_of_the_subject_lines() {
        let hostile = "Pick one</blockquote><a href=\"https://evil.example\">click</a><script>x()</script>\r\nBcc: victim@example.com\r\n\r\nAnswer here: https://evil.example/links/fake";
        let call = call(
            json!({"question": hostile, "options": [{"label": "<b>yes</b>", "description": "<img src=x>"}], "selectionMode": "single_select"}),
        );
        let mail = composed(&call);
        assert!(
            !mail.subject.contains('\r') && !mail.subject.contains('\n'),
            "{:?}",
            mail.subject
        );
        assert!(
            mail.subject
                .starts_with("[askloop] deployer asks: Pick one</blockquote>"),
            "{:?}",
            mail.subject
        );
        let short = composed(&call_with("Deploy?\r\nBcc: victim@example.com"));
        assert_eq!(
            short.subject,
            "[askloop] deployer asks: Deploy? Bcc: victim@example.com"
        );
        assert!(!mail.html.contains("<a href=\"https://evil"), "{}", mail.html);
        assert!(!mail.html.contains("<script>") && !mail.html.contains("<img") && !mail.html.contains("<b>yes"));
        assert!(
            mail.html
                .contains("&lt;a href=&quot;https://evil.example&quot;&gt;click&lt;/a&gt;")
        );
        assert_eq!(
            mail.html.matches("<a ").count(),
            1,
            "only the answer link: {}",
            mail.html
        );
        assert!(
            mail.text.contains("> Answer here: https://evil.example/links/fake"),
            "{}",
            mail.text
        );
        assert!(
            mail.text.contains("Answer here (the link works once"),
            "ours is unquoted: {}",
            mail.text
        );
    }

    #[test]
    fn an_approval_names_the_tool_and_its_arguments() {
        let mut approval = call(json!({}));
        approval.kind = PendingKind::Approval;
        approval.tool_name = "write_file".into();
        approval.args = json!({"path": "notes/plan.md"}).into();
        approval.suspend_payload = None;
        let mail = composed(&approval);
        assert_eq!(mail.subject, "[askloop] deployer asks to run write_file");
        assert!(mail.text.contains("> {") && mail.text.contains("\"path\": \"notes/plan.md\""));
        assert!(mail.html.contains("<code>write_file</code>") && mail.html.contains("&quot;path&quot;"));
    }

    #[test]
    fn an_approvals_arguments_read_as_they_will_run_in_the_subject_text_and_html() {
        let mut approval = call(json!({}));
        approval.kind = PendingKind::Approval;
        approval.tool_name = "write_file\u{2066}".into();
        approval.args = json!({"path": "docs/report_\u{202e}hs.gpj", "content": "a\u{200b}b\u{feff}"}).into();
        approval.suspend_payload = None;
        let mail = composed(&approval);
        assert_eq!(mail.subject, "[askloop] deployer asks to run write_file<U+2066>");
        assert!(
            mail.text.contains("\"path\": \"docs/report_<U+202E>hs.gpj\""),
            "{}",
            mail.text
        );
        assert!(mail.text.contains("a<U+200B>b<U+FEFF>"), "{}", mail.text);
        assert!(mail.text.contains("the tool write_file<U+2066> with"), "{}", mail.text);
        let marked = |point: &str| {
            format!(
                "<span title=\"an invisible character, {point}\" style=\"font-family:ui-monospace,Menlo,Consolas,monospace;font-size:0.85em;color:#9a3412;background:#ffedd5;border-radius:3px;padding:0 2px;white-space:nowrap\">&lt;{point}&gt;</span>"
            )
        };
        assert!(
            mail.html
                .contains(&format!("&quot;docs/report_{}hs.gpj&quot;", marked("U+202E"))),
            "{}",
            mail.html
        );
        assert!(
            mail.html
                .contains(&format!("<code>write_file{}</code>", marked("U+2066"))),
            "{}",
            mail.html
        );
        for part in [&mail.subject, &mail.text, &mail.html] {
            for c in ['\u{202e}', '\u{2066}', '\u{200b}', '\u{feff}'] {
                assert!(!part.contains(c), "{c:?} in {part}");
            }
        }
    }

    #[test]
    fn a_questions_text_and_options_show_their_invisible_characters() {
        let mail = composed(&call(json!({
            "question": "Ship \u{202e}v2?\u{e0041}",
            "options": [{"label": "yes\u{200b}", "description": "now\u{2069}"}],
            "selectionMode": "single_select",
        })));
        assert_eq!(mail.subject, "[askloop] deployer asks: Ship <U+202E>v2?<U+E0041>");
        assert!(mail.text.contains("> Ship <U+202E>v2?<U+E0041>\n"), "{}", mail.text);
        assert!(mail.text.contains("> - yes<U+200B>: now<U+2069>\n"), "{}", mail.text);
        assert!(mail.html.contains("&lt;U+202E&gt;</span>v2?"), "{}", mail.html);
        assert!(mail.html.contains("<li><b>yes<span"), "{}", mail.html);
    }

    #[test]
    fn a_long_question_is_cut_in_the_subject() {
        let mail = composed(&call(json!({"question": "why ".repeat(100)})));
        assert!(mail.subject.ends_with('…'), "{}", mail.subject);
        assert!(mail.subject.chars().count() < 120);
    }
}
