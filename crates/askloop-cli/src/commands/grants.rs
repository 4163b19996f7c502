//! `askloop grants` and `grants revoke ID`: the approvals that stick of a
//! resource (made with `askloop approve --always`, on the page or over the
//! API), read from the store that holds its runs.

use std::sync::Arc;

use askloop::{Clock, Grant, GrantQuery, GrantStore, RunStore, StoreError, SystemClock};
use askloop_server::GrantView;

use super::decide::cli_author;
use super::{Access, Context};
use crate::escape;
use crate::exit::{CliError, Done};

fn grant_store(store: &Arc<dyn RunStore>) -> Result<&dyn GrantStore, CliError> {
    store.grant_store().ok_or_else(|| CliError::from(StoreError::NoGrants))
}

/// `askloop grants`: the resource's grants, newest first; live ones unless
/// `all`.
pub async fn list(
    ctx: &Context,
    resource: String,
    thread: Option<&str>,
    all: bool,
    as_json: bool,
) -> Result<Done, CliError> {
    let store = ctx.store(Access::ReadOnly).await?;
    let query = GrantQuery {
        resource_id: Some(resource.clone()),
        thread_id: thread.map(str::to_owned),
        live_at: (!all).then(|| SystemClock.now()),
        ..GrantQuery::default()
    };
    let grants = grant_store(&store)?.grants(&query).await?;
    if as_json {
        crate::out::json(&grants.into_iter().map(GrantView::from).collect::<Vec<_>>())?;
        return Ok(Done::Ok);
    }
    if grants.is_empty() {
        errln!(
            "No approvals that stick for resource {}{}.",
            escape::one_line(&resource),
            if all {
                ""
            } else {
                " (--all lists revoked and expired ones too)"
            }
        );
        return Ok(Done::Ok);
    }
    outln!(
        "{:<46}  {:<16}  {:<14}  {:<16}  {:<20}  STATE",
        "GRANT ID",
        "TOOL",
        "SCOPE",
        "BY",
        "GRANTED"
    );
    let now = SystemClock.now();
    for grant in &grants {
        outln!(
            "{:<46}  {:<16}  {:<14}  {:<16}  {:<20}  {}",
            escape::one_line(&grant.id),
            escape::one_line(&tool_label(grant)),
            scope_label(grant),
            escape::one_line(grant.granted_by.by.as_deref().unwrap_or(grant.granted_by.via.as_str())),
            grant.granted_at.format("%Y-%m-%d %H:%M:%S"),
            state(grant, now)
        );
    }
    Ok(Done::Ok)
}

/// `askloop grants revoke ID`: recorded with the CLI's user as who revoked
/// it. Another resource's grant is not found, as an unknown one.
pub async fn revoke(ctx: &Context, resource: &str, id: &str, as_json: bool) -> Result<Done, CliError> {
    let store = ctx.store(Access::Existing).await?;
    let grants = grant_store(&store)?;
    let unknown = || {
        CliError::failure(format!(
            "resource {} has no approval that sticks with id {} (`askloop grants --all` lists them)",
            escape::one_line(resource),
            escape::one_line(id)
        ))
    };
    let grant = grants.grant(id).await?.ok_or_else(unknown)?;
    if grant.resource_id != resource {
        return Err(unknown());
    }
    let revoked = grants
        .revoke_grant(id, &cli_author(), SystemClock.now())
        .await?
        .ok_or_else(unknown)?;
    if as_json {
        crate::out::json(&GrantView::from(revoked.clone()))?;
    } else if grant.revoked_at.is_some() {
        errln!("Grant {} was revoked already; kept as it was.", escape::one_line(id));
    } else {
        errln!(
            "Revoked: {} no longer runs without asking {}.",
            escape::one_line(&tool_label(&revoked)),
            scope_label(&revoked)
        );
    }
    Ok(Done::Ok)
}

fn tool_label(grant: &Grant) -> String {
    match &grant.mcp_server {
        Some(server) => format!("{} ({server})", grant.tool),
        None => grant.tool.clone(),
    }
}

fn scope_label(grant: &Grant) -> String {
    let args = if grant.args.is_some() { ", same arguments" } else { "" };
    match grant.scope {
        askloop::GrantScope::Thread => format!("in thread {}{args}", escape::one_line(&grant.thread_id)),
        askloop::GrantScope::Resource => format!("in every thread{args}"),
    }
}

fn state(grant: &Grant, now: chrono::DateTime<chrono::Utc>) -> String {
    match (grant.revoked_at, grant.expires_at) {
        (Some(at), _) => format!("revoked {}", at.format("%Y-%m-%d %H:%M")),
        (None, Some(until)) if until <= now => format!("expired {}", until.format("%Y-%m-%d %H:%M")),
        (None, Some(until)) => format!("until {}", until.format("%Y-%m-%d %H:%M")),
        (None, None) => "until revoked".to_owned(),
    }
}
