//! `askloop chat`: a conversation in the terminal, answering the agent's
//! questions as they come.

use askloop::{Agent, Message, PendingKind, Question, ResumeOptions, RunError, RunStatus, StreamOptions, StreamOutput};

use super::{Access, Context, announce};
use crate::cli::ModelArgs;
use crate::exit::{CliError, Done};
use crate::prompt::{self, Prompter, Reply};
use crate::render::{self, Format};
use crate::setup::{self, ModelChoice, RunOrigin};
use crate::tools;

pub async fn chat(ctx: &Context, first: Option<String>, model: &ModelArgs) -> Result<Done, CliError> {
    let (choice, model) = setup::start_model(model)?;
    announce(&choice);
    let store = ctx.store(Access::Create).await?;
    let origin = RunOrigin::new(choice.clone())?;
    let agent = setup::agent(&origin, model, store.clone())?;
    let mut prompter = prompt::for_stdin();
    let mut history: Vec<Message> = Vec::new();
    let mut next = first;

    loop {
        let text = match next.take() {
            Some(text) => text,
            None => match prompter.message("You:")? {
                Some(text) if text.trim().is_empty() => continue,
                Some(text) => text,
                None => return Ok(Done::Ok),
            },
        };
        history.push(Message::user(text));
        let options = StreamOptions::default().metadata(origin.to_metadata());
        let stream = agent.stream_with(history.clone(), options).await?;
        let output = render::print_stream(stream, Format::Human).await;
        let output = match answer_until_done(ctx, &agent, prompter.as_mut(), &origin.root(), output).await? {
            Some(output) => output,
            None => return Ok(Done::Suspended),
        };
        if output.status != RunStatus::Completed {
            return Ok(Done::from_status(output.status));
        }
        if choice == ModelChoice::Demo {
            errln!("askloop: the offline demo ends here.");
            return Ok(Done::Ok);
        }
        history = store.messages(&output.run_id).await?;
    }
}

/// Prompts for every pending call and resumes, until the run is no longer
/// suspended. `None` when the person left a question open.
async fn answer_until_done(
    ctx: &Context,
    agent: &Agent,
    prompter: &mut dyn Prompter,
    root: &std::path::Path,
    mut output: StreamOutput,
) -> Result<Option<StreamOutput>, CliError> {
    while output.status == RunStatus::Suspended {
        let Some(call) = output.pending.first().cloned() else {
            break;
        };
        let run_id = output.run_id.clone();
        let stream = match call.kind {
            PendingKind::Approval => {
                match prompter.approve(&tools::describe_call(root, &call.tool_name, &call.args))? {
                    Some(true) => {
                        agent
                            .approve_tool_call(ResumeOptions::call(&run_id, &call.tool_call_id))
                            .await?
                    }
                    Some(false) => {
                        agent
                            .decline_tool_call(ResumeOptions::call(&run_id, &call.tool_call_id))
                            .await?
                    }
                    None => return left(ctx, &output),
                }
            }
            PendingKind::Suspended => {
                let Some(question) = call.suspend_payload.as_ref().and_then(Question::from_payload) else {
                    return left(ctx, &output);
                };
                match prompter.ask(&question)? {
                    Reply::Answer(data) => {
                        match agent
                            .resume_stream(data, ResumeOptions::call(&run_id, &call.tool_call_id))
                            .await
                        {
                            Ok(stream) => stream,
                            Err(err @ RunError::InvalidAnswer { .. }) => {
                                errln!("askloop: {err}");
                                continue;
                            }
                            Err(err) => return Err(err.into()),
                        }
                    }
                    Reply::Left => return left(ctx, &output),
                }
            }
        };
        output = render::print_stream(stream, Format::Human).await;
    }
    Ok(Some(output))
}

/// The person left a question open: say how to answer (or decline) later.
fn left(ctx: &Context, output: &StreamOutput) -> Result<Option<StreamOutput>, CliError> {
    errln!("\naskloop: run {} stays suspended. Answer later:", output.run_id);
    err!(
        "{}",
        render::describe_pending(&ctx.askloop(), &output.run_id, &output.pending)
    );
    Ok(None)
}
