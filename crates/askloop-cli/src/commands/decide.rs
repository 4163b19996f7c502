//! `askloop resume`, `approve` and `decline`: a person's decision on a
//! pending call, then the rest of the run.

use std::collections::HashMap;
use std::sync::Arc;

use askloop::{
    Agent, Author, CallDecision, CallState, Clock, ExpiredRuns, Interface, PendingKind, PendingToolCall, Question,
    ResumeOptions, RunRecord, RunStore, SelectionMode, SystemClock,
};
use serde_json::Value;

use super::serve::configured_agent;
use super::{Access, Context, finish};
use crate::cli::{ModelArgs, ResumeArgs};
use crate::exit::{CliError, Done};
use crate::prompt::{self, Approval, Reply};
use crate::render;
use crate::tools;

/// What approving `call` would do, for the prompt.
fn describe_call(root: &std::path::Path, call: &PendingToolCall) -> String {
    tools::describe_call(root, &call.tool_name, &call.args)
}
use crate::setup::{self, RunOrigin};

/// Which pending call a decision is for, and with which model the run goes
/// on (`--model`; the run's own when `None`).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    run_id: &'a str,
    tool_call_id: Option<&'a str>,
    model: Option<&'a str>,
}

impl<'a> Call<'a> {
    pub fn new(run_id: &'a str, tool_call_id: Option<&'a str>, model: Option<&'a str>) -> Self {
        Call {
            run_id,
            tool_call_id,
            model,
        }
    }
}

/// Loads a run and rebuilds the agent it was started with (see
/// [`rebuild_agent`]).
async fn agent_for(ctx: &Context, run_id: &str, model: Option<&str>) -> Result<(Agent, RunRecord), CliError> {
    let store = ctx.store(Access::Existing).await?;
    let run = setup::load_run(&store, run_id).await?;
    let agent = rebuild_agent(ctx, &store, &run, model).await?;
    Ok((agent, run))
}

/// The agent `run` was started with, on `store`: from the run's own record
/// when the `askloop` command started it, else from the configuration file
/// (`--config`) that `askloop serve` or `askloop mcp` started it with.
pub(super) async fn rebuild_agent(
    ctx: &Context,
    store: &Arc<dyn RunStore>,
    run: &RunRecord,
    model: Option<&str>,
) -> Result<Agent, CliError> {
    if !RunOrigin::recorded(run) {
        let model = ModelArgs {
            model: model.map(str::to_owned),
            script: None,
        };
        return configured_agent(ctx, &run.agent_id, &model, store).await;
    }
    let origin = RunOrigin::of_run(run)?;
    let model = setup::resume_model(&run.run_id, &origin, model)?;
    setup::agent(&origin, model, Arc::clone(store))
}

pub async fn resume(ctx: &Context, args: ResumeArgs) -> Result<Done, CliError> {
    if args.reason.is_some() && !args.decline {
        return Err(CliError::usage(
            "--reason goes with --decline (it tells the model why you declined); an answer takes no reason",
        ));
    }
    let (agent, run) = agent_for(ctx, &args.run_id, args.model.as_deref()).await?;
    let call = target(&run, args.tool_call_id.as_deref())?;
    let options = ResumeOptions::call(&run.run_id, &call.tool_call_id).by(cli_author());

    if args.decline {
        let stream = agent.decline_tool_call(options.with_reason(args.reason)).await?;
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

/// The pending call a decision is for. A run that is `running` while
/// several calls of its step are pending is another process handling a
/// sibling call: the library waits for it to finish (see
/// `Agent::resume_stream`), so the call is taken from the run as stored
/// rather than refused here.
fn target(run: &RunRecord, tool_call_id: Option<&str>) -> Result<PendingToolCall, CliError> {
    if let Some(id) = tool_call_id
        && let CallState::Held(call) = run.call_state(id, SystemClock.now())
    {
        return Ok(call.clone());
    }
    Ok(run.resume_target(tool_call_id)?.clone())
}

/// The folder a run's `write_file` writes in, for the approval prompt: the
/// one the `askloop` command recorded, else the current folder.
fn run_root(run: &RunRecord) -> Result<std::path::PathBuf, CliError> {
    if RunOrigin::recorded(run) {
        return Ok(RunOrigin::of_run(run)?.root());
    }
    std::env::current_dir().map_err(|err| CliError::failure(format!("cannot tell the current folder: {err}")))
}

/// Why a call that waits for structured input cannot be answered at the
/// prompt, with the `--answer-json` shapes it accepts: for an MCP server's
/// form, its fields and the three actions.
fn structured_input_needed(run: &RunRecord, call: &PendingToolCall) -> CliError {
    match call.suspend_payload.as_deref().and_then(render::McpForm::from_payload) {
        Some(form) => CliError::usage(format!(
            "tool call {} of run {} is a form of the MCP server {} ({}); answer it with {}",
            call.tool_call_id,
            run.run_id,
            form.server,
            form.message,
            form.how_to_answer()
        )),
        None => CliError::usage(format!(
            "tool {} waits for structured input; give it with --answer-json",
            call.tool_name
        )),
    }
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
    let question = call.suspend_payload.as_deref().and_then(Question::from_payload);
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
        PendingKind::Approval => match prompter.approve(&describe_call(&run_root(run)?, call), false)? {
            Some(approval) => Reply::Answer(serde_json::json!({ "approved": approval != Approval::No })),
            None => Reply::Left,
        },
        PendingKind::Suspended => match call.suspend_payload.as_deref().and_then(Question::from_payload) {
            Some(question) => prompter.ask(&question)?,
            None => return Err(structured_input_needed(run, call)),
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

/// The arguments an approval runs its call with.
pub enum Args {
    /// The model's.
    Model,
    /// These, as JSON (`--args`).
    Given(String),
    /// The model's, edited in the person's editor first (`--edit`).
    Edit,
    /// The model's, and later calls of the tool run without asking in
    /// this scope (`--always`).
    Always(askloop::Always),
}

pub async fn approve(ctx: &Context, call: Call<'_>, args: Args, json: bool) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, call.run_id, call.model).await?;
    let pending = target(&run, call.tool_call_id)?;
    let options = ResumeOptions::call(&run.run_id, &pending.tool_call_id).by(cli_author());
    let edited = match args {
        Args::Always(always) => {
            let stream = agent.approve_tool_call_always(options, always).await?;
            return Ok(finish(ctx, stream, json).await);
        }
        Args::Model => None,
        Args::Given(text) => Some(
            serde_json::from_str::<Value>(&text)
                .map_err(|err| CliError::usage(format!("--args is not valid JSON: {err}")))?,
        ),
        Args::Edit => edit_in_editor(&pending)?,
    };
    let stream = match edited {
        Some(args) => agent.approve_tool_call_with(options, args).await?,
        None => agent.approve_tool_call(options).await?,
    };
    Ok(finish(ctx, stream, json).await)
}

/// The call's arguments as the person left them in their editor
/// (`$VISUAL`, else `$EDITOR`, else `vi`, run through the shell so that an
/// editor with options works): `None` when left unchanged.
fn edit_in_editor(pending: &PendingToolCall) -> Result<Option<Value>, CliError> {
    // Hidden characters as `\u` escapes: the editor shows what will run.
    let original = crate::escape::json_pretty(&pending.args)?;
    // The tool's name in the file's, as far as it is plain: the editor shows
    // the file's name, and a name may hold anything a model wrote.
    let tool: String = pending
        .tool_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(40)
        .collect();
    let file = tempfile::Builder::new()
        .prefix(&format!("askloop-{tool}-"))
        .suffix(".json")
        .tempfile()
        .map_err(|err| CliError::failure(format!("could not make a file to edit the arguments in: {err}")))?;
    std::fs::write(file.path(), format!("{original}\n"))
        .map_err(|err| CliError::failure(format!("could not write the arguments to edit: {err}")))?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .ok()
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .map_err(|err| CliError::failure(format!("could not start the editor `{editor}`: {err}")))?;
    if !status.success() {
        return Err(CliError::usage(format!(
            "the editor `{editor}` exited with {status}; nothing was approved"
        )));
    }
    let text = std::fs::read_to_string(file.path())
        .map_err(|err| CliError::failure(format!("could not read the edited arguments back: {err}")))?;
    let edited: Value = serde_json::from_str(&text).map_err(|err| {
        CliError::usage(format!(
            "the edited arguments are not valid JSON ({err}); nothing was approved"
        ))
    })?;
    Ok((edited != *pending.args).then_some(edited))
}

pub async fn decline(ctx: &Context, call: Call<'_>, reason: Option<String>, json: bool) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, call.run_id, call.model).await?;
    let pending = target(&run, call.tool_call_id)?;
    let stream = agent
        .decline_tool_call(
            ResumeOptions::call(&run.run_id, &pending.tool_call_id)
                .by(cli_author())
                .with_reason(reason),
        )
        .await?;
    Ok(finish(ctx, stream, json).await)
}

/// `askloop approve RUN --all` and `askloop decline RUN --all`: every call
/// of the run waiting for approval, as one decision.
pub async fn every_approval(
    ctx: &Context,
    call: Call<'_>,
    decision: CallDecision,
    json: bool,
) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, call.run_id, call.model).await?;
    let stream = agent.decide_every_approval(&run.run_id, decision, cli_author()).await?;
    Ok(finish(ctx, stream, json).await)
}

/// `askloop retry RUN`: a failed run, continued from its last stored step.
pub async fn retry(ctx: &Context, run_id: &str, model: Option<&str>, json: bool) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, run_id, model).await?;
    let stream = agent.retry_run(&run.run_id, cli_author()).await?;
    Ok(finish(ctx, stream, json).await)
}

/// `askloop cancel RUN`.
pub async fn cancel(ctx: &Context, run_id: &str) -> Result<Done, CliError> {
    let (agent, run) = agent_for(ctx, run_id, None).await?;
    agent.cancel_run(&run.run_id, cli_author()).await?;
    outln!("Cancelled run {}.", run.run_id);
    Ok(Done::Ok)
}

/// `askloop runs recover`: every stalled run, taken over and driven to its
/// next stop in turn. Ends with the worst outcome (a failure, else a
/// suspension).
pub async fn recover(ctx: &Context, json: bool) -> Result<Done, CliError> {
    sweep(ctx, json, Sweep::Stalled).await
}

/// `askloop runs expire`: every question and approval whose time limit
/// passed, resolved (a question tells the model no answer came, an approval
/// is declined), and each run that can go on driven to its next stop.
pub async fn expire(ctx: &Context, json: bool) -> Result<Done, CliError> {
    sweep(ctx, json, Sweep::Overdue).await
}

/// What `runs recover` and `runs expire` go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Runs whose driver stopped (their lease ran out).
    Stalled,
    /// Runs with a call past its time limit.
    Overdue,
}

/// Reads the runs of `sweep` page by page (keyset, so any number is seen)
/// from one store, acts on each with its agent (rebuilt once per agent of
/// the configuration file, whose MCP servers would otherwise start again
/// for every run) and drives what goes on to its next stop before the next
/// page is read. Ends with the worst outcome.
async fn sweep(ctx: &Context, json: bool, sweep: Sweep) -> Result<Done, CliError> {
    const PAGE: u32 = 500;
    let store = ctx.store(Access::Existing).await?;
    let now = SystemClock.now();
    let mut pages = match sweep {
        Sweep::Stalled => ExpiredRuns::new(store.as_ref(), now, PAGE),
        Sweep::Overdue => ExpiredRuns::time_limits(store.as_ref(), now, PAGE),
    };
    let mut configured: HashMap<String, Agent> = HashMap::new();
    let mut seen = 0;
    let mut worst = Done::Ok;
    while let Some(page) = pages.next_page().await? {
        for run in page {
            seen += 1;
            let agent = if RunOrigin::recorded(&run) {
                rebuild_agent(ctx, &store, &run, None).await?
            } else if let Some(agent) = configured.get(&run.agent_id) {
                agent.clone()
            } else {
                let agent = rebuild_agent(ctx, &store, &run, None).await?;
                configured.insert(run.agent_id.clone(), agent.clone());
                agent
            };
            let run_id = run.run_id.clone();
            let streams = match sweep {
                Sweep::Stalled => match agent.recover_listed_run(run, cli_author()).await? {
                    Some(stream) => {
                        errln!("Recovering run {run_id}.");
                        vec![stream]
                    }
                    None => {
                        errln!("Run {run_id} was taken over by another process.");
                        continue;
                    }
                },
                Sweep::Overdue => {
                    let streams = agent.expire_run(&run_id, cli_author()).await?;
                    errln!("Expired the overdue questions of run {run_id}.");
                    streams
                }
            };
            for stream in streams {
                worst = worst.worse(finish(ctx, stream, json).await);
            }
        }
    }
    if seen == 0 {
        match sweep {
            Sweep::Stalled => errln!("No stalled runs."),
            Sweep::Overdue => errln!("No expired questions."),
        }
    }
    Ok(worst)
}

/// Who acts through this command: the CLI, by the login name when the
/// environment gives one.
pub(crate) fn cli_author() -> Author {
    match std::env::var("USER").or_else(|_| std::env::var("USERNAME")) {
        Ok(user) if !user.trim().is_empty() => Author::named(Interface::Cli, user),
        _ => Author::via(Interface::Cli),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use askloop::RunStatus;
    use serde_json::json;

    fn run_with_two_questions(status: RunStatus) -> RunRecord {
        let question = |id: &str| PendingToolCall {
            tool_call_id: id.into(),
            tool_name: "ask_user".into(),
            args: json!({"question": "?"}).into(),
            kind: PendingKind::Suspended,
            suspend_payload: Some(json!({"question": "?"}).into()),
            resume_schema: None,
            expires_at: None,
            started_at: None,
        };
        let now = chrono::Utc::now();
        // Built as a store reads it back.
        #[allow(clippy::disallowed_methods)]
        let mut record = RunRecord::default().with_calls(status, vec![question("call_1"), question("call_2")]);
        record.run_id = "r1".into();
        record.agent_id = "assistant".into();
        record.version = 3;
        record.created_at = now;
        record.updated_at = now;
        record.message_count = 2;
        record.steps = 1;
        record.metadata = json!({});
        record
    }

    #[test]
    fn an_answer_while_a_sibling_call_is_handled_is_not_refused_early() {
        let run = run_with_two_questions(RunStatus::Running);
        assert_eq!(target(&run, Some("call_2")).unwrap().tool_call_id, "call_2");
        // Without an id, or for a call the run does not wait on, there is
        // nothing to wait for.
        assert!(target(&run, None).is_err());
        assert!(target(&run, Some("call_9")).is_err());
        let done = run_with_two_questions(RunStatus::Completed);
        assert!(target(&done, Some("call_2")).is_err());
    }

    #[test]
    fn an_ambiguous_resume_names_the_flag_that_settles_it() {
        let run = run_with_two_questions(RunStatus::Suspended);
        let err = target(&run, None).unwrap_err();
        assert_eq!(err.status, crate::exit::USAGE);
        assert!(err.message.contains("--tool-call-id call_1"), "{}", err.message);
    }
}
