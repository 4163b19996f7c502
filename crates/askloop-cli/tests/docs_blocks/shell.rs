//! A shell block, run under bash as a reader runs it: the block's text as a
//! script file, so that a failing command is named by its line, with the
//! harness's prelude (`BASH_ENV`) before it.

use std::path::Path;
use std::process::{Command, Stdio};

use super::exempt::is_exempt_line;
use super::markdown::Block;
use super::settings::Settings;
use super::site::Site;

/// What bash reads before the block (as `BASH_ENV`). Without `set -e`, an
/// ERR trap does what `-e` does, under the same conditions, except for the
/// exit statuses the block documents (`exit N`): those are written down and
/// the block goes on, as it does in a reader's terminal.
const PRELUDE: &str = r#"unset BASH_ENV
docs_failed() {
  local status=$1 line=$2
  if [[ " $DOCS_EXITS " == *" $status "* ]]; then
    echo "$status" >> "$DOCS_OUT/exits"
    return 0
  fi
  # In a subshell or a command substitution, the command around it reports.
  if (( BASH_SUBSHELL == 0 )); then
    echo "docs-test: the command on line $line of the block exited with status $status" >&2
  fi
  exit "$status"
}
trap 'docs_failed $? $LINENO' ERR
# RUN_ID in a block: the newest run waiting on a person, when the command runs.
docs_run_id() {
  local listed id
  listed=$("$DOCS_CURL" -s "$DOCS_SERVER/api/runs?status=suspended&limit=1" || true)
  id=$(printf '%s' "$listed" | grep -o '"runId":"[^"]*"' | head -n 1 | cut -d '"' -f 4 || true)
  if [[ -z $id ]]; then
    echo "docs-test: RUN_ID stands for the newest run waiting on a person, and none waits" >&2
    return 1
  fi
  printf '%s' "$id"
}
"#;

/// `curl` as the blocks call it: the real curl, with the HTTP status of
/// every answer checked. A status of 400 or more fails the command (exit
/// 22, as `curl --fail` does) unless the block documents it (`http N`);
/// either way it is written down, so the harness can check that each
/// documented status came.
const CURL: &str = r#"#!/usr/bin/env bash
headers=$(mktemp)
"$DOCS_CURL" -D "$headers" "$@"
status=$?
code=$(grep -o '^HTTP/[0-9.]* [0-9]*' "$headers" | tail -n 1 | cut -d ' ' -f 2)
rm -f "$headers"
if [[ -n $code && $code -ge 400 ]]; then
  echo "$code" >> "$DOCS_OUT/http"
  if [[ " $DOCS_HTTP " != *" $code "* ]]; then
    echo >&2
    echo "docs-test: HTTP $code from: curl $*" >&2
    exit 22
  fi
fi
exit "$status"
"#;

/// Writes the `curl` the blocks call into `bin`.
pub fn install_curl(bin: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let path = bin.join("curl");
    std::fs::write(&path, CURL).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The real curl, which the one in the blocks' `bin` calls.
pub fn real_curl() -> Option<String> {
    let out = Command::new("bash").args(["-c", "command -v curl"]).output().ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!path.is_empty()).then_some(path)
}

/// What became of a block.
struct Outcome {
    /// The status bash exited with.
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The documented statuses that came (`exit N`, `http N`).
    pub exits: Vec<i32>,
    pub http: Vec<i32>,
}

/// Runs `script` (a block's text, filled in) at `site`, after `set` (the
/// variables of earlier blocks), with `settings`; `folder` names its folder
/// of outputs, `name` the block in errors.
fn run(site: &Site, folder: &str, name: &str, set: &str, script: &str, settings: &Settings) -> Result<Outcome, String> {
    let out = site.dir.path().join("out").join(folder);
    std::fs::create_dir_all(&out).unwrap();
    let prelude = out.join("prelude.sh");
    std::fs::write(&prelude, format!("{PRELUDE}{set}")).unwrap();
    let file = out.join("block.sh");
    // A last command that exits with a documented status is the block's
    // end, not its failure.
    let newline = if script.ends_with('\n') { "" } else { "\n" };
    std::fs::write(&file, format!("{script}{newline}:\n")).unwrap();
    let list = |codes: &[i32]| codes.iter().map(i32::to_string).collect::<Vec<_>>().join(" ");
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-Eu", "-o", "pipefail"])
        .arg(&file)
        .env("BASH_ENV", &prelude)
        .env("DOCS_OUT", &out)
        .env("DOCS_EXITS", list(&settings.exits))
        .env("DOCS_HTTP", list(&settings.http))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    site.environment(&mut cmd);
    let output = site.wait(cmd, settings.stdin.as_deref().unwrap_or_default(), name)?;
    let read = |file: &str| -> Vec<i32> {
        std::fs::read_to_string(out.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    Ok(Outcome {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        exits: read("exits"),
        http: read("http"),
    })
}

/// Runs shell `block` at `site`, but for its `exempt_lines`, with the
/// `variables` earlier blocks of its file set (as written), to which it
/// adds its own; what went wrong, if anything.
pub fn run_block(
    block: &Block,
    exempt_lines: &[String],
    settings: &Settings,
    site: &Site,
    index: usize,
    variables: &mut Vec<String>,
) -> Result<(), String> {
    let set = site.fill_in(&variables.iter().map(|v| format!("{v}\n")).collect::<String>());
    for (i, before) in settings.before.iter().enumerate() {
        let script = fill_run_ids(&site.fill_in(before));
        let name = format!("{block}, `before {before}`,");
        let outcome = run(
            site,
            &format!("{index}-before-{i}"),
            &name,
            &set,
            &script,
            &Settings::default(),
        )?;
        if outcome.status != Some(0) {
            return Err(format!(
                "{block}: its setting `before {before}` failed (status {:?}):\n{}{}",
                outcome.status,
                tail(&outcome.stdout, 10),
                tail(&outcome.stderr, 10)
            ));
        }
    }
    // An exempt line becomes `:` (nothing), so the others keep their numbers;
    // so does a `console` block's output, and its prompts (`$ `) go.
    let console = block.info.starts_with("console");
    let kept: String = block
        .text
        .lines()
        .map(|line| match line.strip_prefix("$ ") {
            _ if is_exempt_line(line, exempt_lines) => ":\n".to_owned(),
            Some(command) if console => format!("{command}\n"),
            None if console => ":\n".to_owned(),
            _ => format!("{line}\n"),
        })
        .collect();
    let script = fill_run_ids(&site.fill_in(&kept));
    let outcome = run(site, &index.to_string(), &block.to_string(), &set, &script, settings)?;
    let mut wrong = Vec::new();
    if outcome.status != Some(0) {
        let at = match failed_line(&outcome.stderr) {
            Some(line) => format!(
                "the command on {}:{} exited with status {}",
                block.file,
                block.line + line,
                outcome.status.map_or("none (killed)".to_owned(), |s| s.to_string())
            ),
            None => format!("bash exited with status {:?}", outcome.status),
        };
        wrong.push(format!(
            "{at}\n  the block as run:\n{}  its stdout (the end):\n{}  its stderr (the end):\n{}",
            tail(&script, 40),
            tail(&outcome.stdout, 15),
            tail(&outcome.stderr, 15)
        ));
    } else {
        for status in &settings.exits {
            if !outcome.exits.contains(status) {
                wrong.push(format!(
                    "it says (`exit {status}`) that a command exits {status}, and none did"
                ));
            }
        }
        for status in &settings.http {
            if !outcome.http.contains(status) {
                wrong.push(format!(
                    "it says (`http {status}`) that a request is answered {status}, and none was"
                ));
            }
        }
    }
    if wrong.is_empty() {
        variables.extend(assignments(&kept));
        Ok(())
    } else {
        Err(format!("{block} failed: {}", wrong.join("; ")))
    }
}

/// The last `n` lines of `text`, indented for a report.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].iter().map(|l| format!("    | {l}\n")).collect()
}

/// The line of the block bash's report names (`... on line N of the
/// block ...`), if it names one.
fn failed_line(stderr: &str) -> Option<usize> {
    stderr.lines().rev().find_map(|line| {
        let rest = line.split("on line ").nth(1)?;
        rest.split(' ').next()?.parse().ok()
    })
}

/// The variables a block sets on lines of their own (`API=http://...`,
/// `export B=...`), as a reader's terminal keeps them for the next blocks.
fn assignments(script: &str) -> Vec<String> {
    script
        .lines()
        .map(str::trim)
        .map(|l| l.strip_prefix("export ").unwrap_or(l))
        .filter(|l| {
            let Some((name, value)) = l.split_once('=') else {
                return false;
            };
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && !value.contains(char::is_whitespace)
        })
        .map(str::to_owned)
        .collect()
}

/// `text` with every `RUN_ID` that stands alone replaced by the shell's
/// lookup of the newest waiting run, quoted to fit where it stands: in
/// single quotes (a JSON body), in double quotes, or bare. Comments are
/// left as they are.
pub fn fill_run_ids(text: &str) -> String {
    const WORD: &str = "RUN_ID";
    #[derive(PartialEq)]
    enum In {
        Bare,
        Single,
        Double,
        Comment,
    }
    let mut out = String::with_capacity(text.len());
    let mut state = In::Bare;
    let chars: Vec<char> = text.chars().collect();
    let word: Vec<char> = WORD.chars().collect();
    let ident = |c: Option<&char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts_word = chars[i..].starts_with(&word)
            && !ident(i.checked_sub(1).and_then(|p| chars.get(p)))
            && !ident(chars.get(i + word.len()).filter(|c| **c != '$'));
        if starts_word && state != In::Comment {
            out.push_str(match state {
                In::Bare => "\"$(docs_run_id)\"",
                In::Double => "$(docs_run_id)",
                _ => "'\"$(docs_run_id)\"'",
            });
            i += word.len();
            continue;
        }
        match (&state, c) {
            (In::Bare, '\\') | (In::Double, '\\') => {
                out.push(c);
                if let Some(next) = chars.get(i + 1) {
                    out.push(*next);
                }
                i += 2;
                continue;
            }
            (In::Bare, '\'') => state = In::Single,
            (In::Bare, '"') => state = In::Double,
            (In::Bare, '#') if i == 0 || chars[i - 1].is_whitespace() => state = In::Comment,
            (In::Single, '\'') | (In::Double, '"') => state = In::Bare,
            (In::Comment, '\n') => state = In::Bare,
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_is_looked_up_where_it_stands_and_left_alone_in_comments() {
        assert_eq!(
            fill_run_ids("askloop resume RUN_ID --answer Zed   # RUN_ID's answer\n"),
            "askloop resume \"$(docs_run_id)\" --answer Zed   # RUN_ID's answer\n"
        );
        assert_eq!(
            fill_run_ids("curl -d '{\"runId\": \"RUN_ID\"}'"),
            "curl -d '{\"runId\": \"'\"$(docs_run_id)\"'\"}'"
        );
        assert_eq!(fill_run_ids("echo \"run RUN_ID\""), "echo \"run $(docs_run_id)\"");
        assert_eq!(fill_run_ids("MY_RUN_ID $RUN_ID RUN_IDS"), "MY_RUN_ID $RUN_ID RUN_IDS");
    }

    #[test]
    fn variables_set_on_lines_of_their_own_are_kept() {
        let script = "API=http://127.0.0.1:1/api\ncurl -s $API/agents\nexport T=x\nA=b c\n";
        assert_eq!(assignments(script), ["API=http://127.0.0.1:1/api", "T=x"]);
    }

    #[test]
    fn the_failed_line_is_read_from_the_report() {
        assert_eq!(
            failed_line("x\ndocs-test: the command on line 4 of the block exited with status 1\n"),
            Some(4)
        );
        assert_eq!(failed_line("nothing"), None);
    }
}
