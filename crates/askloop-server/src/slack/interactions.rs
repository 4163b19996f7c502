//! `POST /slack/interactions`: a click in a question's message, as Slack
//! sends it (a form with one field, `payload`, holding the interaction's
//! JSON), signed with the app's signing secret.
//!
//! Checked in this order, each refusal changing nothing:
//!
//! 1. the signature: `X-Slack-Signature` must be `v0=` and the hex
//!    HMAC-SHA256, keyed with the signing secret, of
//!    `v0:{X-Slack-Request-Timestamp}:{body}` (compared in constant time):
//!    else 401 `slack_bad_signature`;
//! 2. the timestamp: within five minutes of the server's clock, so a
//!    recorded request cannot be played again later: else 401
//!    `slack_stale_timestamp`;
//! 3. the question: the block names a run's call, of an agent with that
//!    channel among its Slack recipients;
//! 4. the person: the clicking Slack user must be among the channel's
//!    `users` or in its `usergroup`; anyone else is told so, only them
//!    (an ephemeral message through the interaction's `response_url`).
//!
//! Then the answer is decided through the same exactly-once decision as
//! every other answer, recorded as by the Slack user through `slack`. Of
//! two people clicking at once exactly one wins; the other is told who did.
//! The message is then updated to say who answered and how. Slack wants
//! an answer within three seconds: the route answers 200 as soon as the
//! decision is stored, and the rest of the run goes on in the background.

use std::sync::Arc;

use askloop::{Author, CallDecision, CallState, Interface, PendingToolCall, SelectionMode};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::blocks::{self, QuestionRef};
use super::{Slack, ephemeral};
use crate::AppState;
use crate::error::{ApiError, SlackRefusal};
use crate::links::closed_how;
use crate::reach::{Asked, asked};

/// How old an interaction may be.
const REPLAY_WINDOW_SECONDS: i64 = 300;

/// Whether `signature` (`v0=<hex>`) signs `timestamp` and `body` with
/// `secret`.
pub(crate) fn signature_matches(secret: &[u8], timestamp: &str, body: &[u8], signature: &str) -> bool {
    let Some(tag) = signature.strip_prefix("v0=").and_then(unhex) else {
        return false;
    };
    signed(secret, timestamp, body).verify_slice(&tag).is_ok()
}

/// The signature Slack would send for `body` at `timestamp`.
pub fn slack_signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let tag = signed(secret, timestamp, body).finalize().into_bytes();
    format!("v0={}", tag.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Slack's signing base string, `v0:{timestamp}:{body}`, under `secret`.
fn signed(secret: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
    crate::signing::mac(secret, &[b"v0:", timestamp.as_bytes(), b":", body])
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads a click and acts on it. A request that is not a click Slack
/// signed for this app, lately, is refused through [`ApiError`]; anything
/// else gets the 200 Slack waits for, and what the person who clicked
/// must be told goes to the interaction's `response_url`.
pub(crate) async fn interact(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let slack = state.slack.clone().ok_or(SlackRefusal::NoApp)?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (timestamp, signature) = (header("x-slack-request-timestamp"), header("x-slack-signature"));
    if !signature_matches(slack.settings().signing_secret.as_bytes(), timestamp, &body, signature) {
        return Err(SlackRefusal::BadSignature.into());
    }
    let now = state.now().timestamp();
    match timestamp.parse::<i64>() {
        Ok(at) if (now - at).abs() <= REPLAY_WINDOW_SECONDS => {}
        _ => return Err(SlackRefusal::Stale.into()),
    }
    let payload = form_urlencoded::parse(&body)
        .find(|(key, _)| key == "payload")
        .and_then(|(_, value)| serde_json::from_str::<Value>(&value).ok())
        .ok_or(SlackRefusal::NoPayload)?;
    if payload["type"] != "block_actions" {
        // Nothing else is asked of this app; Slack only needs the 200.
        return Ok(StatusCode::OK);
    }
    let clicked = Clicked::read(&payload).ok_or(SlackRefusal::IncompleteClick)?;
    let reply = act(&state, &slack, &clicked, &payload).await;
    if let Some(text) = reply
        && !clicked.response_url.is_empty()
    {
        tell(&slack, &clicked.response_url, &text).await;
    }
    Ok(StatusCode::OK)
}

/// What was clicked, by whom, where.
struct Clicked {
    user: String,
    channel: String,
    message_ts: String,
    response_url: String,
    action_id: String,
    question: Option<QuestionRef>,
    value: Option<String>,
}

impl Clicked {
    fn read(payload: &Value) -> Option<Clicked> {
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let action = payload["actions"].get(0)?;
        Some(Clicked {
            user: text(&payload["user"]["id"])?,
            channel: text(&payload["channel"]["id"]).or_else(|| text(&payload["container"]["channel_id"]))?,
            message_ts: text(&payload["container"]["message_ts"]).unwrap_or_default(),
            response_url: text(&payload["response_url"]).unwrap_or_default(),
            action_id: text(&action["action_id"])?,
            question: action["block_id"].as_str().and_then(QuestionRef::parse),
            value: text(&action["value"]).or_else(|| text(&action["selected_option"]["value"])),
        })
    }
}

/// Decides what was clicked; `Some` holds what to tell the person who
/// clicked (only them), when the click did not answer.
async fn act(state: &AppState, slack: &Slack, clicked: &Clicked, payload: &Value) -> Option<String> {
    // A choice made in a multi-select is sent on its own: the answer comes
    // with the submit button.
    if clicked.action_id == "choose" {
        return None;
    }
    let Some(question) = &clicked.question else {
        return Some("This button is not one of askloop's questions.".to_owned());
    };
    let run = match state.store.get(&question.run_id).await {
        Ok(Some(run)) => run,
        Ok(None) => return Some(format!("Run {} no longer exists.", question.run_id)),
        Err(err) => {
            tracing::warn!(run_id = %question.run_id, error = %err, "cannot read a run a Slack click is for");
            return Some("askloop could not read this question just now; try again.".to_owned());
        }
    };
    let Some(recipient) = slack.settings().recipient(&run.agent_id, &clicked.channel) else {
        return Some("This channel does not answer this agent's questions.".to_owned());
    };
    if !may_answer(slack, recipient, &clicked.user).await {
        return Some("You are not among the people who may answer this question; nothing was changed.".to_owned());
    }
    let call = match run.call_state(&question.tool_call_id, state.now()) {
        CallState::Waiting(waiting) => waiting.call.clone(),
        closed => return Some(format!("This question is already closed: {}.", closed_how(&closed))),
    };
    let (decision, how) = match decision_of(&call, clicked, payload, question) {
        Ok(decided) => decided,
        Err(why) => return Some(why.to_string()),
    };
    let Ok(agent) = state.agent(&run.agent_id) else {
        return Some(format!("This server does not serve agent {}.", run.agent_id));
    };
    let author = Author::named(Interface::Slack, clicked.user.clone());
    let decided = agent
        .decide_all(&run.run_id, vec![(call.tool_call_id.clone(), decision)], author)
        .await;
    let stream = match decided {
        Ok(stream) => stream,
        Err(err) => {
            let closed = match state.store.get(&run.run_id).await {
                Ok(Some(now)) => match now.call_state(&call.tool_call_id, state.now()) {
                    CallState::Waiting(_) => None,
                    closed => Some(closed_how(&closed)),
                },
                _ => None,
            };
            return Some(match closed {
                Some(how) => format!("Someone else was first: this question was closed, {how}."),
                None => format!("askloop did not take this answer: {err}"),
            });
        }
    };
    let span =
        tracing::info_span!("run", agent_id = %run.agent_id, run_id = %run.run_id, tool_call_id = %call.tool_call_id);
    state.runs.spawn(tracing::Instrument::instrument(stream.output(), span));
    if !clicked.message_ts.is_empty() {
        let update = blocks::answered_message(
            &clicked.channel,
            &clicked.message_ts,
            &blocks::asked_text(&call),
            &clicked.user,
            &how,
        );
        if let Err(err) = slack.call("chat.update", &update).await {
            tracing::warn!(run_id = %run.run_id, error = %err, "the answered question's message was not updated");
        }
    }
    None
}

/// Whether Slack user `user` may answer in `recipient`'s channel.
async fn may_answer(slack: &Slack, recipient: &super::SlackRecipient, user: &str) -> bool {
    if recipient.users.iter().any(|u| u == user) {
        return true;
    }
    let Some(group) = &recipient.usergroup else {
        return false;
    };
    match slack.get("usergroups.users.list", &[("usergroup", group)]).await {
        Ok(answer) => answer["users"]
            .as_array()
            .is_some_and(|users| users.iter().any(|u| u.as_str() == Some(user))),
        Err(err) => {
            tracing::warn!(usergroup = %group, error = %err, "cannot read a Slack user group's members");
            false
        }
    }
}

/// Why a click decides nothing, in the words the person who clicked is
/// told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoDecision {
    #[error("Choose at least one option, then Send.")]
    NothingChosen,
    #[error("Type an answer, then press Enter.")]
    NoText,
    #[error("That answer is not JSON ({0}); nothing was changed.")]
    NotJson(String),
    #[error("That option is not one of the question's; nothing was changed.")]
    UnknownOption,
    #[error("The action {0:?} does not answer this question; nothing was changed.")]
    OtherAction(String),
}

/// The decision a click makes on `call`, and how it reads in the updated
/// message; `Err` says why the click decides nothing.
fn decision_of(
    call: &PendingToolCall,
    clicked: &Clicked,
    payload: &Value,
    question: &QuestionRef,
) -> Result<(CallDecision, String), NoDecision> {
    match (asked(call), clicked.action_id.as_str()) {
        (Asked::Approval { .. }, "approve") => Ok((CallDecision::Approve, "approved".to_owned())),
        (Asked::Approval { .. }, "decline") => Ok((CallDecision::Decline(None), "declined".to_owned())),
        (Asked::Question(q), "submit") if q.mode == Some(SelectionMode::MultiSelect) => {
            let chosen = payload["state"]["values"][question.block_id()]["choose"]["selected_options"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let labels = chosen
                .iter()
                .map(|o| label(&q, o["value"].as_str()))
                .collect::<Result<Vec<String>, NoDecision>>()?;
            if labels.is_empty() {
                return Err(NoDecision::NothingChosen);
            }
            let how = format!("answered: {}", labels.join(", "));
            Ok((CallDecision::Answer(json!(labels)), how))
        }
        (Asked::Question(q), action) if action.starts_with("answer_") || action == "pick" => {
            let chosen = label(&q, clicked.value.as_deref())?;
            let how = format!("answered: {chosen}");
            Ok((CallDecision::Answer(json!(chosen)), how))
        }
        (Asked::Question(_), "text") => {
            let text = clicked.value.clone().unwrap_or_default();
            if text.trim().is_empty() {
                return Err(NoDecision::NoText);
            }
            let how = format!("answered: {text}");
            Ok((CallDecision::Answer(json!(text)), how))
        }
        (Asked::Other { .. }, "json") => {
            let text = clicked.value.clone().unwrap_or_default();
            let value: Value = serde_json::from_str(&text).map_err(|err| NoDecision::NotJson(err.to_string()))?;
            Ok((CallDecision::Answer(value), format!("answered: {text}")))
        }
        (_, action) => Err(NoDecision::OtherAction(action.to_owned())),
    }
}

/// The label of option `index` (as the message sent it) of `question`.
fn label(question: &askloop::Question, index: Option<&str>) -> Result<String, NoDecision> {
    index
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| question.options.get(i))
        .map(|o| o.label.clone())
        .ok_or(NoDecision::UnknownOption)
}

/// Tells the person who clicked, and only them, `text`.
async fn tell(slack: &Slack, response_url: &str, text: &str) {
    // The response URL is Slack's: only ever post to Slack's hosts, or the
    // configured API's in tests.
    let allowed = response_url.starts_with("https://hooks.slack.com/")
        || response_url.starts_with(slack.settings().api_url.trim_end_matches('/'));
    if !allowed {
        tracing::warn!(response_url = %response_url, "a Slack interaction's response_url is not Slack's; not posted to");
        return;
    }
    if let Err(err) = slack.client.post(response_url).json(&ephemeral(text)).send().await {
        // Without the URL: a response URL posts to the person who clicked.
        tracing::warn!(error = %err.without_url(), "cannot tell a Slack user why their click changed nothing");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_matches_only_its_secret_timestamp_and_body() {
        // Slack's documented example.
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert!(signature_matches(secret, "1531420618", body, signature));
        assert_eq!(slack_signature(secret, "1531420618", body), signature);
        assert!(!signature_matches(secret, "1531420619", body, signature));
        assert!(!signature_matches(b"another-secret", "1531420618", body, signature));
        assert!(!signature_matches(secret, "1531420618", b"token=changed", signature));
        assert!(!signature_matches(secret, "1531420618", body, "v1=a2114d"));
        assert!(!signature_matches(secret, "1531420618", body, "v0=zz"));
    }
}
