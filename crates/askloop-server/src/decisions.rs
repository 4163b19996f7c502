//! `POST /api/runs/{runId}/decisions`: decisions for several pending calls
//! of a run, applied as one ([`askloop::Agent::decide_all`]): every one is
//! checked against its call before anything is written (one that does not
//! fit refuses them all, and nothing runs), the run is claimed once, and
//! the model is called once after the last. The rest of the run streams as
//! `resume-stream` streams it.
//!
//! The body is either the decisions, each naming its call:
//!
//! ```json
//! {"decisions": [
//!   {"toolCallId": "a", "approved": true},
//!   {"toolCallId": "d", "approved": true, "args": {"to": "team@example.com"}},
//!   {"toolCallId": "b", "approved": false, "reason": "not on a Friday"},
//!   {"toolCallId": "c", "resumeData": "tonight"}
//! ]}
//! ```
//!
//! (`args`: the arguments a person edited, which the call runs with instead
//! of the model's, checked against its tool's input schema), or every call
//! of the run waiting for approval at once, questions left open:
//! `{"all": "approve"}` or `{"all": "decline", "reason": "..."}`.

use std::sync::Arc;

use askloop::CallDecision;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};

/// The body, as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DecisionsBody {
    #[serde(default)]
    decisions: Option<Vec<OneDecision>>,
    #[serde(default)]
    all: Option<All>,
    #[serde(default)]
    reason: Option<String>,
}

/// One call's decision: `approved` (with a decline's `reason`, or an
/// approval's edited `args`) or `resumeData`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OneDecision {
    tool_call_id: String,
    #[serde(default)]
    approved: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    resume_data: Option<Value>,
    #[serde(default)]
    args: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum All {
    Approve,
    Decline,
}

/// What the body asks for, checked.
enum Asked {
    Each(Vec<(String, CallDecision)>),
    EveryApproval(CallDecision),
}

impl DecisionsBody {
    fn asked(self) -> Result<Asked, ApiError> {
        const FORMS: &str = "send {\"decisions\": [{\"toolCallId\", \"approved\"} or {\"toolCallId\", \"resumeData\"}, \
                             ...]} or {\"all\": \"approve\"} or {\"all\": \"decline\", \"reason\"?}";
        let bad = |what: &str| ApiError::BadRequest(format!("{what}: {FORMS}"));
        match (self.decisions, self.all, self.reason) {
            (Some(_), Some(_), _) => Err(bad("`decisions` and `all` cannot go together")),
            (None, None, _) => Err(bad("nothing to decide")),
            (Some(_), None, Some(_)) => Err(bad("a `reason` goes with each declined call, not beside `decisions`")),
            (None, Some(All::Approve), Some(_)) => Err(bad("an approval takes no `reason`")),
            (None, Some(All::Approve), None) => Ok(Asked::EveryApproval(CallDecision::Approve)),
            (None, Some(All::Decline), reason) => Ok(Asked::EveryApproval(CallDecision::Decline(reason))),
            (Some(decisions), None, None) => {
                let each = decisions
                    .into_iter()
                    .map(|one| {
                        if one.args.is_some() && one.approved != Some(true) {
                            return Err(bad(&format!(
                                "call {}: `args` go with an approval (`\"approved\": true`)",
                                one.tool_call_id
                            )));
                        }
                        let decision = match (one.approved, one.resume_data, one.reason) {
                            (Some(_), Some(_), _) => {
                                return Err(bad(&format!(
                                    "call {} has both `approved` and `resumeData`",
                                    one.tool_call_id
                                )));
                            }
                            (None, None, _) => {
                                return Err(bad(&format!(
                                    "call {} needs `approved` or `resumeData`",
                                    one.tool_call_id
                                )));
                            }
                            (Some(true), None, Some(_)) => {
                                return Err(bad(&format!(
                                    "call {}: an approval takes no `reason`",
                                    one.tool_call_id
                                )));
                            }
                            (None, Some(_), Some(_)) => {
                                return Err(bad(&format!("call {}: an answer takes no `reason`", one.tool_call_id)));
                            }
                            (Some(true), None, None) => match one.args {
                                Some(args) => CallDecision::ApproveWith(args),
                                None => CallDecision::Approve,
                            },
                            (Some(false), None, reason) => CallDecision::Decline(reason),
                            (None, Some(data), None) => CallDecision::Answer(data),
                        };
                        Ok((one.tool_call_id, decision))
                    })
                    .collect::<Result<Vec<_>, ApiError>>()?;
                Ok(Asked::Each(each))
            }
        }
    }
}

/// The route (see the module documentation).
pub(crate) async fn decide(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    ApiPath(run_id): ApiPath<String>,
    ApiJson(body): ApiJson<DecisionsBody>,
) -> Result<Response, ApiError> {
    // The caller may see the run, before anything of it is read.
    let run = crate::runs::load(&state, &caller, &run_id, None).await?;
    let asked = body.asked()?;
    let agent = state.agent(&run.agent_id)?;
    let author = caller.author();
    let stream = match asked {
        Asked::Each(decisions) => agent.decide_all(&run_id, decisions, author).await?,
        Asked::EveryApproval(decision) => agent.decide_every_approval(&run_id, decision, author).await?,
    };
    let span = tracing::info_span!("run", agent_id = %run.agent_id, run_id = %run_id, tool_call_id = "");
    Ok(crate::sse::respond(&state, stream, span))
}
