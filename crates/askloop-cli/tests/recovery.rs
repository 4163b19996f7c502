//! `askloop runs recover`, `askloop retry` and `askloop cancel`, and how
//! `runs` shows a run whose process died.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// Makes the only run look as a run does whose process was killed while it
/// drove it: `running`, under a lease that ran out long ago.
fn strand(env: &Env, run_id: &str) {
    let conn = rusqlite::Connection::open(env.db()).unwrap();
    let changed = conn
        .execute(
            "UPDATE runs SET status = 'running', version = version + 1, lease_owner = 'killed', lease_until = 1 \
             WHERE run_id = ?",
            [run_id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[test]
fn a_run_whose_process_died_is_listed_as_stalled_and_recover_continues_it() {
    let env = Env::new();
    let out = env.run(&["run", "Plan my project"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    let question = env.show(&run_id)["pending"][0]["toolCallId"].clone();
    strand(&env, &run_id);

    let listed = stdout(&env.run(&["runs"]));
    assert!(listed.contains("stalled"), "{listed}");
    let shown = env.show(&run_id);
    assert_eq!(
        (shown["status"].as_str(), shown["stalled"].as_bool()),
        (Some("running"), Some(true))
    );

    let out = env.run(&["runs", "recover"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("Recovering run {run_id}")),
        "{}",
        stderr(&out)
    );
    let shown = env.show(&run_id);
    assert_eq!(shown["status"], "suspended");
    assert_eq!(shown["stalled"], false);
    assert_eq!(shown["pending"][0]["toolCallId"], question, "the same question waits");

    let out = env.run(&["runs", "recover"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("No stalled runs."), "{}", stderr(&out));
}

#[test]
fn retry_refuses_a_run_that_did_not_fail_and_cancel_ends_one() {
    let env = Env::new();
    assert_eq!(code(&env.run(&["run", "Plan my project"])), SUSPENDED);
    let run_id = env.only_run_id();

    let out = env.run(&["retry", &run_id]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("it is suspended, not failed"), "{}", stderr(&out));

    let out = env.run(&["cancel", &run_id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("Cancelled run {run_id}.")));
    assert_eq!(env.show(&run_id)["status"], "cancelled");

    let out = env.run(&["cancel", &run_id]);
    assert_eq!(code(&out), 1, "a finished run cannot be cancelled: {}", stderr(&out));
}
