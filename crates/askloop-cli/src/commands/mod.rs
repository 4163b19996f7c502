//! One module per command. Each returns how it ended ([`Done`]) or a
//! [`CliError`]; `main` turns either into the exit status.

mod chat;
mod decide;
mod grants;
mod link;
mod mcp;
mod run;
mod runs;
mod serve;
mod threads;

use askloop::{AgentStream, CallDecision, StreamOutput};

use crate::cli::{Cli, Command, GrantsCommand, RunsCommand, ThreadsCommand};
use crate::exit::{CliError, Done};
use crate::render::{self, Format};
use crate::setup::{self, ModelChoice};
pub use askloop_store::Access;

/// Runs the command the user typed.
pub async fn dispatch(cli: Cli) -> Result<Done, CliError> {
    let ctx = Context {
        db: cli.db,
        config: cli.config,
    };
    match cli.command {
        Command::Chat {
            prompt,
            thread: Some(thread),
            resource,
            model,
        } => {
            let resource = threads::resource(resource.resource.as_deref())?;
            chat::chat_on_thread(&ctx, prompt, &model, resource, &thread).await
        }
        Command::Chat {
            resource: crate::cli::ResourceArg { resource: Some(_) },
            ..
        } => Err(CliError::usage(
            "--resource goes with --thread: it names whose thread the chat continues",
        )),
        Command::Chat { prompt, model, .. } => chat::chat(&ctx, prompt, &model).await,
        Command::Threads(args) => {
            let resource = threads::resource(args.resource.resource.as_deref())?;
            match args.command {
                Some(ThreadsCommand::Show { thread_id, json }) => {
                    threads::show(&ctx, resource, &thread_id, json || args.json).await
                }
                Some(ThreadsCommand::Delete {
                    thread_id,
                    cancel_runs,
                    json,
                }) => threads::delete(&ctx, resource, &thread_id, cancel_runs, json || args.json).await,
                None => threads::list(&ctx, resource, args.limit, args.json).await,
            }
        }
        Command::Run { prompt, json, model } => run::run(&ctx, prompt, json, &model).await,
        Command::Resume(args) => decide::resume(&ctx, args).await,
        Command::Approve {
            run_id,
            tool_call_id,
            all,
            args,
            edit,
            always,
            same_args,
            lasting,
            model,
            json,
        } => {
            let call = decide::Call::new(&run_id, tool_call_id.as_deref(), model.as_deref());
            if all {
                decide::every_approval(&ctx, call, CallDecision::Approve, json).await
            } else {
                let args = match (args, edit, always) {
                    (Some(args), _, _) => decide::Args::Given(args),
                    (None, true, _) => decide::Args::Edit,
                    (None, false, Some(scope)) => {
                        let mut always = askloop::Always::in_scope(scope);
                        if same_args {
                            always = always.same_arguments();
                        }
                        if let Some(lasting) = lasting {
                            always = always.lasting(lasting);
                        }
                        decide::Args::Always(always)
                    }
                    (None, false, None) => decide::Args::Model,
                };
                decide::approve(&ctx, call, args, json).await
            }
        }
        Command::Grants(args) => {
            let resource = threads::resource(args.resource.resource.as_deref())?;
            match args.command {
                Some(GrantsCommand::Revoke { grant_id }) => grants::revoke(&ctx, &resource, &grant_id, args.json).await,
                None => grants::list(&ctx, resource, args.thread.as_deref(), args.all, args.json).await,
            }
        }
        Command::Decline {
            run_id,
            tool_call_id,
            all,
            reason,
            model,
            json,
        } => {
            let call = decide::Call::new(&run_id, tool_call_id.as_deref(), model.as_deref());
            if all {
                decide::every_approval(&ctx, call, CallDecision::Decline(reason), json).await
            } else {
                decide::decline(&ctx, call, reason, json).await
            }
        }
        Command::Runs(args) => match args.show {
            Some(RunsCommand::Show { run_id, json }) => runs::show(&ctx, &run_id, json).await,
            Some(RunsCommand::Recover { json }) => decide::recover(&ctx, json).await,
            Some(RunsCommand::Expire { json }) => decide::expire(&ctx, json).await,
            None => runs::list(&ctx, args.status.as_deref(), args.limit, args.json).await,
        },
        Command::Retry { run_id, model, json } => decide::retry(&ctx, &run_id, model.as_deref(), json).await,
        Command::Cancel { run_id } => decide::cancel(&ctx, &run_id).await,
        Command::Link(args) => link::link(&ctx, args).await,
        Command::Serve(args) => serve::serve(&ctx, args).await,
        Command::Mcp(args) => mcp::mcp(&ctx, args).await,
    }
}

/// What every command shares.
#[derive(Debug)]
pub struct Context {
    /// `--db` as given (None: the default file).
    pub db: Option<String>,
    /// `--config` as given (None: `./askloop.toml` when it exists, else the
    /// default agent).
    pub config: Option<std::path::PathBuf>,
}

impl Context {
    /// The command prefix to print in hints, so they work as typed from any
    /// folder: a relative database path is made absolute.
    pub fn askloop(&self) -> String {
        let mut command = "askloop".to_owned();
        if let Some(db) = &self.db {
            command.push_str(&format!(" --db {}", render::shell_quote(&setup::absolute_location(db))));
        }
        if let Some(config) = &self.config {
            let config = std::path::absolute(config).unwrap_or_else(|_| config.clone());
            command.push_str(&format!(
                " --config {}",
                render::shell_quote(&config.display().to_string())
            ));
        }
        command
    }

    /// Opens the store for what the command will do with it.
    pub async fn store(&self, access: Access) -> Result<std::sync::Arc<dyn askloop::RunStore>, CliError> {
        setup::open_store(self.db.as_deref(), access).await
    }
}

fn format(json: bool) -> Format {
    if json { Format::Json } else { Format::Human }
}

/// Says so when the offline demo stands in for a model.
fn announce(choice: &ModelChoice) {
    if *choice == ModelChoice::Demo {
        errln!(
            "askloop: using the built-in offline demo (a scripted model, not a real one); for a real model pass --model openai/gpt-4o-mini (OPENAI_API_KEY), anthropic/claude-sonnet-4-5 (ANTHROPIC_API_KEY) or ollama/qwen2.5"
        );
    }
}

/// Prints a stream to its end; when the run suspends, prints what it waits
/// on and how to answer (to stdout for people, to stderr with `--json`).
async fn finish(ctx: &Context, stream: AgentStream, json: bool) -> Done {
    let output = render::print_stream(stream, format(json)).await;
    report(ctx, &output, json);
    Done::from_status(output.status)
}

fn report(ctx: &Context, output: &StreamOutput, json: bool) {
    if output.status != askloop::RunStatus::Suspended {
        return;
    }
    let text = render::describe_pending(&ctx.askloop(), &output.run_id, &output.pending);
    if json {
        err!("{text}");
    } else {
        out!("{text}");
    }
}
