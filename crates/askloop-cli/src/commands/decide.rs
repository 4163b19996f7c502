//! `askloop resume`, `approve` and `decline`: a person's decision on a
//! pending call, then the rest of the run.

use askloop::{Agent, PendingKind, PendingToolCall, Question, ResumeOptions, RunRecord, SelectionMode};
use serde_json::Value;

use super::{Access, Context, finish};
use crate::cli::ResumeArgs;
use crate::exit::{CliError, Done};
use crate::prompt::{self, Reply};
use crate::render;
use crate::setup::{self, RunOrigin};

/// Loads a run and rebuilds the agent it was started with.
async fn agent_for(ctx: &Context, run_id: &str) -> Result<(Agent, RunRecord), CliError> {
    let store = ctx.store(Access::Existing).await?;
    let run = setup::load_run(&store, run_id).await?;
    let origin = RunOrigin::of_run(&run)?;
    let model = setup::make_model(&origin.model, true)?;
    let agent = setup::agent(&origin, model, store)?;
    Ok((agent, run))
}

pub async fn resume(ctx: &Context, args: ResumeArgs) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, &args.run_id).await?;
    let call = run.resume_target(args.tool_call_id.as_deref())?.clone();
    let options = ResumeOptions::call(&run.run_id, &call.tool_call_id);

    if args.decline {
        let stream = agent
            .decline_tool_call(&run.run_id, Some(&call.tool_call_id), args.reason)
            .await?;
        return Ok(finish(ctx, stream, args.json).await);
    }
    let data = match (&args.answer_json, args.answer.as_slice()) {
        (Some(json), _) => serde_json::from_str::<Value>(json)
            .map_err(|err| CliError::usage(format!("--answer-json is not valid JSON: {err}")))?,
        (None, []) => match ask(ctx, &run, &call)? {
            Some(data) => data,
            None => return Ok(Done::Suspended),
        },
        (None, answers) => shape_answers(&run, &call, answers)?,
    };
    let stream = agent.resume_stream(data, options).await?;
    Ok(finish(ctx, stream, args.json).await)
}

/// Turns `--answer` flags into the resume data the question needs: a string,
/// or a list for a multi-select question.
fn shape_answers(run: &RunRecord, call: &PendingToolCall, answers: &[String]) -> Result<Value, CliError> {
    if call.kind == PendingKind::Approval {
        return Err(CliError::usage(format!(
            "tool call {} of run {} waits for approval, not an answer: use `askloop approve` or `askloop decline`",
            call.tool_call_id, run.run_id
        )));
    }
    let question = call.suspend_payload.as_ref().and_then(Question::from_payload);
    let multi = question.as_ref().and_then(|q| q.mode) == Some(SelectionMode::MultiSelect);
    match answers {
        _ if multi => Ok(Value::Array(answers.iter().cloned().map(Value::String).collect())),
        [one] => Ok(Value::String(one.clone())),
        _ => Err(CliError::usage(format!(
            "tool call {} takes one answer, but --answer was given {} times",
            call.tool_call_id,
            answers.len()
        ))),
    }
}

/// Asks the person for the answer (interactive on a terminal, line by line
/// otherwise). `None`: they left; the run stays suspended.
fn ask(ctx: &Context, run: &RunRecord, call: &PendingToolCall) -> Result<Option<Value>, CliError> {
    let mut prompter = prompt::for_stdin();
    let reply = match call.kind {
        PendingKind::Approval => match prompter.approve(&call.tool_name, &call.args)? {
            Some(approved) => Reply::Answer(serde_json::json!({ "approved": approved })),
            None => Reply::Left,
        },
        PendingKind::Suspended => match call.suspend_payload.as_ref().and_then(Question::from_payload) {
            Some(question) => prompter.ask(&question)?,
            None => {
                return Err(CliError::usage(format!(
                    "tool {} waits for structured input; give it with --answer-json",
                    call.tool_name
                )));
            }
        },
    };
    match reply {
        Reply::Answer(data) => Ok(Some(data)),
        Reply::Left => {
            errln!("askloop: no answer given; run {} stays suspended.", run.run_id);
            err!(
                "{}",
                render::describe_pending(&ctx.askloop(), &run.run_id, std::slice::from_ref(call))
            );
            Ok(None)
        }
    }
}

pub async fn approve(ctx: &Context, run_id: &str, tool_call_id: Option<&str>, json: bool) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, run_id).await?;
    let call = run.resume_target(tool_call_id)?;
    let stream = agent.approve_tool_call(run_id, Some(&call.tool_call_id)).await?;
    Ok(finish(ctx, stream, json).await)
}

pub async fn decline(
    ctx: &Context,
    run_id: &str,
    tool_call_id: Option<&str>,
    reason: Option<String>,
    json: bool,
) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, run_id).await?;
    let call = run.resume_target(tool_call_id)?;
    let stream = agent
        .decline_tool_call(run_id, Some(&call.tool_call_id), reason)
        .await?;
    Ok(finish(ctx, stream, json).await)
}
