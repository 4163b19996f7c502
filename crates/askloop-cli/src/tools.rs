//! What approving a call of the default agent's tools besides `ask_user`
//! would do, for the approval prompt. The tool itself, `write_file`, is the
//! configured agents' (`askloop_config::tools`).
//!
//! `write_file` writes inside the folder the run started in (its root,
//! stored with the run), so approving from another folder, tomorrow, still
//! writes there.

use std::path::Path;

use serde_json::Value;

/// What approving a call would do, for the approval prompt: for
/// `write_file`, the absolute file it writes.
pub fn describe_call(root: &Path, tool: &str, args: &Value) -> String {
    let path = args.get("path").and_then(Value::as_str);
    match (tool, path) {
        ("write_file", Some(path)) => {
            let bytes = args.get("content").and_then(Value::as_str).map_or(0, str::len);
            let target = askloop_config::tools::write_target(root, path);
            format!(
                "write_file to write {bytes} bytes to {}",
                crate::escape::one_line(&target.display().to_string())
            )
        }
        _ => format!("{} to run with {args}", crate::escape::one_line(tool)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approval_names_the_absolute_target() {
        let text = describe_call(
            Path::new("/home/ada/project"),
            "write_file",
            &serde_json::json!({"path": "notes/plan.txt", "content": "ship it"}),
        );
        assert_eq!(text, "write_file to write 7 bytes to /home/ada/project/notes/plan.txt");
    }
}
