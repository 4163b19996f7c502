//! Approval rules: functions of a call that decide it instead of a person
//! (allow, ask, deny with a reason), recorded as decided by the rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use askloop::{
    Agent, AgentBuilder, ApprovalRule, ChunkKind, FunctionTool, Interface, ResolutionKind, ResumeOptions, RunStatus,
    StreamOptions, ThreadOptions, ToolOutput, Verdict,
};
use common::{CountingModel, run, types};
use serde_json::{Value, json};

/// A tool that counts its runs; `own`: it asks for approval itself.
fn counted(name: &str, runs: &Arc<AtomicUsize>, own: bool) -> FunctionTool {
    let runs = Arc::clone(runs);
    FunctionTool::builder(name)
        .input_schema(json!({"type": "object"}))
        .requires_approval(own)
        .execute(move |args: Value, _ctx| {
            let runs = Arc::clone(&runs);
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutput::text(format!("ran with {args}")).into())
            }
        })
}

fn one_call(tool: &str, args: Value) -> Arc<CountingModel> {
    let script = json!({"turns": [
        {"toolCalls": [{"id": "c1", "name": tool, "args": args}]},
        {"text": "Result: {{toolResults}}"}
    ]});
    CountingModel::new(&script.to_string())
}

fn agent(model: Arc<CountingModel>, tool: FunctionTool) -> AgentBuilder {
    Agent::builder("ops").model(model).tool(tool)
}

fn no_deletes() -> ApprovalRule {
    ApprovalRule::new("no-deletes", |call| {
        call.tool
            .starts_with("delete_")
            .then(|| Verdict::Deny("deleting is not allowed here".into()))
    })
}

#[tokio::test]
async fn a_denied_call_never_runs_the_model_is_told_why_and_the_rule_is_recorded_as_its_author() {
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = agent(
        one_call("delete_branch", json!({"name": "main"})),
        counted("delete_branch", &runs, false),
    )
    .approval_rule(no_deletes())
    .build()
    .unwrap();
    let (chunks, out) = run(&agent, "Clean up").await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(out.text, "Result: deleting is not allowed here");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(types(&chunks).contains(&"tool-output-denied"), "{:?}", types(&chunks));
    let stored = agent.get_run(&out.run_id).await.unwrap();
    let [ruled] = stored.resolutions.as_slice() else {
        panic!("{:?}", stored.resolutions)
    };
    assert_eq!(
        (
            ruled.tool_call_id.as_deref(),
            ruled.kind,
            ruled.author.via,
            ruled.author.by.as_deref()
        ),
        (Some("c1"), ResolutionKind::Denied, Interface::Rule, Some("no-deletes"))
    );
    assert_eq!(stored.schema_version(), 4, "builds before rules refuse it");
}

#[tokio::test]
async fn an_allow_lifts_a_configured_approval_but_never_the_tools_own_policy() {
    let allow_reads = || ApprovalRule::new("reads", |call| (call.tool == "read").then_some(Verdict::Allow));
    let runs = Arc::new(AtomicUsize::new(0));
    let configured = agent(one_call("read", json!({})), counted("read", &runs, false))
        .require_approval_for("read")
        .approval_rule(allow_reads())
        .build()
        .unwrap();
    let (_, out) = run(&configured, "Read it").await;
    assert_eq!(out.status, RunStatus::Completed, "no wait: the rule allowed it");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let stored = configured.get_run(&out.run_id).await.unwrap();
    assert_eq!(
        stored
            .resolutions
            .iter()
            .map(|r| (r.kind, r.author.via))
            .collect::<Vec<_>>(),
        [(ResolutionKind::Approved, Interface::Rule)]
    );

    let own = Arc::new(AtomicUsize::new(0));
    let asking = agent(one_call("read", json!({})), counted("read", &own, true))
        .approval_rule(allow_reads())
        .build()
        .unwrap();
    let (chunks, out) = run(&asking, "Read it").await;
    assert_eq!(out.status, RunStatus::Suspended, "the tool's own policy still asks");
    assert_eq!(types(&chunks).last(), Some(&"tool-call-approval"));
    assert_eq!(own.load(Ordering::SeqCst), 0);
    assert!(asking.get_run(&out.run_id).await.unwrap().resolutions.is_empty());
}

#[tokio::test]
async fn an_ask_makes_a_call_wait_and_the_first_rule_with_a_verdict_decides() {
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(0));
    let counting = {
        let seen = Arc::clone(&seen);
        ApprovalRule::new("no-opinion", move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            None
        })
    };
    let big_refunds = ApprovalRule::new("big-refunds", |call| {
        (call.args["amount"].as_u64() > Some(100)).then_some(Verdict::Ask)
    });
    let agent = agent(
        one_call("refund", json!({"amount": 250})),
        counted("refund", &runs, false),
    )
    .approval_rule(counting)
    .approval_rule(big_refunds)
    .approval_rule(ApprovalRule::new("never-reached", |_| Some(Verdict::Deny("no".into()))))
    .build()
    .unwrap();
    let (chunks, out) = run(&agent, "Refund it").await;
    assert_eq!(seen.load(Ordering::SeqCst), 1, "the first rule was asked and passed");
    assert_eq!(out.status, RunStatus::Suspended, "the second rule asked a person");
    let ChunkKind::ToolCallApproval(approval) = &chunks.last().unwrap().kind else {
        panic!("{:?}", types(&chunks))
    };
    assert_eq!(approval.args["amount"], 250);
    let done = agent
        .approve_tool_call(ResumeOptions::run(&out.run_id))
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let stored = agent.get_run(&out.run_id).await.unwrap();
    let kinds: Vec<_> = stored.resolutions.iter().map(|r| (r.kind, r.author.via)).collect();
    assert_eq!(
        kinds,
        [(ResolutionKind::Approved, Interface::Library)],
        "approved by a person"
    );
}

#[tokio::test]
async fn a_rule_sees_the_arguments_as_the_tool_acts_on_them_and_the_runs_thread() {
    /// A tool that resolves its path as a file tool would.
    struct Files;
    #[async_trait::async_trait]
    impl askloop::Tool for Files {
        fn id(&self) -> &str {
            "write"
        }
        fn description(&self) -> &str {
            "Writes a file."
        }
        fn input_schema(&self) -> &Value {
            static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| json!({"type": "object"}));
            &SCHEMA
        }
        fn acts_on(&self, args: &Value) -> Value {
            let path = args["path"].as_str().unwrap_or_default().replace("docs/../", "");
            json!({"path": path})
        }
        async fn execute(
            &self,
            _args: Value,
            _ctx: askloop::ToolContext,
        ) -> Result<askloop::ToolOutcome, askloop::ToolError> {
            Ok(ToolOutput::text("written").into())
        }
    }
    let in_docs = ApprovalRule::new("docs-only", |call| {
        let inside = call.args["path"].as_str().is_some_and(|p| p.starts_with("docs/"));
        let alice = call.resource_id == Some("alice");
        Some(if inside && alice {
            Verdict::Allow
        } else {
            Verdict::Deny(format!(
                "{} is outside docs/ for {:?}",
                call.args["path"], call.resource_id
            ))
        })
    });
    let model = CountingModel::new(
        &json!({"turns": [
            {"toolCalls": [{"id": "c1", "name": "write", "args": {"path": "docs/../secrets.txt"}}]},
            {"text": "Result: {{toolResults}}"}
        ]})
        .to_string(),
    );
    let agent = Agent::builder("ops")
        .model(model)
        .tool(Files)
        .require_approval_for("write")
        .approval_rule(in_docs)
        .build()
        .unwrap();
    let options = StreamOptions::default().on_thread(ThreadOptions::new("alice", "t1"));
    let out = agent.stream_with("Write it", options).await.unwrap().output().await;
    assert_eq!(
        out.text, "Result: \"secrets.txt\" is outside docs/ for Some(\"alice\")",
        "judged on the resolved path, with the thread's resource"
    );
}
