//! `askloop run PROMPT`: one run, no prompts.

use askloop::StreamOptions;

use super::{Access, Context, announce, finish};
use crate::cli::ModelArgs;
use crate::exit::{CliError, Done};
use crate::setup::{self, RunOrigin};

pub async fn run(ctx: &Context, prompt: String, json: bool, model: &ModelArgs) -> Result<Done, CliError> {
    if prompt.trim().is_empty() {
        return Err(CliError::usage("the prompt is empty; say what the agent should do"));
    }
    let (choice, model) = setup::start_model(model)?;
    announce(&choice);
    let store = ctx.store(Access::Create).await?;
    let origin = RunOrigin::new(choice)?;
    let agent = setup::agent(&origin, model, store)?;
    let options = StreamOptions::default().metadata(origin.to_metadata());
    let stream = agent.stream_with(prompt, options).await?;
    Ok(finish(ctx, stream, json).await)
}
