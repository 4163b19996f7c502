//! `askloop link`: a signed answer link for a waiting call, made out to a
//! named person, printed for the operator to send on (or, with `--revoke`,
//! a link taken back). The link is made exactly as the server's
//! `POST /api/runs/{runId}/links` makes it, on the same store, so any
//! `askloop serve` with the same keys and `public_url` answers through it.

use askloop::{Clock, SystemClock};
use askloop_server::links::{self, AnswerLinks, LinkError, LinkRequest};

use super::Context;
use super::serve::load_config;
use crate::cli::LinkArgs;
use crate::exit::{CliError, Done};

pub async fn link(ctx: &Context, args: LinkArgs) -> Result<Done, CliError> {
    let store = ctx.store(askloop_store::Access::Existing).await?;
    let now = SystemClock.now();
    if let Some(link_id) = &args.revoke {
        let revoked = links::revoke(store.as_ref(), link_id, now).await.map_err(cli_error)?;
        if args.json {
            crate::out::json(&revoked)?;
        } else {
            outln!(
                "Revoked link {} (for {}, call {} of run {}).",
                revoked.link_id,
                revoked.recipient,
                revoked.tool_call_id,
                revoked.run_id
            );
        }
        return Ok(Done::Ok);
    }
    let (Some(run_id), Some(to)) = (args.run_id.as_deref(), args.to.as_deref()) else {
        return Err(CliError::usage("give RUN_ID and --to NAME, or --revoke LINK_ID"));
    };
    let config = load_config(ctx)?;
    let links = AnswerLinks::configured(config.links.as_ref(), config.public_url.as_deref())
        .map_err(|err| CliError::usage(err.to_string()))?
        .ok_or_else(|| {
            CliError::usage(
                "answer links are off: add [links] with a [[links.keys]] signing key, and public_url, to askloop.toml (see docs/server.md)",
            )
        })?;
    let request = LinkRequest {
        run_id,
        tool_call_id: args.call.as_deref(),
        recipient: to,
        valid_for: args.expires_in,
    };
    let minted = links.mint(store.as_ref(), request, now).await.map_err(cli_error)?;
    if args.json {
        crate::out::json(&minted)?;
    } else {
        outln!("{}", minted.url);
        errln!(
            "askloop: link {} answers call {} of run {} as {}, once, until {}. Whoever opens it answers as {}.",
            minted.link_id,
            minted.tool_call_id,
            minted.run_id,
            minted.recipient,
            askloop::rfc3339(minted.expires_at),
            minted.recipient
        );
    }
    Ok(Done::Ok)
}

fn cli_error(err: LinkError) -> CliError {
    match err {
        LinkError::Store(err) => err.into(),
        LinkError::Ambiguous { ref pending, .. } => CliError::usage(format!(
            "{err}; pass --call (e.g. --call {})",
            pending.first().map_or("ID", String::as_str)
        )),
        other => CliError::usage(other.to_string()),
    }
}
