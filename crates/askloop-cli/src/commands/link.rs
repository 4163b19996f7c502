//! `askloop link`: a signed answer link for a waiting call, made out to a
//! named person, printed for the operator to send on (or, with `--revoke`,
//! a link taken back). The link is made exactly as the server's
//! `POST /api/runs/{runId}/links` makes it, on the same store, so any
//! `askloop serve` with the same keys and `public_url` answers through it.
//! Its maker is the CLI's user (the login name), as for every decision
//! taken with `askloop`.

use askloop::{Clock, SystemClock};
use askloop_server::links::{self, AnswerLinks, LinkError, LinkRequest};

use super::Context;
use super::decide::cli_author;
use super::serve::load_config;
use crate::cli::LinkArgs;
use crate::escape;
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
                "Revoked link {} (for {}{}, call {} of run {}).",
                revoked.link_id,
                escape::one_line(&revoked.recipient),
                made_by(revoked.made_by.as_deref()),
                escape::one_line(&revoked.tool_call_id),
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
    let maker = cli_author().by;
    let request = LinkRequest {
        run_id,
        tool_call_id: args.call.as_deref(),
        recipient: to,
        maker: maker.as_deref(),
        valid_for: args.expires_in,
    };
    let minted = links.mint(store.as_ref(), request, now).await.map_err(cli_error)?;
    if args.json {
        crate::out::json(&minted)?;
    } else {
        outln!("{}", minted.url);
        let recipient = escape::one_line(&minted.recipient);
        errln!(
            "askloop: link {} answers call {} of run {} as {recipient}{}, once, until {}. Whoever opens it answers as {recipient}.",
            minted.link_id,
            escape::one_line(&minted.tool_call_id),
            minted.run_id,
            made_by(minted.made_by.as_deref()),
            askloop::rfc3339(minted.expires_at),
        );
    }
    Ok(Done::Ok)
}

/// ", made by alice" (the link's maker), or nothing when none was named.
fn made_by(maker: Option<&str>) -> String {
    maker
        .map(|m| format!(", made by {}", escape::one_line(m)))
        .unwrap_or_default()
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
