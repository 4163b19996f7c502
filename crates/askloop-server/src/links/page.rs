//! A link's own routes, which need no API token (the link is the
//! credential) and pass the server's Host and cross-site rules like every
//! request:
//!
//! - `GET /links/{token}`: the page (`web/link.html`), which holds no data;
//! - `GET /links/{token}/question`: the question, the link's recipient and
//!   the form token, or why the link no longer answers. Reading changes
//!   nothing, however often a mail scanner follows the link;
//! - `POST /links/{token}`: the answer, with the form token, as JSON (the
//!   guard refuses other bodies and other sites' pages). The link is taken
//!   in the store first, so it answers once; then the answer goes through
//!   the agent's one exactly-once resume, recorded as by the recipient
//!   through the link, made by the link's maker. An answer the question refuses gives the link back;
//!   a link taken a minute ago or more whose call still waits (the process
//!   died before the answer was stored) opens again.

use std::sync::Arc;

use askloop::{Author, CallDecision, Interface};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AnswerLinks, OpenError, OpenedLink};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::wire::PendingCall;

/// The routes, to merge into the server's router.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/links/{token}", get(page).post(answer))
        .route("/links/{token}/question", get(question))
}

async fn page(headers: HeaderMap) -> Response {
    crate::web::file("link.html", &headers)
}

/// What the page shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LinkQuestion {
    /// Whom the link was made out to: the answer is recorded as theirs.
    recipient: String,
    /// Who made the link, if anything named them.
    #[serde(skip_serializing_if = "Option::is_none")]
    made_by: Option<String>,
    /// When the link stops working.
    expires_at: String,
    run_id: String,
    agent_id: String,
    agent_name: String,
    call: PendingCall,
    /// Sent back with the answer.
    form_token: String,
}

/// The answer, as the page sends it: `resumeData` for a question,
/// `approved` (and a decline's `reason`) for a call waiting for approval.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LinkAnswer {
    form_token: String,
    #[serde(default)]
    resume_data: Option<Value>,
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
}

/// What the page is told once the answer is taken.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Answered {
    run_id: String,
    tool_call_id: String,
    /// `answered`, `approved` or `declined`.
    outcome: &'static str,
    /// Recorded as by.
    recipient: String,
}

impl LinkAnswer {
    fn decision(self) -> Result<(CallDecision, &'static str), ApiError> {
        match (self.resume_data, self.approved, self.reason) {
            (Some(data), None, None) => Ok((CallDecision::Answer(data), "answered")),
            (None, Some(true), None) => Ok((CallDecision::Approve, "approved")),
            (None, Some(false), reason) => Ok((
                CallDecision::Decline(reason.filter(|r| !r.trim().is_empty())),
                "declined",
            )),
            _ => Err(ApiError::BadRequest(
                "send {\"formToken\", \"resumeData\"} to answer a question, or {\"formToken\", \"approved\": true} \
                 or {\"formToken\", \"approved\": false, \"reason\"?} for a call waiting for approval"
                    .to_owned(),
            )),
        }
    }
}

fn links(state: &AppState) -> Result<&AnswerLinks, ApiError> {
    state.links.as_deref().ok_or(ApiError::LinksOff)
}

async fn open(state: &AppState, token: &str) -> Result<OpenedLink, ApiError> {
    match links(state)?.open(state.store.as_ref(), token, state.now()).await {
        Ok(opened) => Ok(opened),
        Err(OpenError::Refused(refusal)) => Err(ApiError::LinkRefused(refusal)),
        Err(OpenError::Store(err)) => Err(err.into()),
    }
}

/// Nothing of a link's answers is kept by a cache or a proxy.
fn uncached(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn question(State(state): State<Arc<AppState>>, ApiPath(token): ApiPath<String>) -> Response {
    let shown = async {
        let opened = open(&state, &token).await?;
        let form_token = links(&state)?.form_token(&opened);
        let agent_name = state
            .agent(&opened.run.agent_id)
            .map_or_else(|_| opened.run.agent_id.clone(), |a| a.name().to_owned());
        Ok::<_, ApiError>(Json(LinkQuestion {
            recipient: opened.row.recipient,
            made_by: opened.row.made_by,
            expires_at: askloop::rfc3339(opened.row.expires_at),
            run_id: opened.run.run_id.clone(),
            agent_id: opened.run.agent_id.clone(),
            agent_name,
            call: opened.call.into(),
            form_token,
        }))
    };
    uncached(shown.await.into_response())
}

async fn answer(
    State(state): State<Arc<AppState>>,
    ApiPath(token): ApiPath<String>,
    ApiJson(body): ApiJson<LinkAnswer>,
) -> Response {
    uncached(answer_with(&state, &token, body).await.into_response())
}

async fn answer_with(state: &AppState, token: &str, body: LinkAnswer) -> Result<Json<Answered>, ApiError> {
    let opened = open(state, token).await?;
    if !links(state)?.form_token_matches(&body.form_token, &opened) {
        return Err(ApiError::LinkRefused(super::LinkRefusal::FormToken));
    }
    let (decision, outcome) = body.decision()?;
    let store = state.store.link_store().ok_or(ApiError::LinksOff)?;
    let now = state.now();
    let link_id = &opened.row.link_id;
    if !store.take_link(link_id, now).await? {
        // Taken by another request between the read and now: say why.
        return Err(match open(state, token).await {
            Err(refused) => refused,
            Ok(_) => ApiError::LinkRefused(super::LinkRefusal::Invalid),
        });
    }
    let agent = state.agent(&opened.run.agent_id)?;
    let mut author = Author::named(Interface::Link, opened.row.recipient.clone());
    if let Some(maker) = &opened.row.made_by {
        author = author.with_made_by(maker.clone());
    }
    let call_id = opened.call.tool_call_id.clone();
    let decided = agent
        .decide_all(&opened.run.run_id, vec![(call_id.clone(), decision)], author)
        .await;
    let stream = match decided {
        Ok(stream) => stream,
        Err(err) => {
            // Nothing was answered: the link may try again, and if the
            // question closed meanwhile, opening it says so.
            if let Err(release) = store.release_link(link_id, now).await {
                tracing::warn!(link_id = %link_id, error = %release, "cannot give back an answer link");
            }
            return Err(err.into());
        }
    };
    let span = tracing::info_span!("run", agent_id = %opened.run.agent_id, run_id = %opened.run.run_id, tool_call_id = %call_id);
    // The answer is stored; the rest of the run goes on in the background,
    // on a task of the server's, as for a client that hung up.
    state.runs.spawn(tracing::Instrument::instrument(stream.output(), span));
    Ok(Json(Answered {
        run_id: opened.run.run_id,
        tool_call_id: call_id,
        outcome,
        recipient: opened.row.recipient,
    }))
}
