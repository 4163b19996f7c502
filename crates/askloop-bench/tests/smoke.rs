//! Every mode of the real `askloop-bench` binary, at tiny sizes: one JSON
//! line with the mode's keys, and every run correct. No timing assertions:
//! timing belongs in the benchmark, not in tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

const BENCH: &str = env!("CARGO_BIN_EXE_askloop-bench");

fn bench(args: &[&str]) -> Value {
    let output = Command::new(BENCH).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?} failed: {stderr}\n{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} should print one line: {stdout}");
    let report: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(report["impl"], "askloop", "{report}");
    report
}

fn assert_keys(report: &Value, keys: &[&str]) {
    let object = report.as_object().unwrap();
    let mut present: Vec<&str> = object.keys().map(String::as_str).collect();
    present.sort_unstable();
    let mut expected: Vec<&str> = keys.to_vec();
    expected.sort_unstable();
    assert_eq!(present, expected, "{report}");
}

#[test]
fn roundtrip_reports_its_timings_cpu_and_memory() {
    let report = bench(&["roundtrip", "2"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "n",
            "total_s",
            "roundtrips_per_s",
            "p50_suspend_ms",
            "p99_suspend_ms",
            "p50_resume_ms",
            "p99_resume_ms",
            "cpu_ms_per_roundtrip",
            "model_cpu_ms_per_roundtrip",
            "askloop_cpu_ms_per_roundtrip",
            "peak_rss_mb",
        ],
    );
    assert_eq!(report["mode"], "roundtrip");
    assert_eq!(report["n"], 2);
    assert!(report["peak_rss_mb"].as_f64().unwrap() > 0.0);
    // The fake model runs on a thread of the bench's own: its CPU is counted
    // apart, and the process's is askloop's plus the model's.
    let process = report["cpu_ms_per_roundtrip"].as_f64().unwrap();
    let model = report["model_cpu_ms_per_roundtrip"].as_f64().unwrap();
    let askloop = report["askloop_cpu_ms_per_roundtrip"].as_f64().unwrap();
    assert!(model > 0.0 && askloop > 0.0, "{report}");
    assert!((process - (model + askloop)).abs() < 0.01, "{report}");
}

#[test]
fn concurrent_runs_all_complete() {
    let report = bench(&["concurrent", "5"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "k",
            "all_suspended_s",
            "all_resumed_s",
            "runs_per_s",
            "peak_rss_mb",
            "ok",
        ],
    );
    assert_eq!(report["k"], 5);
    assert_eq!(report["ok"], 5);
}

#[test]
fn restart_resumes_in_a_fresh_process() {
    let report = bench(&["restart"]);
    assert_keys(&report, &["impl", "mode", "ok", "cold_suspend_ms", "cold_resume_ms"]);
    assert_eq!(report["mode"], "restart");
    assert_eq!(report["ok"], 1);
}

#[test]
fn long_answers_every_question_warm_and_cold_and_reports_resumes_at_its_points() {
    // 24 turns: past the 16 decisions a run's row holds, so the later ones
    // are rows of their own, read back warm (kept by the store) and cold.
    let report = bench(&["long", "24"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "t",
            "resume_ms_at",
            "cold_resume_ms_at",
            "total_s",
            "db_bytes",
            "peak_rss_mb",
            "ok",
        ],
    );
    assert_eq!(report["t"], 24);
    assert_eq!(report["ok"], 1);
    let points: Vec<&String> = report["resume_ms_at"].as_object().unwrap().keys().collect();
    assert_eq!(points, ["1", "10", "24"]);
    let cold: Vec<&String> = report["cold_resume_ms_at"].as_object().unwrap().keys().collect();
    assert_eq!(cold, ["1", "10", "24"]);
    assert!(report["db_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn long_with_detail_splits_each_resume_into_store_model_and_the_rest_warm_and_cold() {
    let output = Command::new(BENCH).args(["--detail", "long", "12"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let details: Vec<Value> = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line.get("detail").is_some())
        .collect();
    let names: Vec<&str> = details.iter().map(|d| d["detail"].as_str().unwrap()).collect();
    assert_eq!(names, ["long", "long cold"]);
    for detail in &details {
        assert_keys(
            detail,
            &[
                "detail",
                "resume_ms_at",
                "store_row_ms_at",
                "store_row_read_ms_at",
                "store_messages_ms_at",
                "model_ms_at",
                "rest_ms_at",
                "step_finish_json_ms_at",
                "step_finish_kb_at",
            ],
        );
        let (row, read) = (
            detail["store_row_ms_at"]["12"].as_f64().unwrap(),
            detail["store_row_read_ms_at"]["12"].as_f64().unwrap(),
        );
        assert!(
            read > 0.0 && read < row,
            "reading the row is a part of the row's time: {detail}"
        );
        let model = detail["model_ms_at"]["12"].as_f64().unwrap();
        assert!(model > 0.0, "every resume calls the model: {detail}");
        let kb = &detail["step_finish_kb_at"];
        assert!(
            kb["12"].as_f64().unwrap() > kb["1"].as_f64().unwrap(),
            "the step-finish carries the conversation, which grew: {detail}"
        );
    }
    assert_eq!(
        details[0]["store_messages_ms_at"]["12"], 0.0,
        "a warm resume reads no conversation back"
    );
    assert!(
        details[1]["store_messages_ms_at"]["12"].as_f64().unwrap() > 0.0,
        "a cold resume reads it: {}",
        details[1]
    );
}

#[test]
fn scale_times_round_trips_before_and_after_runs_wait_and_the_reads_between() {
    let bin = askloop_bin();
    let report = bench(&["--server-bin", &bin, "scale", "60"]);
    assert_eq!(
        (report["mode"].as_str(), report["store"].as_str()),
        (Some("scale"), Some("sqlite"))
    );
    assert_eq!(report["m"], 60);
    assert_eq!(
        report["ok"], 600,
        "200 round trips with no run waiting, then 200 with 60 alternating with 200 on the empty twin"
    );
    for figure in ["empty", "empty_before", "waiting"] {
        assert!(
            report[figure]["suspend"]["p50_ms"].as_f64().unwrap() > 0.0,
            "{figure}: {report}"
        );
        assert!(
            report[figure]["answer"]["p50_ms"].as_f64().unwrap() > 0.0,
            "{figure}: {report}"
        );
    }
    for figure in [
        "inbox_first_page",
        "inbox_count",
        "thread_messages",
        "run_messages",
        "expiry_sweep",
        "stalled_sweep",
        "outbox_claim",
        "questions_waiting",
    ] {
        let p99 = report[figure]["p99_ms"].as_f64().unwrap();
        assert!(
            p99 > 0.0 && p99 >= report[figure]["p50_ms"].as_f64().unwrap(),
            "{figure}: {report}"
        );
    }
    assert!(report["suspend_ratio_p50"].as_f64().unwrap() > 0.0, "{report}");
    // Two served instances on each store: round trips across them, the
    // Inbox's page from each (checked by the bench against the 60 waiting),
    // their CPU and each one's memory.
    for pair in ["waiting", "empty"] {
        let served = &report["served"][pair];
        for latency in [
            &served["round_trips"]["suspend"],
            &served["round_trips"]["answer"],
            &served["inbox_first_page"],
        ] {
            assert!(latency["p50_ms"].as_f64().unwrap() > 0.0, "{pair}: {report}");
        }
        assert!(
            served["cpu_ms_per_roundtrip"].as_f64().unwrap() > 0.0,
            "{pair}: {report}"
        );
        for server in 0..2 {
            let rss = served["rss_mb"][server].as_f64().unwrap();
            assert!(
                rss > 0.0 && served["peak_rss_mb"][server].as_f64().unwrap() >= rss,
                "{pair}: {report}"
            );
        }
    }
}

#[test]
fn waiting_runs_all_complete() {
    let report = bench(&["waiting", "20"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "m",
            "all_suspended_s",
            "all_resumed_s",
            "peak_rss_mb_suspended",
            "peak_rss_mb_end",
            "ok",
        ],
    );
    assert_eq!(report["m"], 20);
    assert_eq!(report["ok"], 20);
}

/// A thread needs a store that keeps threads: PostgreSQL when
/// `ASKLOOP_TEST_DATABASE_URL` names one (the bench's thread is its own and
/// is deleted at the end), else the default fresh SQLite file.
#[test]
fn thread_runs_start_from_the_threads_last_messages_here_and_in_fresh_processes() {
    let db = std::env::var("ASKLOOP_TEST_DATABASE_URL").ok();
    let mut args: Vec<&str> = Vec::new();
    if let Some(db) = &db {
        args.extend(["--db", db]);
    }
    // More messages than a run reads (10), so the context is a window.
    args.extend(["thread", "12"]);
    let report = bench(&args);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "m",
            "suspend_ms",
            "suspend_cpu_ms",
            "resume_ms",
            "resume_cpu_ms",
            "cold_suspend_ms",
            "cold_resume_ms",
            "grow_s",
            "db_bytes",
            "peak_rss_mb",
            "ok",
        ],
    );
    assert_eq!(report["mode"], "thread");
    assert_eq!(report["m"], 12);
    // 5 round trips in the bench's process and 3 across fresh ones.
    assert_eq!(report["ok"], 8);
    assert!(report["cold_resume_ms"].as_f64().unwrap() > 0.0, "{report}");
}

/// The `askloop` binary of this build, next to the bench's: built here (a
/// no-op when `cargo test --workspace` already built it), since a test of
/// this crate does not otherwise build another crate's binary.
fn askloop_bin() -> String {
    let bench = std::path::Path::new(BENCH);
    let profile_dir = bench.parent().unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let mut build = Command::new(env!("CARGO"));
    build.args([
        "build",
        "--locked",
        "-p",
        "askloop-cli",
        "--bin",
        "askloop",
        "--target-dir",
    ]);
    build.arg(target_dir);
    if profile_dir.file_name().unwrap() == "release" {
        build.arg("--release");
    }
    let output = build.output().unwrap();
    assert!(
        output.status.success(),
        "cannot build askloop: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bin = profile_dir.join(format!("askloop{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "no askloop binary at {}", bin.display());
    bin.to_str().unwrap().to_owned()
}

#[test]
fn http_round_trips_go_through_a_served_askloop_and_report_its_cpu_and_memory() {
    let bin = askloop_bin();
    let report = bench(&["--server-bin", &bin, "http", "2"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "n",
            "total_s",
            "roundtrips_per_s",
            "p50_suspend_ms",
            "p99_suspend_ms",
            "p50_resume_ms",
            "p99_resume_ms",
            "server_cpu_ms_per_roundtrip",
            "server_peak_rss_mb",
        ],
    );
    assert_eq!(report["mode"], "http");
    assert_eq!(report["n"], 2);
    assert!(report["server_peak_rss_mb"].as_f64().unwrap() > 0.0, "{report}");
}

#[test]
fn the_large_piece_workload_runs_in_process_and_served_and_its_line_says_so() {
    let report = bench(&["--pieces", "1", "roundtrip", "2"]);
    assert_eq!(report["mode"], "roundtrip");
    assert_eq!(report["pieces"], "1,1", "{report}");
    let bin = askloop_bin();
    let report = bench(&["--server-bin", &bin, "--pieces=60,7", "http", "2"]);
    assert_eq!(report["mode"], "http");
    assert_eq!(report["pieces"], "60,7", "{report}");
    // The default workload's lines stay as they were.
    assert!(bench(&["roundtrip", "1"]).get("pieces").is_none());
}

#[test]
fn http_concurrent_runs_all_suspend_then_all_finish_through_a_served_askloop() {
    let bin = askloop_bin();
    let report = bench(&["--server-bin", &bin, "http-concurrent", "5"]);
    assert_keys(
        &report,
        &[
            "impl",
            "mode",
            "k",
            "all_suspended_s",
            "all_resumed_s",
            "total_s",
            "server_rss_mb_suspended",
            "server_rss_mb_settled",
            "server_peak_rss_mb_suspended",
            "server_peak_rss_mb",
            "server_cpu_ms_per_run",
            "ok",
        ],
    );
    assert_eq!(report["k"], 5);
    assert_eq!(report["ok"], 5);
    assert!(report["server_rss_mb_suspended"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["server_rss_mb_settled"].as_f64().unwrap() > 0.0, "{report}");
}

#[test]
fn bad_input_is_one_line_on_stderr_and_a_failure() {
    let unused_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = format!("http://127.0.0.1:{unused_port}/v1");
    for args in [
        vec!["fly", "3"],
        vec!["roundtrip", "many"],
        vec!["roundtrip", "0"],
        vec!["waiting"],
        vec!["--base-url", unreachable.as_str(), "roundtrip", "2"],
        vec!["--server-bin", "/nonexistent/askloop", "http", "2"],
    ] {
        let output = Command::new(BENCH).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} should fail");
        assert!(output.stdout.is_empty(), "{args:?} printed a report");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("askloop-bench: "), "{args:?}: {stderr}");
    }
}

/// `compare` needs Mastra installed in `bench/mastra` (`npm ci` there,
/// which `.ci/run` does): without it the test says why and passes, except
/// in CI (`CI=true`), where a missing install is a failure.
fn mastra_missing() -> bool {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/mastra/node_modules/@mastra/core");
    if dir.is_dir() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is missing: `npm ci` in bench/mastra",
        dir.display()
    );
    eprintln!(
        "compare: skipped: {} is missing (npm ci in bench/mastra)",
        dir.display()
    );
    true
}

#[test]
fn compare_runs_the_round_trip_in_askloop_and_mastra_in_process_and_over_http() {
    if mastra_missing() {
        return;
    }
    let bin = askloop_bin();
    let output = Command::new(BENCH)
        .args(["--server-bin", &bin, "compare", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "compare failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_keys(
        &report,
        &["impl", "mode", "n", "load_before", "load_after", "roundtrip", "http"],
    );
    assert_eq!(report["impl"], "askloop-vs-mastra");
    for surface in ["roundtrip", "http"] {
        let side = &report[surface];
        assert_keys(
            side,
            &[
                "askloop_cpu_ms",
                "mastra_cpu_ms",
                "mastra_over_askloop",
                "askloop_peak_rss_mb",
                "mastra_peak_rss_mb",
                "askloop_p50_resume_ms",
                "mastra_p50_resume_ms",
            ],
        );
        // Both sides ran (and were checked by the bench: a wrong round trip fails it).
        assert!(side["askloop_cpu_ms"].as_f64().unwrap() > 0.0, "{report}");
        assert!(side["mastra_cpu_ms"].as_f64().unwrap() > 0.0, "{report}");
        assert!(side["mastra_peak_rss_mb"].as_f64().unwrap() > 0.0, "{report}");
    }
}

#[test]
fn compare_without_mastra_installed_says_where_to_install_it() {
    let empty = tempfile::tempdir().unwrap();
    let output = Command::new(BENCH)
        .args(["--mastra", empty.path().to_str().unwrap(), "compare", "1"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no Mastra installed in") && stderr.contains("npm ci"),
        "{stderr}"
    );
}
