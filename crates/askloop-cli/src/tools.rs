//! Tools of the default agent besides `ask_user`.
//!
//! `write_file` lets the agent write a file in the current directory, and
//! every call waits for the person's approval (`askloop approve` /
//! `askloop decline`, or a yes/no prompt in `chat`).

use std::path::{Component, Path, PathBuf};

use askloop::{FunctionTool, ToolError, ToolOutput};
use serde::Deserialize;

/// The input of `write_file`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WriteFile {
    /// A path relative to the current directory, without `..`.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

/// `write_file`: writes a file under the current directory, after approval.
pub fn write_file() -> FunctionTool {
    FunctionTool::builder("write_file")
        .description(
            "Write a text file in the user's current directory (path relative, no '..'). The user is asked to \
             approve every call before it runs.",
        )
        .input::<WriteFile>()
        .requires_approval(true)
        .execute(|input: WriteFile, _ctx| async move {
            let path = checked_path(&input.path).map_err(ToolError::new)?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|err| ToolError::new(format!("cannot create {}: {err}", parent.display())))?;
            }
            tokio::fs::write(&path, input.content.as_bytes())
                .await
                .map_err(|err| ToolError::new(format!("cannot write {}: {err}", path.display())))?;
            Ok(ToolOutput::text(format!("Wrote {} bytes to {}", input.content.len(), input.path)).into())
        })
}

/// A relative path that stays inside the current directory.
fn checked_path(path: &str) -> Result<PathBuf, String> {
    let candidate = Path::new(path);
    if path.trim().is_empty() {
        return Err("the path is empty".into());
    }
    if candidate.is_absolute() {
        return Err(format!(
            "{path} is absolute; give a path relative to the current directory"
        ));
    }
    if candidate
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!("{path} leaves the current directory; '..' is not allowed"));
    }
    Ok(candidate.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_in_the_current_directory() {
        assert!(checked_path("notes/a.txt").is_ok());
        assert!(checked_path("/etc/passwd").is_err());
        assert!(checked_path("../x").is_err());
        assert!(checked_path("a/../../x").is_err());
        assert!(checked_path("").is_err());
    }
}
