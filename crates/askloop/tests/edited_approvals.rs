//! Approving a call with arguments a person edited: checked against the
//! tool's input schema before anything is stored, run with exactly those
//! arguments, told to the model, and kept in the run's record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};

use askloop::{
    Agent, ArgumentsEdit, Author, CallDecision, FunctionTool, Interface, Message, ResolutionKind, ResumeOptions,
    RunError, RunStatus, ToolOutput,
};
use common::{CountingModel, run};
use serde_json::{Value, json};

const SEND: &str = r#"{"turns": [
  {"toolCalls": [{"id": "mail", "name": "send_email", "args": {"to": "all@example.com", "subject": "Launch"}}]},
  {"text": "Sent: {{toolResults}}"}
]}"#;

struct World {
    agent: Agent,
    model: Arc<CountingModel>,
    sent: Arc<Mutex<Vec<Value>>>,
    run_id: String,
}

async fn waiting_to_send() -> World {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let tool = {
        let sent = Arc::clone(&sent);
        FunctionTool::builder("send_email")
            .description("Sends an email.")
            .input_schema(json!({
                "type": "object",
                "properties": {"to": {"type": "string", "format": "email"}, "subject": {"type": "string"}},
                "required": ["to", "subject"],
                "additionalProperties": false
            }))
            .requires_approval(true)
            .execute(move |args: Value, _ctx| {
                let sent = Arc::clone(&sent);
                async move {
                    sent.lock().unwrap().push(args.clone());
                    Ok(ToolOutput::text(format!("sent to {}", args["to"].as_str().unwrap_or("?"))).into())
                }
            })
    };
    let model = CountingModel::new(SEND);
    let agent = Agent::builder("mailer")
        .model(model.clone())
        .tool(tool)
        .build()
        .unwrap();
    let (_, output) = run(&agent, "Announce the launch").await;
    assert_eq!(output.status, RunStatus::Suspended);
    World {
        agent,
        model,
        sent,
        run_id: output.run_id,
    }
}

fn editor() -> Author {
    Author::named(Interface::Page, "dana")
}

#[tokio::test]
async fn an_approval_with_edited_arguments_runs_the_tool_with_exactly_them_and_tells_the_model() {
    let w = waiting_to_send().await;
    let edited = json!({"to": "team@example.com", "subject": "Launch"});
    let out = w
        .agent
        .approve_tool_call_with(ResumeOptions::call(&w.run_id, "mail").by(editor()), edited.clone())
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(
        *w.sent.lock().unwrap(),
        std::slice::from_ref(&edited),
        "sent once, to the edited recipient"
    );
    assert_eq!(
        out.text,
        "Sent: The user edited the arguments before approving; the call ran with \
         {\"to\":\"team@example.com\",\"subject\":\"Launch\"}. It returned: sent to team@example.com"
    );
    assert_eq!(w.model.calls(), 2);

    let stored = w.agent.store().get(&w.run_id).await.unwrap().unwrap();
    let [approval] = stored.resolutions.as_slice() else {
        panic!("{:?}", stored.resolutions)
    };
    assert_eq!(
        (approval.kind, approval.author.by.as_deref()),
        (ResolutionKind::Approved, Some("dana"))
    );
    assert_eq!(
        approval.edit,
        Some(ArgumentsEdit {
            original: json!({"to": "all@example.com", "subject": "Launch"}),
            edited,
        }),
        "the record keeps both, with who edited"
    );
    assert_eq!(stored.schema_version(), 4, "builds before edits refuse it");
    // The model's own call is stored as it made it: messages are never
    // rewritten.
    let messages = w.agent.store().messages(&w.run_id).await.unwrap();
    let Message::Assistant { tool_calls, .. } = &messages[1] else {
        panic!("{messages:?}")
    };
    assert_eq!(tool_calls[0].args["to"], "all@example.com");
}

#[tokio::test]
async fn edited_arguments_that_do_not_fit_the_tool_are_refused_and_nothing_runs_or_is_stored() {
    let w = waiting_to_send().await;
    let before = w.agent.store().get(&w.run_id).await.unwrap().unwrap();
    for (args, says) in [
        (json!({"to": "team@example.com"}), "subject"),
        (json!({"to": 5, "subject": "Launch"}), "5"),
        (
            json!({"to": "team@example.com", "subject": "Launch", "bcc": "x"}),
            "bcc",
        ),
        (json!(["team@example.com"]), "must be a JSON object"),
    ] {
        let err = w
            .agent
            .approve_tool_call_with(ResumeOptions::call(&w.run_id, "mail"), args.clone())
            .await
            .unwrap_err();
        let RunError::InvalidArguments {
            tool_call_id, reason, ..
        } = &err
        else {
            panic!("{args}: {err}")
        };
        assert_eq!(tool_call_id, "mail");
        assert!(reason.contains(says), "{args}: {reason}");
        assert!(err.to_string().contains("still waits for approval"), "{err}");
    }
    assert!(w.sent.lock().unwrap().is_empty(), "nothing ran");
    let after = w.agent.store().get(&w.run_id).await.unwrap().unwrap();
    assert_eq!((after.version, after.status()), (before.version, RunStatus::Suspended));
    assert!(after.resolutions.is_empty());
}

#[tokio::test]
async fn edited_arguments_go_with_other_decisions_and_are_refused_for_a_question() {
    let w = waiting_to_send().await;
    let edited = json!({"to": "ops@example.com", "subject": "Launch today"});
    let decisions = vec![("mail".to_owned(), CallDecision::ApproveWith(edited.clone()))];
    let out = w
        .agent
        .decide_all(&w.run_id, decisions, editor())
        .await
        .unwrap()
        .output()
        .await;
    assert_eq!(out.status, RunStatus::Completed);
    assert_eq!(*w.sent.lock().unwrap(), [edited]);

    // Every approval at once takes no edits: each call's own arguments are
    // what a person sees in a list.
    let again = waiting_to_send().await;
    let err = again
        .agent
        .decide_every_approval(&again.run_id, CallDecision::ApproveWith(json!({})), editor())
        .await
        .unwrap_err();
    assert!(matches!(err, RunError::InvalidInput(_)), "{err}");
}
