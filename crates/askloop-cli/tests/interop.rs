//! `askloop serve` driven by the published `@mastra/client-js` (1.47.0): a
//! real server process on a free port, two scripted agents from an
//! `askloop.toml`, and the Node tests of `tests/interop/` run against it.
//!
//! The Node project needs `npm ci` in `tests/interop` first (`.ci/run` does
//! it). Without `node` or its `node_modules`, this test fails under
//! `CI=true` and is skipped, with the reason printed, elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::node::{agents_dir, node_missing, node_project, run_node_tests, serve_agents, tap_passed};
use common::skipped_for_lack_of;

/// The server's API token, which the client sends as Mastra's users send one.
const TOKEN: &str = "interop-token";

#[test]
fn the_published_mastra_client_streams_resumes_lists_approves_and_declines_through_askloop_serve() {
    let interop = node_project("interop");
    let missing = node_missing(&interop, "@mastra/client-js");
    if skipped_for_lack_of("the @mastra/client-js interop test", missing) {
        return;
    }
    let dir = agents_dir();
    let write_dir = dir.path().join("out");
    let server = serve_agents(dir.path(), TOKEN, &[], &[]);
    let report = run_node_tests(
        &interop,
        "client.test.mjs",
        &[
            ("ASKLOOP_URL", server.base.as_ref()),
            ("ASKLOOP_WRITE_DIR", write_dir.as_os_str()),
            ("ASKLOOP_API_TOKEN", TOKEN.as_ref()),
        ],
    );
    // Not vacuous: every test ran and passed (9 tests, one with three subtests).
    assert!(tap_passed(&report) >= 12, "{report}");
}
