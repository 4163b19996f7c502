//! A JavaScript or TypeScript block, run under Node by
//! `tests/docs/run-block.mjs` with the packages pinned in `tests/interop`
//! and `tests/aisdk`.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::markdown::Block;
use super::site::{Site, workspace};
use crate::common::node::node_missing;

fn tests_dir() -> PathBuf {
    workspace().join("tests")
}

/// Why the script blocks cannot run here, if they cannot: no `node`, or a
/// pinned project without its `npm ci`.
pub fn missing() -> Option<String> {
    let project = |name: &str| tests_dir().join(name);
    node_missing(&project("interop"), "@mastra/client-js").or_else(|| node_missing(&project("aisdk"), "esbuild"))
}

/// Why the component blocks cannot run here, if they cannot: what the
/// script blocks need, and chromium with tests/web's playwright-core.
pub fn missing_browser() -> Option<String> {
    missing().or_else(|| crate::common::missing_browser(&tests_dir().join("web")))
}

/// Runs `text` (`block`'s text, filled in) at `site`; a component with the
/// driver `page`.
pub fn run(block: &Block, text: &str, page: Option<&str>, site: &Site, index: usize) -> Result<(), String> {
    let folder = site.dir.path().join("node");
    std::fs::create_dir_all(&folder).unwrap();
    let extension = match block.info.split([',', ' ']).next().unwrap_or_default() {
        "ts" | "typescript" => "ts",
        "tsx" => "tsx",
        "jsx" => "jsx",
        _ => "mjs",
    };
    let file = folder.join(format!("block-{index}.{extension}"));
    std::fs::write(&file, text).unwrap();
    let mut cmd = Command::new("node");
    cmd.arg(tests_dir().join("docs/run-block.mjs")).arg(&file);
    if let Some(page) = page {
        cmd.arg(page);
    }
    if let Some(port) = site.page_port {
        cmd.env("DOCS_PAGE_PORT", port.to_string());
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    site.environment(&mut cmd);
    let output = site.wait(cmd, "", &block.to_string())?;
    if output.status.success() {
        return Ok(());
    }
    let tail = |bytes: &[u8]| -> String {
        let text = String::from_utf8_lossy(bytes);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..]
            .iter()
            .map(|l| format!("    | {l}\n"))
            .collect()
    };
    Err(format!(
        "{block} failed under Node (its line N is {}:{}+N):\n  its stdout (the end):\n{}  its stderr (the end):\n{}",
        block.file,
        block.line,
        tail(&output.stdout),
        tail(&output.stderr)
    ))
}
