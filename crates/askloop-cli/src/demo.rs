//! The built-in offline demo: a scripted model (not a real one) that asks all
//! three kinds of question, so `askloop chat` works with no key and no
//! network.

use askloop::ScriptedModel;

/// The demo's name, shown as its model name.
pub const NAME: &str = "offline-demo";

const SCRIPT: &str = r#"{"turns": [
  {"text": "Hi! I'm the offline demo (a scripted model, not a real one). Let's plan a small project. ",
   "toolCalls": [{"name": "ask_user", "args": {"question": "What should the project be called?"}}]},
  {"text": "Good name. ",
   "toolCalls": [{"name": "ask_user", "args": {
     "question": "Which language should it use?",
     "options": [
       {"label": "Rust", "description": "fast and safe; askloop is written in it"},
       {"label": "TypeScript", "description": "runs in the browser and on Node"},
       {"label": "Python", "description": "quick to write, huge ecosystem"}
     ]}}]},
  {"toolCalls": [{"name": "ask_user", "args": {
     "question": "Which extras do you want?",
     "options": [
       {"label": "CI", "description": "tests on every push"},
       {"label": "Docker", "description": "a container image"},
       {"label": "Docs", "description": "a documentation site"}
     ],
     "selectionMode": "multi_select"}}]},
  {"text": "Thanks! Extras noted ({{toolResults}}). The plan is ready: that is the end of the demo. Try a real model with --model openai/gpt-4o-mini (needs OPENAI_API_KEY) or --model ollama/qwen2.5."}
]}"#;

/// The demo model.
pub fn model() -> ScriptedModel {
    match ScriptedModel::from_json(NAME, SCRIPT) {
        Ok(model) => model,
        // The script is a constant checked by the tests below.
        Err(err) => unreachable!("the built-in demo script is invalid: {err}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_script_parses_and_asks_three_kinds_of_question() {
        let model = model();
        let turns = &model.script().turns;
        assert_eq!(turns.len(), 4);
        let modes: Vec<Option<&str>> = turns[..3]
            .iter()
            .map(|t| t.tool_calls[0].args.get("selectionMode").and_then(|m| m.as_str()))
            .collect();
        assert_eq!(modes, [None, None, Some("multi_select")]);
        assert!(turns[1].tool_calls[0].args.get("options").is_some());
        assert!(turns[0].tool_calls[0].args.get("options").is_none());
    }
}
