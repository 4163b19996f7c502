//! Tools an agent of the server (or of the `askloop` command) can be given
//! besides `ask_user`.
//!
//! `write_file` writes a text file under one directory, and every call
//! waits for a person's approval.

use std::path::{Component, Path, PathBuf};

use askloop::{FunctionTool, ToolError, ToolOutput};
use serde::Deserialize;

/// The id of [`write_file`].
pub const WRITE_FILE_TOOL_ID: &str = "write_file";

/// The input of `write_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteFile {
    /// A path relative to the directory the tool writes in, without `..`.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// `write_file`: writes a file under `root` (relative paths only, no
/// `..`), after approval.
pub fn write_file(root: impl Into<PathBuf>) -> FunctionTool {
    let root: PathBuf = root.into();
    FunctionTool::builder(WRITE_FILE_TOOL_ID)
        .description(
            "Write a text file in the user's working directory (path relative, no '..'). The user is asked to \
             approve every call before it runs.",
        )
        .input::<WriteFile>()
        .requires_approval(true)
        .execute(move |input: WriteFile, _ctx| {
            let root = root.clone();
            async move {
                let path = root.join(checked_path(&input.path).map_err(ToolError::new)?);
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|err| ToolError::new(format!("cannot create {}: {err}", parent.display())))?;
                }
                tokio::fs::write(&path, input.content.as_bytes())
                    .await
                    .map_err(|err| ToolError::new(format!("cannot write {}: {err}", path.display())))?;
                Ok(ToolOutput::text(format!("Wrote {} bytes to {}", input.content.len(), input.path)).into())
            }
        })
}

/// A relative path that stays inside the directory it is joined to.
fn checked_path(path: &str) -> Result<PathBuf, String> {
    let candidate = Path::new(path);
    if path.trim().is_empty() {
        return Err("the path is empty".into());
    }
    if candidate.is_absolute() {
        return Err(format!(
            "{path} is absolute; give a path relative to the working directory"
        ));
    }
    if candidate
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("{path} leaves the working directory; '..' is not allowed"));
    }
    Ok(candidate.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_in_the_working_directory() {
        assert!(checked_path("notes/a.txt").is_ok());
        assert!(checked_path("/etc/passwd").is_err());
        assert!(checked_path("../x").is_err());
        assert!(checked_path("a/../../x").is_err());
        assert!(checked_path("").is_err());
    }

    #[tokio::test]
    async fn write_file_writes_under_its_root_only() {
        use askloop::{Tool, ToolContext, ToolOutcome};
        let dir = tempfile::tempdir().unwrap();
        let tool = write_file(dir.path());
        let out = tool
            .execute(
                serde_json::json!({"path": "a/b.txt", "content": "hi"}),
                ToolContext::standalone(),
            )
            .await
            .unwrap();
        assert!(matches!(out, ToolOutcome::Output(_)));
        assert_eq!(std::fs::read_to_string(dir.path().join("a/b.txt")).unwrap(), "hi");
        let refused = tool
            .execute(
                serde_json::json!({"path": "../x", "content": "no"}),
                ToolContext::standalone(),
            )
            .await;
        assert!(refused.is_err());
    }
}
