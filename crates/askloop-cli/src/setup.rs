//! Resolved settings, and the agent a run is driven by.
//!
//! A run records how its agent was made (the model or script, the
//! instructions) in its metadata, so `resume`, `approve` and `decline` need
//! only the store: answering tomorrow, from another terminal, does not
//! require knowing how the run was started.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use askloop::{Agent, DatabaseFault, IdKind, Model, RunRecord, RunStore, StoreError};
use askloop_config::{ModelSource, ServerConfig, ToolKind};
use askloop_providers::HttpConfig;
use askloop_store::Access;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cli::ModelArgs;
use crate::demo;
use crate::exit::CliError;

/// The default agent's id: the one of the configuration without a file.
pub use askloop_config::DEFAULT_AGENT_ID as AGENT_ID;

/// The default agent's instructions.
pub const INSTRUCTIONS: &str = "You are a helpful assistant working with a person in a terminal. When a request is \
ambiguous, when you are about to act on an assumption, or when there are several reasonable options, ask the \
person with the ask_user tool instead of guessing: give 2-4 options for a choice, none for an open question. \
To write a file, use write_file; the person approves each write. Keep answers short.";

/// The metadata key under which the CLI records a run's origin.
const ORIGIN_KEY: &str = "askloopCli";

/// Which model drives a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ModelChoice {
    /// The built-in offline demo script.
    Demo,
    /// A script file (absolute path).
    Script { path: PathBuf },
    /// A real model, e.g. `openai/gpt-4o-mini`, and where its requests
    /// went when the run started (absent in runs of older versions).
    Spec {
        spec: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<StoredEndpoint>,
    },
}

/// Where a run's model requests go: the provider and base URL, never the
/// key. Recorded when the run starts, so that a resume sends the
/// conversation where it has been, not wherever the environment of the
/// resuming shell points (a run started against a local server must not be
/// posted, with a key, to the public API because `OPENAI_BASE_URL` is unset
/// in another terminal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredEndpoint {
    pub provider: String,
    pub base_url: String,
}

/// How a run's agent was made, stored with the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOrigin {
    pub agent_id: String,
    pub model: ModelChoice,
    pub instructions: String,
    /// The folder the run started in (absolute): `write_file` writes inside
    /// it, from wherever the call is approved. Runs of older versions have
    /// none and write under the current folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
}

impl RunOrigin {
    pub fn new(model: ModelChoice) -> Result<Self, CliError> {
        let root = std::env::current_dir()
            .map_err(|err| CliError::failure(format!("cannot tell the current folder: {err}")))?;
        Ok(RunOrigin {
            agent_id: AGENT_ID.to_owned(),
            model,
            instructions: INSTRUCTIONS.to_owned(),
            root: Some(root),
        })
    }

    /// Where `write_file` writes: the run's folder, or (for runs that did
    /// not record one) the current folder.
    pub fn root(&self) -> PathBuf {
        self.root
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("."))
    }

    pub fn to_metadata(&self) -> Value {
        let origin = serde_json::to_value(self).unwrap_or(Value::Null);
        serde_json::json!({ ORIGIN_KEY: origin })
    }

    /// Whether the `askloop` command started the run (and so recorded its
    /// origin); runs of `askloop serve`, `askloop mcp` and programs have none.
    pub fn recorded(run: &RunRecord) -> bool {
        run.metadata.get(ORIGIN_KEY).is_some()
    }

    /// Reads the origin a run was started with.
    pub fn of_run(run: &RunRecord) -> Result<RunOrigin, CliError> {
        let origin = run.metadata.get(ORIGIN_KEY).cloned().ok_or_else(|| {
            CliError::failure(format!(
                "run {} was not started by the askloop command (it has no record of its model); resume it from the program that started it",
                run.run_id
            ))
        })?;
        serde_json::from_value(origin).map_err(|err| {
            CliError::failure(format!(
                "run {} has an unreadable record of its model: {err}",
                run.run_id
            ))
        })
    }
}

/// Picks the model from flags and environment: `--model`, then `--script`,
/// then a provider key in the environment, then the offline demo.
pub fn choose_model(args: &ModelArgs) -> Result<ModelChoice, CliError> {
    if let Some(spec) = &args.model {
        return Ok(ModelChoice::Spec {
            spec: spec.clone(),
            endpoint: None,
        });
    }
    if let Some(path) = &args.script {
        let path = std::path::absolute(path)
            .map_err(|err| CliError::usage(format!("script path {}: {err}", path.display())))?;
        return Ok(ModelChoice::Script { path });
    }
    if env_set("OPENAI_API_KEY") {
        return Ok(ModelChoice::Spec {
            spec: "openai/gpt-4o-mini".to_owned(),
            endpoint: None,
        });
    }
    if env_set("ANTHROPIC_API_KEY") {
        return Ok(ModelChoice::Spec {
            spec: "anthropic/claude-sonnet-4-5".to_owned(),
            endpoint: None,
        });
    }
    Ok(ModelChoice::Demo)
}

fn env_set(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.trim().is_empty())
}

/// Picks and makes the model of a new run, before anything is stored: a
/// missing key or a missing or bad script fails here (bad usage). The
/// choice returned records where a real model's requests go.
pub fn start_model(args: &ModelArgs) -> Result<(ModelChoice, Arc<dyn Model>), CliError> {
    match choose_model(args)? {
        ModelChoice::Spec { spec, .. } => {
            let resolved = resolve(&spec).map_err(|err| CliError::usage(err.to_string()))?;
            let endpoint = resolved.endpoint();
            let model = resolved
                .into_model(&spec)
                .map_err(|err| CliError::usage(err.to_string()))?;
            let endpoint = StoredEndpoint {
                provider: endpoint.provider,
                base_url: endpoint.base_url,
            };
            Ok((
                ModelChoice::Spec {
                    spec,
                    endpoint: Some(endpoint),
                },
                model,
            ))
        }
        choice => {
            let model = make_model(&choice, false)?;
            Ok((choice, model))
        }
    }
}

/// The model that continues run `run_id`: `given` (`--model` on resume,
/// approve or decline: resolved from the environment now) or else the
/// run's own, sending to the endpoint it started with. When the
/// environment now names another endpoint for the same spec, says so on
/// stderr and keeps the stored one.
pub fn resume_model(run_id: &str, origin: &RunOrigin, given: Option<&str>) -> Result<Arc<dyn Model>, CliError> {
    if let Some(spec) = given {
        let args = ModelArgs {
            model: Some(spec.to_owned()),
            script: None,
        };
        return start_model(&args).map(|(_, model)| model);
    }
    let (spec, stored) = match &origin.model {
        ModelChoice::Spec {
            spec,
            endpoint: Some(stored),
        } => (spec, stored),
        other => return make_model(other, true),
    };
    let resolved = resolve(spec).map_err(|err| CliError::failure(err.to_string()))?;
    let now = resolved.endpoint();
    if now.base_url != stored.base_url {
        errln!(
            "askloop: run {run_id} was started against {} at {}; the environment now sends {spec} to {}. \
             Continuing at {}, where the run has been; pass --model {spec} to send it to {} instead.",
            stored.provider,
            stored.base_url,
            now.base_url,
            stored.base_url,
            now.base_url
        );
    }
    resolved
        .with_base_url(stored.base_url.clone())
        .into_model(spec)
        .map_err(|err| CliError::failure(err.to_string()))
}

fn resolve(spec: &str) -> Result<askloop_providers::ResolvedSpec, askloop::ModelError> {
    askloop_providers::resolve_spec(spec, |name| std::env::var(name).ok(), HttpConfig::default())
}

/// Makes the model for a choice, as `askloop.toml` makes an agent's
/// ([`ModelSource::make`]). `stored` says whether the choice comes from a
/// stored run (a spec or script that no longer makes a model is then a
/// failure, not bad usage).
pub fn make_model(choice: &ModelChoice, stored: bool) -> Result<Arc<dyn Model>, CliError> {
    let source = match choice {
        ModelChoice::Demo => ModelSource::Default,
        ModelChoice::Script { path } => ModelSource::Script(path.clone()),
        ModelChoice::Spec { spec, .. } => ModelSource::Spec(spec.clone()),
    };
    source
        .make(&|| Ok(Arc::new(demo::model())))
        .map_err(|err| match (stored, err.key) {
            (false, _) => CliError::usage(err.problem),
            (true, "script") => CliError::failure(format!(
                "the run was started with a script that can no longer be read: {}",
                err.problem
            )),
            (true, _) => CliError::failure(err.problem),
        })
}

/// The agent for an origin, driven by `model` (from [`start_model`] or
/// [`resume_model`]): the default agent of a configuration without a file,
/// with the origin's instructions and `write_file` writing in the run's
/// folder, assembled as `askloop serve` assembles its agents.
pub fn agent(origin: &RunOrigin, model: Arc<dyn Model>, store: Arc<dyn RunStore>) -> Result<Agent, CliError> {
    let mut config = ServerConfig::default_agent();
    for agent in &mut config.agents {
        agent.id.clone_from(&origin.agent_id);
        agent.instructions.clone_from(&origin.instructions);
        agent.tools.push(ToolKind::WriteFile);
        agent.write_dir = origin.root();
    }
    config
        .build_agents(&store, &|| Ok(Arc::clone(&model)))
        .map_err(|err| CliError::failure(err.to_string()))?
        .pop()
        .ok_or_else(|| CliError::failure("the default configuration has no agent"))
}

/// Where runs are stored when `--db` is not given.
pub fn default_db() -> Result<String, CliError> {
    let base = match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or_else(|| {
                CliError::usage("cannot find a place for the database: set --db, ASKLOOP_DB, XDG_DATA_HOME or HOME")
            })?;
            Path::new(&home).join(".local").join("share")
        }
    };
    Ok(base.join("askloop").join("askloop.db").display().to_string())
}

/// Opens the store named by `--db` (or the default) for `access`: only
/// `chat` and `run` may create a database; the commands that read or resume
/// runs say that none exists at a mistyped path instead of making an empty
/// one there.
pub async fn open_store(db: Option<&str>, access: Access) -> Result<Arc<dyn RunStore>, CliError> {
    let location = match db {
        Some(location) => location.to_owned(),
        None => default_db()?,
    };
    askloop_store::open_with(&location, access)
        .await
        .map_err(|err| match err {
            StoreError::InvalidLocation(message) => CliError::usage(message),
            StoreError::Unusable {
                fault: DatabaseFault::Missing,
                ..
            } => CliError::failure(format!(
                "{err}; check --db (or ASKLOOP_DB): only `askloop run` and `askloop chat` create a database"
            )),
            err @ StoreError::Unusable { .. } => CliError::failure(err.to_string()),
            other => CliError::failure(format!("cannot open the database: {other}")),
        })
}

/// A `--db` value as it works from any folder: a SQLite path made
/// absolute (keeping a `sqlite:` prefix out), a URL as given.
pub fn absolute_location(db: &str) -> String {
    let trimmed = db.trim();
    if trimmed.contains("://") && !trimmed.starts_with("sqlite:") {
        return db.to_owned();
    }
    let path = trimmed
        .strip_prefix("sqlite:")
        .map_or(trimmed, |rest| rest.strip_prefix("//").unwrap_or(rest));
    match std::path::absolute(path) {
        Ok(path) => path.display().to_string(),
        Err(_) => db.to_owned(),
    }
}

/// Loads a run, or says there is no such run. A RUN_ID outside the rule
/// for run ids (see [`IdKind`]) is bad usage, refused before the store is
/// asked.
pub async fn load_run(store: &Arc<dyn RunStore>, run_id: &str) -> Result<RunRecord, CliError> {
    IdKind::Run.check(run_id)?;
    store
        .get(run_id)
        .await?
        .ok_or_else(|| CliError::failure(format!("no run with id {run_id}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::{FAILURE, USAGE};

    #[test]
    fn a_script_that_cannot_be_read_is_bad_usage_when_given_and_a_failure_when_a_stored_run_names_it() {
        let path = std::env::temp_dir().join(format!("askloop-no-such-script-{}.json", std::process::id()));
        let choice = ModelChoice::Script { path: path.clone() };

        let Err(given) = make_model(&choice, false) else {
            panic!("a missing script makes no model")
        };
        assert_eq!(given.status, USAGE);
        assert!(given.message.contains(&path.display().to_string()), "{}", given.message);

        let Err(stored) = make_model(&choice, true) else {
            panic!("a missing script makes no model")
        };
        assert_eq!(stored.status, FAILURE);
        assert!(
            stored
                .message
                .starts_with("the run was started with a script that can no longer be read: "),
            "{}",
            stored.message
        );
    }

    #[test]
    fn the_demo_choice_makes_the_offline_demo_model() {
        let model = make_model(&ModelChoice::Demo, true).expect("the demo needs nothing from outside");
        assert_eq!(model.name(), demo::model().name());
    }
}
