//! Tools an agent of the server (or of the `askloop` command) can be given
//! besides `ask_user`.
//!
//! `write_file` writes a text file inside one folder (its root: an
//! `askloop.toml` agent's `write_dir`, or the folder an `askloop` run
//! started in), and every call waits for a person's approval. Approving
//! from another folder, or another process, tomorrow, still writes inside
//! the root; a symbolic link that leads out of it is refused, and only
//! regular files are written: a FIFO, a device or a folder at the path is
//! a tool error, never a write that blocks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
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
/// `..`, no link leading out), after approval.
pub fn write_file(root: impl Into<PathBuf>) -> FunctionTool {
    let root: PathBuf = root.into();
    FunctionTool::builder(WRITE_FILE_TOOL_ID)
        .description(
            "Write a text file in the user's working directory (path relative, no '..'). The user is asked to \
             approve every call before it runs.",
        )
        .input::<WriteFile>()
        .requires_approval(true)
        // Approval rules judge the path as written to, not as the model
        // spelled it: `docs/../x` is `x`.
        .acts_on(|args| {
            let mut args = args.clone();
            if let Some(path) = args.get("path").and_then(serde_json::Value::as_str) {
                args["path"] = serde_json::Value::String(resolved(path));
            }
            args
        })
        .execute(move |input: WriteFile, _ctx| {
            let root = root.clone();
            async move {
                let shown = input.path.clone();
                let written = tokio::task::spawn_blocking(move || write_inside(&root, &input.path, &input.content))
                    .await
                    .map_err(|err| ToolError::internal("the write did not finish").with_source(err))?;
                // The model is told why, so it can choose another path.
                let (_, bytes) = written.map_err(|err| ToolError::new(err.to_string()).with_source(err))?;
                Ok(ToolOutput::text(format!("Wrote {bytes} bytes to {shown}")).into())
            }
        })
}

/// The file a `write_file` call with this `path` would write under `root`,
/// for an approval prompt (a path that would be refused is joined as
/// given, so the person sees what the model asked for).
pub fn write_target(root: &Path, path: &str) -> PathBuf {
    checked_path(path).map_or_else(|_| root.join(path), |p| root.join(p))
}

/// Why `write_file` did not write, in words the model can act on; where
/// the file system refused, its error is the source.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct WriteRefused {
    message: String,
    #[source]
    source: Option<std::io::Error>,
}

impl WriteRefused {
    fn new(message: impl Into<String>) -> Self {
        WriteRefused {
            message: message.into(),
            source: None,
        }
    }

    /// `what` failed with `err`: "{what}: {err}".
    fn io(what: String, err: std::io::Error) -> Self {
        WriteRefused {
            message: format!("{what}: {err}"),
            source: Some(err),
        }
    }
}

/// Writes `content` to `path` inside `root`; returns the absolute target
/// and the bytes written, or why not.
fn write_inside(root: &Path, path: &str, content: &str) -> Result<(PathBuf, usize), WriteRefused> {
    let relative = checked_path(path)?;
    // A configured folder that does not exist yet is made, as a folder
    // inside it would be.
    std::fs::create_dir_all(root).map_err(|err| WriteRefused::io(format!("cannot create {}", root.display()), err))?;
    let root = root.canonicalize().map_err(|err| {
        WriteRefused::io(
            format!("the folder write_file writes in, {}, cannot be used", root.display()),
            err,
        )
    })?;
    let Some(name) = relative.file_name() else {
        return Err(WriteRefused::new(format!("{path} names no file")));
    };
    let folder = folder_inside(&root, relative.parent().unwrap_or(Path::new("")))?;
    let target = folder.join(name);
    let mut file = open_regular(&target)?;
    file.set_len(0)
        .and_then(|()| file.write_all(content.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|err| WriteRefused::io(format!("cannot write {}", target.display()), err))?;
    Ok((target, content.len()))
}

/// The folder `relative` names under `root`, created one level at a time;
/// a level that is a symbolic link must lead to a folder inside `root`.
fn folder_inside(root: &Path, relative: &Path) -> Result<PathBuf, WriteRefused> {
    let mut folder = root.to_path_buf();
    for part in relative.components() {
        let Component::Normal(part) = part else { continue };
        let next = folder.join(part);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.is_dir() => folder = next,
            Ok(meta) if meta.file_type().is_symlink() => {
                let resolved = next
                    .canonicalize()
                    .map_err(|err| WriteRefused::io(format!("{} is a broken link", next.display()), err))?;
                if !resolved.starts_with(root) || !resolved.is_dir() {
                    return Err(WriteRefused::new(format!(
                        "{} is a link that leads outside {}; write_file writes only inside its folder",
                        next.display(),
                        root.display()
                    )));
                }
                folder = resolved;
            }
            Ok(_) => return Err(WriteRefused::new(format!("{} is not a folder", next.display()))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next)
                    .map_err(|err| WriteRefused::io(format!("cannot create {}", next.display()), err))?;
                folder = next;
            }
            Err(err) => return Err(WriteRefused::io(format!("cannot use {}", next.display()), err)),
        }
    }
    Ok(folder)
}

/// Opens `target` for writing without following a link and without
/// blocking (a FIFO with no reader would block for ever), and keeps it only
/// if it is a regular file.
fn open_regular(target: &Path) -> Result<File, WriteRefused> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(target)
        .map_err(|err| {
            let not_regular = |what: &str| {
                WriteRefused::new(format!(
                    "{} is {what}; write_file writes only regular files",
                    target.display()
                ))
            };
            match err.raw_os_error() {
                Some(libc::ELOOP) => not_regular("a symbolic link"),
                Some(libc::ENXIO) => not_regular("a FIFO or socket"),
                Some(libc::EISDIR) => not_regular("a folder"),
                _ => WriteRefused::io(format!("cannot open {}", target.display()), err),
            }
        })?;
    let meta = file
        .metadata()
        .map_err(|err| WriteRefused::io(format!("cannot inspect {}", target.display()), err))?;
    if !meta.is_file() {
        return Err(WriteRefused::new(format!(
            "{} is not a regular file (a FIFO, device or socket); write_file writes only regular files",
            target.display()
        )));
    }
    Ok(file)
}

/// `path` with `.` left out and each `..` taking away the name before it,
/// as a file system would resolve it (a `..` with nothing before it stays:
/// the path leaves the folder), with `/` between names.
fn resolved(path: &str) -> String {
    let mut names: Vec<String> = Vec::new();
    let absolute = Path::new(path).is_absolute();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(name) => names.push(name.to_string_lossy().into_owned()),
            Component::ParentDir if names.last().is_some_and(|n| n != "..") => {
                names.pop();
            }
            Component::ParentDir => names.push("..".to_owned()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let joined = names.join("/");
    if absolute { format!("/{joined}") } else { joined }
}

/// A relative path that stays inside the folder it is joined to.
fn checked_path(path: &str) -> Result<PathBuf, WriteRefused> {
    let candidate = Path::new(path);
    if path.trim().is_empty() {
        return Err(WriteRefused::new("the path is empty"));
    }
    if candidate.is_absolute() {
        return Err(WriteRefused::new(format!(
            "{path} is absolute; give a path relative to the working directory"
        )));
    }
    if candidate
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(WriteRefused::new(format!(
            "{path} leaves the working directory; '..' is not allowed"
        )));
    }
    Ok(candidate.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_see_the_path_as_written_to() {
        let tool = write_file("/tmp/unused");
        let acts = |path: &str| askloop::Tool::acts_on(&tool, &serde_json::json!({"path": path, "content": "x"}));
        assert_eq!(acts("docs/../x.md")["path"], "x.md");
        assert_eq!(acts("./docs/a.md")["path"], "docs/a.md");
        assert_eq!(acts("docs/../../x")["path"], "../x");
        assert_eq!(acts("/etc/passwd")["path"], "/etc/passwd");
        assert_eq!(acts("docs/a.md")["content"], "x", "the other arguments as given");
    }

    #[test]
    fn paths_must_stay_in_the_working_directory() {
        assert!(checked_path("notes/a.txt").is_ok());
        assert!(checked_path("/etc/passwd").is_err());
        assert!(checked_path("../x").is_err());
        assert!(checked_path("a/../../x").is_err());
        assert!(checked_path("").is_err());
    }

    #[test]
    fn writes_land_inside_the_root_whatever_the_current_folder() {
        let dir = tempfile::tempdir().unwrap();
        let (target, bytes) = write_inside(dir.path(), "notes/plan.txt", "ship it").unwrap();
        assert_eq!(bytes, 7);
        assert_eq!(target, dir.path().canonicalize().unwrap().join("notes/plan.txt"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "ship it");
        write_inside(dir.path(), "notes/plan.txt", "v2").unwrap();
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "v2",
            "an existing file is replaced"
        );
    }

    #[test]
    fn a_link_leading_out_of_the_root_is_refused_and_nothing_is_written_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink("../outside", root.join("link")).unwrap();
        std::os::unix::fs::symlink("../outside/x.txt", root.join("file-link")).unwrap();
        let err = write_inside(&root, "link/x.txt", "escape").unwrap_err();
        assert!(err.to_string().contains("leads outside"), "{err}");
        let err = write_inside(&root, "link/deeper/x.txt", "escape").unwrap_err();
        assert!(err.to_string().contains("leads outside"), "{err}");
        let err = write_inside(&root, "file-link", "escape").unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "nothing landed outside"
        );
        // A link that stays inside is fine.
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.join("alias")).unwrap();
        write_inside(&root, "alias/y.txt", "ok").unwrap();
        assert_eq!(std::fs::read_to_string(root.join("real/y.txt")).unwrap(), "ok");
    }

    #[test]
    fn a_fifo_a_device_or_a_folder_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let err = write_inside(dir.path(), "pipe", "x").unwrap_err();
        assert!(err.to_string().contains("regular files"), "{err}");
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        let err = write_inside(dir.path(), "folder", "x").unwrap_err();
        assert!(err.to_string().contains("regular files"), "{err}");
        std::os::unix::fs::symlink("/dev/null", dir.path().join("null")).unwrap();
        assert!(write_inside(dir.path(), "null", "x").is_err());
    }

    #[tokio::test]
    async fn the_tool_writes_under_its_root_and_refuses_a_path_leading_out() {
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
