//! The bench's `peak_rss_mb` is its own memory, not its parent's: Linux
//! carries `ru_maxrss` over `execve` from the forking process, which made
//! `cargo run -p askloop-bench` report cargo's ~100 MB. (A test file of its
//! own: the big parent below must not be the parent of other tests' runs.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_askloop-bench");

#[test]
fn a_big_parent_does_not_count_in_the_benchs_peak_memory() {
    // 300 MB touched page by page, so that it is resident when the bench is
    // spawned.
    let mut ballast = vec![0u8; 300 * 1024 * 1024];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    let output = Command::new(BENCH).args(["roundtrip", "2"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let peak = report["peak_rss_mb"].as_f64().unwrap();
    assert!(peak > 1.0, "{report}");
    assert!(peak < 200.0, "the parent's 300 MB counted as the bench's: {report}");
    // Kept alive (and its pages resident) until the bench has run.
    drop(std::hint::black_box(ballast));
}
