//! What a Slack channel sees: the question as a Block Kit message, and the
//! same message once answered.
//!
//! The question's text, its options and a tool's arguments are the model's
//! words: they go into `plain_text` objects, which Slack shows as they are
//! (no markup, no mentions, no links, no emoji codes), and the message is
//! posted with link previews off. Where our own `mrkdwn` holds text of
//! someone else's (an answer typed into the field), it is escaped
//! ([`escape`]). Both ways, bidirectional controls and invisible characters
//! are marked as their code points (`<U+202E>`, [`askloop::visible`]), so
//! an approval's arguments read in the channel as they will run. The
//! answers are buttons (five options or fewer), a select,
//! a multi-select with a submit button, or a text field; each names the
//! question in its block's id ([`QuestionRef`]) and an option by its index,
//! never by its label, so a label cannot pass for another.

use askloop::{Notice, PendingToolCall, SelectionMode};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::reach::{Asked, asked};

/// Slack's limit on a block id.
const MAX_BLOCK_ID: usize = 255;

/// Slack's limit on a button's or an option's text.
const MAX_LABEL: usize = 75;

/// Slack's limit on a section's text.
const MAX_TEXT: usize = 3000;

/// The most options shown as buttons; more go into a select.
const MAX_BUTTONS: usize = 5;

/// The question a message's answers are for, carried in their block's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuestionRef {
    pub(crate) run_id: String,
    pub(crate) tool_call_id: String,
    block_id: String,
}

impl QuestionRef {
    /// The reference of a run's call, or `None` when the two ids are too
    /// long for a block id.
    pub(crate) fn new(run_id: &str, tool_call_id: &str) -> Option<QuestionRef> {
        let encoded = serde_json::to_vec(&[run_id, tool_call_id]).ok()?;
        let block_id = format!("askloop.{}", URL_SAFE_NO_PAD.encode(encoded));
        (block_id.len() <= MAX_BLOCK_ID).then(|| QuestionRef {
            run_id: run_id.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            block_id,
        })
    }

    /// The question a block id names, if it names one.
    pub(crate) fn parse(block_id: &str) -> Option<QuestionRef> {
        let encoded = block_id.strip_prefix("askloop.")?;
        let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        let [run_id, tool_call_id]: [String; 2] = serde_json::from_slice(&bytes).ok()?;
        Some(QuestionRef {
            run_id,
            tool_call_id,
            block_id: block_id.to_owned(),
        })
    }

    pub(crate) fn block_id(&self) -> &str {
        &self.block_id
    }
}

/// `text` with the three characters Slack's `mrkdwn` gives meaning to
/// escaped: no mention, channel ping or link can be written with it; and
/// the characters a reader could not see marked.
pub(crate) fn escape(text: &str) -> String {
    askloop::visible::marked(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// At most `max` characters of `text`, cut with an ellipsis.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// Text shown as it is (the model's words), with the characters a reader
/// could not see marked.
fn plain(text: &str, max: usize) -> Value {
    json!({"type": "plain_text", "text": cut(&askloop::visible::marked(text), max), "emoji": false})
}

fn section_plain(text: &str) -> Value {
    json!({"type": "section", "text": plain(text, MAX_TEXT)})
}

fn section_mrkdwn(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_TEXT), "verbatim": true}})
}

/// One post of a question.
pub(crate) struct Posted<'a> {
    pub(crate) channel: &'a str,
    pub(crate) agent: &'a str,
    pub(crate) question: &'a QuestionRef,
    pub(crate) call: &'a PendingToolCall,
    pub(crate) notice: Notice,
    pub(crate) raised_at: DateTime<Utc>,
}

/// The `chat.postMessage` body of a question.
pub(crate) fn question_message(posted: &Posted<'_>) -> Value {
    let asked = asked(posted.call);
    let agent = escape(posted.agent);
    let lead = match posted.notice {
        Notice::Reminder => format!(
            "*Reminder:* agent *{agent}* asked at {} and still waits:",
            askloop::rfc3339(posted.raised_at)
        ),
        Notice::Escalation => format!(
            "*Still waiting:* agent *{agent}* asked at {} and has had no answer:",
            askloop::rfc3339(posted.raised_at)
        ),
        _ => format!("Agent *{agent}* asks:"),
    };
    let block_id = posted.question.block_id();
    let mut blocks = vec![section_mrkdwn(&lead)];
    let fallback;
    match &asked {
        Asked::Question(question) => {
            fallback = format!("{} asks: {}", posted.agent, cut(&question.text, 150));
            blocks.push(section_plain(&question.text));
            let options: Vec<(usize, String)> = question
                .options
                .iter()
                .enumerate()
                .map(|(i, o)| {
                    let label = match &o.description {
                        Some(d) => format!("{}: {d}", o.label),
                        None => o.label.clone(),
                    };
                    (i, label)
                })
                .collect();
            let option =
                |(i, label): &(usize, String)| json!({"text": plain(label, MAX_LABEL), "value": i.to_string()});
            if options.is_empty() {
                blocks.push(json!({
                    "type": "input",
                    "block_id": block_id,
                    "dispatch_action": true,
                    "label": plain("Your answer (Enter sends it)", 2000),
                    "element": {"type": "plain_text_input", "action_id": "text", "multiline": false},
                }));
            } else if question.mode == Some(SelectionMode::MultiSelect) {
                blocks.push(json!({
                    "type": "actions",
                    "block_id": block_id,
                    "elements": [
                        {
                            "type": "multi_static_select",
                            "action_id": "choose",
                            "placeholder": plain("Choose one or more", 150),
                            "options": options.iter().map(option).collect::<Vec<_>>(),
                        },
                        {"type": "button", "action_id": "submit", "style": "primary", "text": plain("Send", MAX_LABEL), "value": "submit"},
                    ],
                }));
            } else if options.len() <= MAX_BUTTONS {
                let buttons: Vec<Value> = options
                    .iter()
                    .map(|(i, label)| {
                        json!({"type": "button", "action_id": format!("answer_{i}"), "text": plain(label, MAX_LABEL), "value": i.to_string()})
                    })
                    .collect();
                blocks.push(json!({"type": "actions", "block_id": block_id, "elements": buttons}));
            } else {
                blocks.push(json!({
                    "type": "actions",
                    "block_id": block_id,
                    "elements": [{
                        "type": "static_select",
                        "action_id": "pick",
                        "placeholder": plain("Choose one", 150),
                        "options": options.iter().map(option).collect::<Vec<_>>(),
                    }],
                }));
            }
        }
        Asked::Approval { tool, args } => {
            fallback = format!("{} asks to run {tool}", posted.agent);
            blocks.push(section_plain(&format!(
                "Run the tool {tool} with these arguments?\n{args}"
            )));
            blocks.push(json!({
                "type": "actions",
                "block_id": block_id,
                "elements": [
                    {"type": "button", "action_id": "approve", "style": "primary", "text": plain("Approve", MAX_LABEL), "value": "approve"},
                    {"type": "button", "action_id": "decline", "style": "danger", "text": plain("Decline", MAX_LABEL), "value": "decline"},
                ],
            }));
        }
        Asked::Other { tool, payload } => {
            fallback = format!("{} waits on {tool}", posted.agent);
            blocks.push(section_plain(&format!("The tool {tool} asks:\n{payload}")));
            blocks.push(json!({
                "type": "input",
                "block_id": block_id,
                "dispatch_action": true,
                "label": plain("Your answer, as JSON (Enter sends it)", 2000),
                "element": {"type": "plain_text_input", "action_id": "json", "multiline": false},
            }));
        }
    }
    let mut context = format!("Run {} · call {}", posted.question.run_id, posted.question.tool_call_id);
    if let Some(limit) = posted.call.expires_at {
        context.push_str(&format!(" · open until {}", askloop::rfc3339(limit)));
    }
    blocks.push(json!({"type": "context", "elements": [plain(&context, 2000)]}));
    json!({
        "channel": posted.channel,
        "text": escape(&fallback),
        "blocks": blocks,
        "unfurl_links": false,
        "unfurl_media": false,
    })
}

/// The `chat.update` body of a question once decided: what was asked, and
/// who decided how, with nothing left to click.
pub(crate) fn answered_message(channel: &str, ts: &str, asked_text: &str, by_user: &str, how: &str) -> Value {
    let said = format!("<@{by_user}> {}", escape(how));
    json!({
        "channel": channel,
        "ts": ts,
        "text": said,
        "blocks": [
            section_plain(asked_text),
            section_mrkdwn(&format!(":white_check_mark: {said}")),
        ],
        "unfurl_links": false,
        "unfurl_media": false,
    })
}

/// The text a decided message keeps of the question.
pub(crate) fn asked_text(call: &PendingToolCall) -> String {
    match asked(call) {
        Asked::Question(question) => question.text,
        Asked::Approval { tool, args } => format!("Run the tool {tool} with these arguments?\n{args}"),
        Asked::Other { tool, payload } => format!("The tool {tool} asks:\n{payload}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use askloop::PendingKind;

    fn call(payload: Value) -> PendingToolCall {
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

    fn post(call: &PendingToolCall) -> Value {
        let question = QuestionRef::new("run-1", "call_1").unwrap();
        question_message(&Posted {
            channel: "C1",
            agent: "deployer",
            question: &question,
            call,
            notice: Notice::First,
            raised_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
        })
    }

    #[test]
    fn a_question_reference_reads_back_and_a_foreign_block_id_is_none() {
        let question = QuestionRef::new("run a/b", "call:1").unwrap();
        assert_eq!(QuestionRef::parse(question.block_id()), Some(question));
        assert_eq!(QuestionRef::parse("section_1"), None);
        assert_eq!(QuestionRef::parse("askloop.!!"), None);
        assert!(
            QuestionRef::new(&"r".repeat(256), "c").is_none(),
            "too long for a block id"
        );
    }

    #[test]
    fn the_models_words_stay_plain_text_and_nothing_in_them_can_ping_or_link() {
        let hostile = "<!channel> *urgent* <https://evil.example|click here> <@U999>";
        let message = post(&call(
            json!({"question": hostile, "options": [{"label": "<!here> yes"}, {"label": "no"}]}),
        ));
        assert_eq!(message["unfurl_links"], false);
        assert_eq!(message["unfurl_media"], false);
        assert_eq!(message["blocks"][1]["text"]["type"], "plain_text");
        assert_eq!(message["blocks"][1]["text"]["text"], hostile);
        let buttons = &message["blocks"][2]["elements"];
        assert_eq!(buttons[0]["text"]["type"], "plain_text");
        assert_eq!(buttons[0]["value"], "0", "an option is named by its index");
        let fallback = message["text"].as_str().unwrap();
        assert!(
            !fallback.contains('<') && fallback.contains("&lt;!channel&gt;"),
            "{fallback}"
        );
        // Every mrkdwn text is ours or escaped.
        let text = message.to_string();
        assert!(!text.contains("\"type\":\"mrkdwn\",\"text\":\"<!"), "{text}");
    }

    #[test]
    fn each_kind_of_question_gets_its_control() {
        let single = post(&call(
            json!({"question": "Where?", "options": [{"label": "a"}, {"label": "b"}]}),
        ));
        assert_eq!(single["blocks"][2]["elements"][1]["action_id"], "answer_1");
        let many: Vec<Value> = (0..7).map(|i| json!({"label": format!("o{i}")})).collect();
        let select = post(&call(json!({"question": "Which?", "options": many})));
        assert_eq!(select["blocks"][2]["elements"][0]["type"], "static_select");
        let multi = post(&call(
            json!({"question": "Which?", "options": [{"label": "a"}, {"label": "b"}], "selectionMode": "multi_select"}),
        ));
        assert_eq!(multi["blocks"][2]["elements"][0]["type"], "multi_static_select");
        assert_eq!(multi["blocks"][2]["elements"][1]["action_id"], "submit");
        let free = post(&call(json!({"question": "Why?"})));
        assert_eq!(free["blocks"][2]["type"], "input");
        assert_eq!(free["blocks"][2]["dispatch_action"], true);
        let mut approval = call(json!({"path": "/etc/x"}));
        approval.kind = PendingKind::Approval;
        approval.tool_name = "write_file".into();
        let approval = post(&approval);
        let actions: Vec<&str> = approval["blocks"][2]["elements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action_id"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["approve", "decline"]);
    }

    /// No bidi control or invisible character in any text of a message.
    fn assert_nothing_hidden(message: &Value) {
        let text = message.to_string();
        for c in ['\u{202e}', '\u{2066}', '\u{2069}', '\u{200b}', '\u{feff}', '\u{e0041}'] {
            assert!(!text.contains(c), "{c:?} in {text}");
        }
    }

    #[test]
    fn an_approvals_arguments_read_as_they_will_run_with_bidi_and_invisible_characters_marked() {
        let mut approval = call(json!({"path": "docs/report_\u{202e}hs.gpj", "note": "\u{2066}ok\u{2069}\u{200b}"}));
        approval.kind = PendingKind::Approval;
        approval.tool_name = "write\u{feff}_file".into();
        let message = post(&approval);
        let shown = message["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(shown.contains("\"docs/report_<U+202E>hs.gpj\""), "{shown}");
        assert!(shown.contains("<U+2066>ok<U+2069><U+200B>"), "{shown}");
        assert!(shown.starts_with("Run the tool write<U+FEFF>_file with"), "{shown}");
        assert_eq!(message["text"], "deployer asks to run write&lt;U+FEFF&gt;_file");
        assert_nothing_hidden(&message);
        let decided = answered_message("C1", "1.2", &asked_text(&approval), "U1", "approved");
        assert!(
            decided["blocks"][0]["text"]["text"]
                .as_str()
                .unwrap()
                .contains("report_<U+202E>hs.gpj"),
            "{decided}"
        );
        assert_nothing_hidden(&decided);
    }

    #[test]
    fn a_questions_text_and_labels_show_their_invisible_characters() {
        let message = post(&call(json!({
            "question": "Ship \u{202e}v2?\u{e0041}",
            "options": [{"label": "yes\u{200b}", "description": "now\u{2066}"}, {"label": "no"}],
        })));
        assert_eq!(message["blocks"][1]["text"]["text"], "Ship <U+202E>v2?<U+E0041>");
        assert_eq!(
            message["blocks"][2]["elements"][0]["text"]["text"],
            "yes<U+200B>: now<U+2066>"
        );
        assert_eq!(message["blocks"][2]["elements"][1]["text"]["text"], "no");
        assert_nothing_hidden(&message);
    }

    #[test]
    fn an_answered_message_names_who_in_a_mention_and_escapes_the_answer() {
        let updated = answered_message("C1", "1.2", "Where?", "U123", "answered: <!channel> & more");
        let said = updated["blocks"][1]["text"]["text"].as_str().unwrap();
        assert_eq!(said, ":white_check_mark: <@U123> answered: &lt;!channel&gt; &amp; more");
        assert_eq!(updated["ts"], "1.2");
    }
}
