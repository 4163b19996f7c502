//! The answer check (`Tool::check_resume_data`) and the `resumeSchema` sent
//! to clients (`Tool::resume_schema_for`) describe the same answers: a
//! client that validates with the schema is never refused by the check, and
//! never lets through an answer the check refuses.

use askloop::{AskUser, Tool};
use serde_json::{Value, json};

/// The questions, as `ask_user` suspends with them.
fn questions() -> Vec<(&'static str, Value)> {
    vec![
        ("free text", json!({"question": "Why?"})),
        (
            "single select",
            json!({"question": "Where?", "options": [{"label": "staging"}, {"label": "production"}],
                   "selectionMode": "single_select"}),
        ),
        (
            "multi select",
            json!({"question": "Which?", "options": [{"label": "a"}, {"label": "b"}, {"label": "c d"}],
                   "selectionMode": "multi_select"}),
        ),
    ]
}

/// Answers right and wrong for every kind of question.
fn answers() -> Vec<Value> {
    vec![
        json!("staging"),
        json!("production"),
        json!("a"),
        json!("c d"),
        json!("elsewhere"),
        json!(""),
        json!("   "),
        json!(" staging"),
        json!(["a"]),
        json!(["a", "b"]),
        json!(["a", "c d", "b"]),
        json!(["b", "b"]),
        json!([]),
        json!(["a", "z"]),
        json!(["z"]),
        json!([""]),
        json!(["  "]),
        json!(["a", 1]),
        json!([["a"]]),
        json!(["staging"]),
        json!(1),
        json!(true),
        json!(null),
        json!({"answer": "a"}),
    ]
}

fn assert_agreement(tool: &AskUser, label: &str) {
    let mut accepted = 0;
    let mut refused = 0;
    for (kind, payload) in questions() {
        let schema = tool.resume_schema_for(&payload).expect("ask_user sends a resumeSchema");
        let validator = jsonschema::validator_for(&schema).expect("the resumeSchema is a valid JSON Schema");
        for answer in answers() {
            let by_schema = validator.is_valid(&answer);
            let by_check = tool.check_resume_data(&answer, &payload).is_ok();
            assert_eq!(
                by_schema, by_check,
                "{label}, {kind} question: the resumeSchema says {by_schema} and the check says {by_check} \
                 for the answer {answer} (schema {schema})"
            );
            if by_check {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
    }
    // Both sides of the agreement are exercised, not only refusals.
    assert!(
        accepted >= 6 && refused >= 30,
        "{label}: {accepted} accepted, {refused} refused"
    );
}

#[test]
fn strict_answer_check_and_resume_schema_accept_and_refuse_the_same_answers() {
    assert_agreement(&AskUser::new(), "strict");
}

#[test]
fn free_text_answer_check_and_resume_schema_accept_and_refuse_the_same_answers() {
    assert_agreement(&AskUser::new().allow_free_text_answers(true), "allowFreeText");
}
