//! `askloop chat`: a conversation in the terminal, answering the agent's
//! questions as they come. With `--thread`, the conversation is a stored
//! thread: each message is a run on it, so it goes on from any terminal,
//! after any restart.

use std::sync::Arc;

use askloop::{
    Agent, AgentStream, Author, CallState, Message, PendingKind, PendingToolCall, Question, ResumeOptions, RunError,
    RunRecord, RunStatus, RunStore, StreamOptions, StreamOutput, ThreadKey, ThreadOptions,
};

use super::decide::cli_author;
use super::serve::configured_agent;
use super::threads;
use super::{Access, Context, announce};
use crate::cli::ModelArgs;
use crate::exit::{CliError, Done};
use crate::prompt::{self, Approval, Prompter, Reply};
use crate::render::{self, Format};
use crate::setup::{self, ModelChoice, RunOrigin};
use crate::tools;

/// How many of a thread's last messages `chat --thread` shows on start.
const SHOWN_ON_START: u32 = 6;

pub async fn chat(ctx: &Context, first: Option<String>, model: &ModelArgs) -> Result<Done, CliError> {
    let Chat {
        choice,
        store,
        origin,
        agent,
    } = Chat::start(ctx, model).await?;
    let mut prompter = prompt::for_stdin();
    let mut history: Vec<Message> = Vec::new();
    let mut next = first;
    let turn = Turn {
        ctx,
        agent: &agent,
        origin: &origin,
        choice: &choice,
        author: Author::default(),
        on_thread: false,
    };
    loop {
        let Some(text) = next_message(prompter.as_mut(), &mut next)? else {
            return Ok(Done::Ok);
        };
        history.push(Message::user(text));
        let options = StreamOptions::default().metadata(origin.to_metadata());
        let stream = agent.stream_with(history.clone(), options).await?;
        match turn.finish(prompter.as_mut(), stream).await? {
            Ok(output) => history = store.messages(&output.run_id).await?,
            Err(done) => return Ok(done),
        }
    }
}

/// What a chat runs with: its model, store and agent.
struct Chat {
    choice: ModelChoice,
    store: Arc<dyn RunStore>,
    origin: RunOrigin,
    agent: Agent,
}

impl Chat {
    /// The model the arguments choose (announced), the store (created if
    /// missing) and the agent on them.
    async fn start(ctx: &Context, model_args: &ModelArgs) -> Result<Chat, CliError> {
        let (choice, model) = setup::start_model(model_args)?;
        announce(&choice);
        let store = ctx.store(Access::Create).await?;
        let origin = RunOrigin::new(choice.clone())?;
        let agent = setup::agent(&origin, model, store.clone())?;
        Ok(Chat {
            choice,
            store,
            origin,
            agent,
        })
    }
}

/// The next message the person types (`first`, once, before any), or
/// `None` at the end of input; blank lines are skipped.
fn next_message(prompter: &mut dyn Prompter, first: &mut Option<String>) -> Result<Option<String>, CliError> {
    if let Some(text) = first.take() {
        return Ok(Some(text));
    }
    loop {
        match prompter.message("You:")? {
            Some(text) if text.trim().is_empty() => continue,
            other => return Ok(other),
        }
    }
}

/// One message's run of a chat, from its stream to its end.
struct Turn<'a> {
    ctx: &'a Context,
    agent: &'a Agent,
    origin: &'a RunOrigin,
    choice: &'a ModelChoice,
    /// Who the chat's answers are recorded as coming from.
    author: Author,
    /// The chat is on a thread: an approval may stick to it.
    on_thread: bool,
}

impl Turn<'_> {
    /// Prints the run's stream and asks its questions until it ends: the
    /// completed run, or how the chat ends here (a question left open, a
    /// run that did not complete, the offline demo's one exchange).
    async fn finish(
        &self,
        prompter: &mut dyn Prompter,
        stream: AgentStream,
    ) -> Result<Result<StreamOutput, Done>, CliError> {
        let output = render::print_stream(stream, Format::Human).await;
        let root = self.origin.root();
        let Some(output) = answer_until_done(
            self.ctx,
            self.agent,
            prompter,
            &root,
            &self.author,
            output,
            self.on_thread,
        )
        .await?
        else {
            return Ok(Err(Done::Suspended));
        };
        if output.status != RunStatus::Completed {
            return Ok(Err(Done::from_status(output.status)));
        }
        if *self.choice == ModelChoice::Demo {
            errln!("askloop: the offline demo ends here.");
            return Ok(Err(Done::Ok));
        }
        Ok(Ok(output))
    }
}

/// `askloop chat --thread ID`: shows where the thread stands (its last
/// messages, or that it is new), asks a question it waits on first, then
/// starts a run on the thread for each message typed, sending only that
/// message: the run reads the thread's last messages as its context.
pub async fn chat_on_thread(
    ctx: &Context,
    first: Option<String>,
    model_args: &ModelArgs,
    resource: String,
    thread_id: &str,
) -> Result<Done, CliError> {
    let key = threads::thread_key(resource, thread_id)?;
    let Chat {
        choice,
        store,
        origin,
        agent,
    } = Chat::start(ctx, model_args).await?;
    let mut prompter = prompt::for_stdin();

    show_where_it_stands(&store, &key).await?;
    for run in threads::waiting_runs(&store, &key).await? {
        if answer_waiting(ctx, &store, model_args, prompter.as_mut(), run).await? == Done::Suspended {
            return Ok(Done::Suspended);
        }
    }

    let mut next = first;
    let turn = Turn {
        ctx,
        agent: &agent,
        origin: &origin,
        choice: &choice,
        author: cli_author(),
        on_thread: true,
    };
    loop {
        let Some(text) = next_message(prompter.as_mut(), &mut next)? else {
            return Ok(Done::Ok);
        };
        let on_thread = ThreadOptions::new(&key.resource_id, &key.thread_id).by(cli_author());
        let options = StreamOptions::default()
            .metadata(origin.to_metadata())
            .on_thread(on_thread);
        let stream = agent.stream_with(text, options).await?;
        if let Err(done) = turn.finish(prompter.as_mut(), stream).await? {
            return Ok(done);
        }
    }
}

/// Prints the thread's last messages, or that it is new, on stderr (where
/// the chat's other remarks go).
async fn show_where_it_stands(store: &Arc<dyn RunStore>, key: &ThreadKey) -> Result<(), CliError> {
    let threads_of = threads::thread_store(store)?;
    let Some(thread) = threads_of.thread(key).await? else {
        errln!(
            "askloop: thread {} of resource {} is new; your first message starts it.",
            crate::escape::one_line(&key.thread_id),
            crate::escape::one_line(&key.resource_id)
        );
        return Ok(());
    };
    if thread.agent_id != setup::AGENT_ID {
        errln!(
            "askloop: thread {} was started by agent {}; this chat's runs on it are the default agent's ({})",
            crate::escape::one_line(&key.thread_id),
            crate::escape::one_line(&thread.agent_id),
            setup::AGENT_ID
        );
    }
    let from = (thread.message_count - i64::from(SHOWN_ON_START)).max(0);
    let stored = threads_of.thread_messages(key, from, SHOWN_ON_START).await?;
    let shown = threads::shown_messages(store, &stored).await?;
    let earlier = if from > 0 {
        format!(", the last {} shown", stored.len())
    } else {
        String::new()
    };
    errln!(
        "askloop: thread {} of resource {}: {} messages{earlier}",
        crate::escape::one_line(&key.thread_id),
        crate::escape::one_line(&key.resource_id),
        thread.message_count
    );
    err!("{}", threads::describe_messages(&shown));
    Ok(())
}

/// Asks the question a run on the thread waits on, and resumes the run
/// with the answer (the same resume as `askloop resume`), until it stops
/// waiting. `Suspended` when the person left it open.
async fn answer_waiting(
    ctx: &Context,
    store: &Arc<dyn RunStore>,
    model_args: &ModelArgs,
    prompter: &mut dyn Prompter,
    run: RunRecord,
) -> Result<Done, CliError> {
    let (agent, root) = if RunOrigin::recorded(&run) {
        let origin = RunOrigin::of_run(&run)?;
        let model = setup::resume_model(&run.run_id, &origin, None)?;
        (setup::agent(&origin, model, Arc::clone(store))?, origin.root())
    } else {
        // Started by `askloop serve` (or `mcp`): its agent of the
        // configuration, driven by the model this chat was given.
        let agent = configured_agent(ctx, &run.agent_id, model_args, store).await?;
        let root = std::env::current_dir()
            .map_err(|err| CliError::failure(format!("cannot tell the current folder: {err}")))?;
        (agent, root)
    };
    errln!("askloop: the thread waits on run {}:", run.run_id);
    let pending = super::runs::waiting(&run);
    let Some(call) = pending.first().cloned() else {
        return Ok(Done::Ok);
    };
    let stream = loop {
        match answer_one(
            &agent,
            prompter,
            &root,
            &cli_author(),
            &run.run_id,
            &call,
            run.memory.is_some(),
        )
        .await?
        {
            Answered::Stream(stream) => break stream,
            Answered::Again => continue,
            Answered::Gone(err) => {
                errln!("askloop: {err}; the thread goes on without this answer");
                return Ok(Done::Ok);
            }
            Answered::Left => {
                left(ctx, &run.run_id, &pending);
                return Ok(Done::Suspended);
            }
        }
    };
    let output = render::print_stream(stream, Format::Human).await;
    match answer_until_done(
        ctx,
        &agent,
        prompter,
        &root,
        &cli_author(),
        output,
        run.memory.is_some(),
    )
    .await?
    {
        Some(output) => Ok(Done::from_status(output.status)),
        None => Ok(Done::Suspended),
    }
}

/// What came of asking the person about one pending call.
enum Answered {
    /// They decided; the run goes on in this stream.
    Stream(AgentStream),
    /// Their answer was refused (said on stderr): ask again.
    Again,
    /// They left the call open.
    Left,
    /// The call no longer waits: answered, expired or superseded elsewhere
    /// while they decided.
    Gone(RunError),
}

/// Asks the person about `call` of run `run_id` (approve or decline, or
/// answer the question) and hands their decision, made by `author`, to the
/// agent.
async fn answer_one(
    agent: &Agent,
    prompter: &mut dyn Prompter,
    root: &std::path::Path,
    author: &Author,
    run_id: &str,
    call: &PendingToolCall,
    on_thread: bool,
) -> Result<Answered, CliError> {
    let options = ResumeOptions::call(run_id, &call.tool_call_id).by(author.clone());
    let decided = match call.kind {
        PendingKind::Approval => {
            let what = tools::describe_call(root, &call.tool_name, &call.args);
            match prompter.approve(&what, on_thread)? {
                Some(Approval::Yes) => agent.approve_tool_call(options).await,
                Some(Approval::Always) => {
                    let always = askloop::Always::in_scope(askloop::GrantScope::Thread);
                    agent.approve_tool_call_always(options, always).await
                }
                Some(Approval::No) => agent.decline_tool_call(options).await,
                None => return Ok(Answered::Left),
            }
        }
        PendingKind::Suspended => {
            let Some(question) = call.suspend_payload.as_deref().and_then(Question::from_payload) else {
                return Ok(Answered::Left);
            };
            match prompter.ask(&question)? {
                Reply::Answer(data) => match agent.resume_stream(data, options).await {
                    Err(err @ RunError::InvalidAnswer { .. }) => {
                        errln!("askloop: {err}");
                        return Ok(Answered::Again);
                    }
                    other => other,
                },
                Reply::Left => return Ok(Answered::Left),
            }
        }
    };
    let err = match decided {
        Ok(stream) => return Ok(Answered::Stream(stream)),
        Err(err) => err,
    };
    // Refused: whether the call still waits is the run's to say, read
    // again now (answered, expired or superseded elsewhere meanwhile).
    match agent.get_run(run_id).await {
        Ok(run) => match run.call_state(&call.tool_call_id, agent.clock().now()) {
            CallState::Waiting(_) | CallState::Held(_) => Err(err.into()),
            _ => Ok(Answered::Gone(err)),
        },
        Err(_) => Err(err.into()),
    }
}

/// Prompts for every pending call and resumes (the decisions made by
/// `author`), until the run is no longer suspended. `None` when the person
/// left a question open.
async fn answer_until_done(
    ctx: &Context,
    agent: &Agent,
    prompter: &mut dyn Prompter,
    root: &std::path::Path,
    author: &Author,
    mut output: StreamOutput,
    on_thread: bool,
) -> Result<Option<StreamOutput>, CliError> {
    while output.status == RunStatus::Suspended {
        let Some(call) = output.pending.first().cloned() else {
            break;
        };
        let stream = match answer_one(agent, prompter, root, author, &output.run_id, &call, on_thread).await? {
            Answered::Stream(stream) => stream,
            Answered::Again => continue,
            Answered::Gone(err) => return Err(err.into()),
            Answered::Left => {
                left(ctx, &output.run_id, &output.pending);
                return Ok(None);
            }
        };
        output = render::print_stream(stream, Format::Human).await;
    }
    Ok(Some(output))
}

/// The person left a question open: say how to answer (or decline) later.
fn left(ctx: &Context, run_id: &str, pending: &[PendingToolCall]) {
    errln!("\naskloop: run {run_id} stays suspended. Answer later:");
    err!("{}", render::describe_pending(&ctx.askloop(), run_id, pending));
}
