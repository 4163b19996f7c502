//! What the model and the person send a run (the `ask_user` arguments, the
//! answers), and the files a user writes (scripts, `askloop.toml`).

use std::sync::Arc;

use askloop::ask_user::is_blank;
use askloop::scripted::{ScriptToolCall, ScriptTurn};
use askloop::{
    Agent, AskUser, MemoryStore, Model, Question, RunStatus, RunStore, Script, ScriptedModel, SelectionMode, Tool,
};
use askloop_config::ServerConfig;
use serde_json::Value;

/// `ask_user` arguments as a model sends them (JSON text). Through a real
/// run (scripted model, memory store): the run either waits on one
/// question that reads back with distinct, non-blank labels and an answer
/// schema, or tells the model what was wrong and completes. Never a failed
/// run, never a panic.
pub fn ask_user_input(data: &[u8]) {
    // Text that is not JSON never reaches the tool: the driver answers it
    // with a parse error (a unit test of the driver covers that).
    let Ok(args) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let script = Script {
        turns: vec![
            ScriptTurn {
                tool_calls: vec![ScriptToolCall {
                    name: askloop::ASK_USER_TOOL_ID.to_owned(),
                    args,
                    id: Some("call_1".to_owned()),
                }],
                ..ScriptTurn::default()
            },
            ScriptTurn {
                text: Some("told: {{toolResults}}".to_owned()),
                ..ScriptTurn::default()
            },
        ],
    };
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("fuzz")
        .model(Arc::new(ScriptedModel::new("fuzz", script)))
        .tool(AskUser::new())
        .store(store)
        .build()
        .expect("the agent builds");
    let output = crate::block_on(async {
        let stream = agent.stream("ask").await.expect("a new run starts");
        stream.output().await
    });
    match output.status {
        RunStatus::Suspended => {
            assert_eq!(output.pending.len(), 1, "one call, one question");
            let payload = output.pending[0]
                .suspend_payload
                .as_ref()
                .expect("a question is stored");
            let question = Question::from_payload(payload).expect("the stored question reads back");
            assert!(!question.text.is_empty());
            for (i, option) in question.options.iter().enumerate() {
                assert!(!is_blank(&option.label), "a blank label was offered");
                assert!(
                    question.options[..i].iter().all(|o| o.label != option.label),
                    "a label offered twice"
                );
            }
            assert!(
                output.pending[0].resume_schema.is_some(),
                "a question without an answer schema"
            );
        }
        RunStatus::Completed => {
            assert!(
                output.text.starts_with("told: "),
                "the model was not told: {:?}",
                output.text
            );
            assert!(
                output.text.len() > "told: ".len() + 10,
                "the model was told nothing useful"
            );
        }
        other => panic!("a run ended {other:?} on ask_user arguments: {:?}", output.error()),
    }
}

/// An `ask_user` question and an answer, as JSON `[payload, answer,
/// allowFreeText]`.
pub fn answer_check(data: &[u8]) {
    let Ok(Value::Array(items)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let [payload, answer, free] = items.as_slice() else {
        return;
    };
    answer_check_case(payload, answer, free.as_bool().unwrap_or(false));
}

/// The answer check agrees with the answer schema it publishes (an answer
/// it accepts validates against the schema), accepts a choice answer
/// without free text exactly when it is made of the labels, and every
/// refusal has a reason (and lists the labels of a choice question).
pub fn answer_check_case(payload: &Value, answer: &Value, allow_free_text: bool) {
    let tool = AskUser::new().allow_free_text_answers(allow_free_text);
    let checked = tool.check_resume_data(answer, payload);
    let Some(question) = Question::from_payload(payload) else {
        let refusal = checked.expect_err("an answer to an unreadable question was accepted");
        assert!(!refusal.reason.is_empty());
        return;
    };
    let schema = question.answer_schema(allow_free_text);
    let schema_accepts = askloop::tool::check_against_schema(&schema, answer).is_ok();
    match &checked {
        Ok(()) => assert!(schema_accepts, "accepted {answer} against its own schema {schema}"),
        Err(refusal) => {
            assert!(refusal.reason.trim().len() > 5, "a refusal without a reason");
            if !question.options.is_empty() {
                assert_eq!(
                    refusal.accepted.as_ref(),
                    Some(&question.labels()),
                    "a refusal without the labels"
                );
            }
        }
    }
    if !allow_free_text {
        let labels = question.labels();
        let is_label = |v: &Value| v.as_str().is_some_and(|s| labels.iter().any(|l| l == s));
        let expected = match (question.mode, answer) {
            // A blank answer is refused even if a (never offered: ask_user
            // refuses blank labels) stored label is blank.
            (Some(SelectionMode::SingleSelect), answer) => {
                is_label(answer) && answer.as_str().is_some_and(|s| !is_blank(s))
            }
            (Some(SelectionMode::MultiSelect), Value::Array(items)) => {
                let distinct = items.iter().enumerate().all(|(i, v)| !items[..i].contains(v));
                !items.is_empty()
                    && distinct
                    && items
                        .iter()
                        .all(|v| is_label(v) && v.as_str().is_some_and(|s| !is_blank(s)))
            }
            (Some(SelectionMode::MultiSelect), _) => false,
            (None, Value::String(text)) => !is_blank(text),
            (None, _) => false,
        };
        assert_eq!(
            checked.is_ok(),
            expected,
            "answer {answer} to {payload}: check says {checked:?}"
        );
    }
}

/// A scripted-model file. A script that loads plays to its end in a real
/// run: the run ends waiting, completed or failed with a stored reason;
/// never a panic, never left running.
pub fn script_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let model = match ScriptedModel::from_json("fuzz", text) {
        Ok(model) => model,
        Err(err) => {
            assert!(err.to_string().len() > 10, "a script error that says nothing: {err}");
            return;
        }
    };
    let model: Arc<dyn Model> = Arc::new(model);
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("fuzz")
        .model(model)
        .tool(AskUser::new())
        .store(store)
        .max_steps(4)
        .build()
        .expect("the agent builds");
    let output = crate::block_on(async {
        let stream = agent.stream("go").await.expect("a new run starts");
        stream.output().await
    });
    match output.status {
        RunStatus::Suspended => assert!(!output.pending.is_empty(), "suspended on nothing"),
        RunStatus::Completed => {}
        RunStatus::Failed => assert!(output.failure.is_some(), "failed without a reason"),
        other => panic!("a scripted run ended {other:?}"),
    }
}

/// An `askloop.toml`. Checked text either loads into agents (scripted
/// models stand in for the default one) or is refused with the key and
/// the problem.
pub fn config_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = std::env::temp_dir().join("askloop-fuzz").join("askloop.toml");
    let config = match ServerConfig::from_toml(&path, text) {
        Ok(config) => config,
        Err(err) => {
            assert!(err.problem.trim().len() > 5, "a config error that says nothing: {err}");
            return;
        }
    };
    let store: Arc<dyn RunStore> = Arc::new(MemoryStore::new());
    let default_model = || -> Result<Arc<dyn Model>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Arc::new(ScriptedModel::new("fuzz", Script { turns: Vec::new() })))
    };
    match config.build_agents(&store, &default_model) {
        Ok(agents) => assert_eq!(agents.len(), config.agents.len()),
        Err(err) => assert!(err.problem.trim().len() > 5, "a config error that says nothing: {err}"),
    }
}
