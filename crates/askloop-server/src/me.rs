//! `GET /api/me`: who the server takes the caller for, and the resource
//! whose threads a front end keeps its conversations under when it has no
//! word of its own for the person (the web page does this).
//!
//! A caller walled to some resources (a named token of `askloop.toml`, or
//! the person behind `author_header`) uses the first of them: the token's
//! own name, or the person. Any other caller (no token, or only
//! `ASKLOOP_API_TOKEN`) may name any resource, which is then a label: the
//! page uses [`PAGE_RESOURCE`], so every browser on such a server shares its
//! conversations, as they share its runs.

use axum::Json;
use serde::Serialize;

use crate::auth::Caller;

/// The resource a caller that may name any resource keeps its
/// conversations under on the page (`askloop threads --resource page`
/// lists them).
pub const PAGE_RESOURCE: &str = "page";

/// The body of `GET /api/me`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Me {
    /// The token's name, or the person the proxy names; `null` on a server
    /// without tokens.
    name: Option<String>,
    /// The resource to keep conversations under.
    resource: String,
    /// Every resource the caller may use; `null`: any (a resource is then a
    /// label, not a wall).
    resources: Option<Vec<String>>,
    /// The agents the caller may act for; `null`: every agent.
    agents: Option<Vec<String>>,
}

/// `GET /api/me`.
pub(crate) async fn get(caller: Caller) -> Json<Me> {
    let resources = caller.resources().map(<[String]>::to_vec);
    let resource = resources
        .as_ref()
        .and_then(|r| r.first().cloned())
        .unwrap_or_else(|| PAGE_RESOURCE.to_owned());
    Json(Me {
        name: caller.author().by,
        resource,
        resources,
        agents: caller.agents().map(<[String]>::to_vec),
    })
}
