//! Inputs the fuzz targets once failed on, kept as tests: each names what
//! was wrong and asserts it stays fixed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use askloop::{AskUser, Tool};
use serde_json::json;

/// Found by `answer_check (generated)`: with free-text answers allowed, a
/// single-select question accepted `""`, which its own answer schema
/// (`minLength: 1`) refuses; an empty answer reached the model.
#[test]
fn an_empty_answer_to_a_choice_question_is_refused_even_with_free_text_allowed() {
    let payload = json!({"question": "Which?", "options": [{"label": "a"}]});
    let tool = AskUser::new().allow_free_text_answers(true);
    for answer in [json!(""), json!("  \n")] {
        let refusal = tool.check_resume_data(&answer, &payload).unwrap_err();
        assert!(refusal.reason.contains("empty"), "{}", refusal.reason);
        assert_eq!(refusal.accepted, Some(vec!["a".to_owned()]));
    }
    assert!(tool.check_resume_data(&json!("b"), &payload).is_ok());
    askloop_fuzz::answer_check_case(&payload, &json!(""), true);
}
