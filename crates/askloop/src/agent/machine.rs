//! The run's decision logic, with no I/O: what to do after a model turn, after
//! tool calls, and which pending call a resume targets. The driver
//! (`driver.rs`) does the I/O around these decisions.

use crate::error::RunError;
use crate::message::{ToolCall, ToolResult};
use crate::store::{PendingToolCall, RunRecord, RunStatus};

/// What follows a model turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterModel {
    /// No tool calls: the run is complete.
    Complete,
    /// Run the tool calls.
    RunTools,
}

pub(crate) fn after_model(tool_calls: &[ToolCall]) -> AfterModel {
    if tool_calls.is_empty() {
        AfterModel::Complete
    } else {
        AfterModel::RunTools
    }
}

/// What follows a tool step (or an answer to one of its calls).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterTools {
    /// Some calls wait on a person: store them and end the stream suspended.
    Wait,
    /// Every call has a result: append them in call order and call the model.
    Continue(Vec<ToolResult>),
}

/// Decides after tools: wait while anything is pending; otherwise the results,
/// ordered as the model called them.
pub(crate) fn after_tools(calls: &[ToolCall], pending: &[PendingToolCall], results: &[ToolResult]) -> AfterTools {
    if !pending.is_empty() {
        return AfterTools::Wait;
    }
    let mut ordered: Vec<ToolResult> = Vec::with_capacity(results.len());
    for call in calls {
        if let Some(result) = results.iter().find(|r| r.tool_call_id == call.id) {
            ordered.push(result.clone());
        }
    }
    // Results whose call is not in the message (should not happen) are kept
    // rather than lost.
    for result in results {
        if !ordered.iter().any(|r| r.tool_call_id == result.tool_call_id) {
            ordered.push(result.clone());
        }
    }
    AfterTools::Continue(ordered)
}

/// Whether another model call is allowed in this stream.
pub(crate) fn may_call_model(steps_this_stream: u32, max_steps: u32) -> bool {
    steps_this_stream < max_steps
}

impl RunRecord {
    /// The pending call a resume of this run targets: the one named, or the
    /// only one when none is named. Says why there is none (the run is not
    /// suspended, the call is not pending, several are pending), with the
    /// same errors [`Agent::resume_stream`](crate::Agent::resume_stream)
    /// returns, so a host can check before it asks a person anything.
    pub fn resume_target(&self, tool_call_id: Option<&str>) -> Result<&PendingToolCall, RunError> {
        if self.status != RunStatus::Suspended {
            return Err(RunError::NotSuspended {
                run_id: self.run_id.clone(),
                status: self.status,
            });
        }
        match tool_call_id {
            Some(id) => {
                self.pending
                    .iter()
                    .find(|p| p.tool_call_id == id)
                    .ok_or_else(|| RunError::ToolCallNotPending {
                        run_id: self.run_id.clone(),
                        tool_call_id: id.to_owned(),
                        pending: self.pending_ids(),
                    })
            }
            None => match self.pending.as_slice() {
                [only] => Ok(only),
                _ => Err(RunError::AmbiguousResume {
                    run_id: self.run_id.clone(),
                    pending: self.pending_ids(),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolContent;
    use crate::store::PendingKind;
    use serde_json::json;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            args: json!({}),
        }
    }

    fn result(id: &str) -> ToolResult {
        ToolResult {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: ToolContent::Text(id.into()),
            is_error: false,
        }
    }

    fn pending(id: &str) -> PendingToolCall {
        PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            args: json!({}),
            kind: PendingKind::Suspended,
            suspend_payload: None,
            resume_schema: None,
            expires_at: None,
        }
    }

    #[test]
    fn results_answered_in_any_order_continue_in_call_order() {
        let calls = [call("a"), call("b"), call("c")];
        let answered = [result("c"), result("a"), result("b")];
        let AfterTools::Continue(ordered) = after_tools(&calls, &[], &answered) else {
            panic!("expected continue")
        };
        let ids: Vec<&str> = ordered.iter().map(|r| r.tool_call_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn any_pending_call_means_wait() {
        let calls = [call("a"), call("b")];
        assert_eq!(after_tools(&calls, &[pending("b")], &[result("a")]), AfterTools::Wait);
    }

    #[test]
    fn no_tool_calls_completes() {
        assert_eq!(after_model(&[]), AfterModel::Complete);
        assert_eq!(after_model(&[call("a")]), AfterModel::RunTools);
    }

    #[test]
    fn step_limit_counts_model_calls_per_stream() {
        assert!(may_call_model(0, 1));
        assert!(!may_call_model(1, 1));
    }

    fn suspended_run(pending_ids: &[&str]) -> RunRecord {
        RunRecord {
            run_id: "r".into(),
            status: RunStatus::Suspended,
            pending: pending_ids.iter().map(|id| pending(id)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn resume_without_id_picks_the_only_pending_call() {
        let run = suspended_run(&["a"]);
        assert_eq!(run.resume_target(None).unwrap().tool_call_id, "a");
    }

    #[test]
    fn resume_without_id_is_ambiguous_with_several_pending_and_lists_them() {
        let run = suspended_run(&["a", "b"]);
        let err = run.resume_target(None).unwrap_err();
        assert!(matches!(&err, RunError::AmbiguousResume { pending, .. } if pending == &["a", "b"]));
        assert!(err.to_string().contains("a, b"));
    }

    #[test]
    fn resume_of_a_call_that_is_not_pending_lists_the_pending_ones() {
        let run = suspended_run(&["a"]);
        let err = run.resume_target(Some("zzz")).unwrap_err();
        assert!(matches!(err, RunError::ToolCallNotPending { ref pending, .. } if pending == &["a"]));
    }

    #[test]
    fn resume_of_a_run_that_is_not_suspended_names_its_status() {
        let mut run = suspended_run(&["a"]);
        run.status = RunStatus::Completed;
        let err = run.resume_target(Some("a")).unwrap_err();
        assert!(matches!(
            err,
            RunError::NotSuspended {
                status: RunStatus::Completed,
                ..
            }
        ));
    }
}
