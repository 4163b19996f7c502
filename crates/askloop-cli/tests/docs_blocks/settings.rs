//! What a block's `<!-- docs-test: ... -->` comments ask of the harness.

/// A block's settings, read.
#[derive(Debug, Default, PartialEq)]
pub struct Settings {
    /// `exit N...`: exit statuses, besides 0, that the block's commands end
    /// with as the docs say they do (`askloop run` exits 3 when its run
    /// waits); each must come, and the block goes on after it.
    pub exits: Vec<i32>,
    /// `http N...`: HTTP statuses of 400 and more that the block's `curl`
    /// requests are answered with as the docs say they are; each must come.
    pub http: Vec<i32>,
    /// `stdin "..."`: what the block reads on its standard input (a JSON
    /// string); nothing otherwise.
    pub stdin: Option<String>,
    /// `before COMMAND`: shell commands run before the block, unseen by a
    /// reader, to make the state the block's text assumes (a thread that
    /// the prose before the block started). Several join in order.
    pub before: Vec<String>,
    /// `page NAME`: for a component (`tsx`, `jsx`), the driver that uses
    /// it in chromium as a person would: `tests/docs/NAME.page.mjs`.
    pub page: Option<String>,
    /// `own server`: the block runs against a server of its own (the
    /// file's agents, a new database), not the one the file's other blocks
    /// share: for an example whose run ids earlier blocks gave other runs.
    pub own_server: bool,
}

/// The settings a block may have, for the error that names an unknown one.
const KNOWN: &str = "`exit N...`, `http N...`, `stdin \"JSON string\"`, `before COMMAND`, `own server`, `page NAME`";

impl Settings {
    /// Reads `written` (each as written, `exit 3`).
    pub fn read(written: &[String]) -> Result<Settings, String> {
        let mut settings = Settings::default();
        for setting in written {
            let (key, value) = setting.split_once(' ').unwrap_or((setting, ""));
            let value = value.trim();
            let statuses = || -> Result<Vec<i32>, String> {
                let codes: Result<Vec<i32>, _> = value.split_whitespace().map(str::parse).collect();
                match codes {
                    Ok(codes) if !codes.is_empty() => Ok(codes),
                    _ => Err(format!(
                        "`{setting}`: `{key}` takes one or more numbers, e.g. `{key} {}`",
                        if key == "http" { 409 } else { 3 }
                    )),
                }
            };
            match key {
                "exit" => settings.exits.extend(statuses()?),
                "http" => settings.http.extend(statuses()?),
                "stdin" => {
                    let text: String = serde_json::from_str(value).map_err(|err| {
                        format!("`{setting}`: `stdin` takes a JSON string, e.g. `stdin \"Plan it\\nZed\\n\"`: {err}")
                    })?;
                    settings.stdin = Some(text);
                }
                "before" if !value.is_empty() => settings.before.push(value.to_owned()),
                "own" if value == "server" => settings.own_server = true,
                "page" if !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') => {
                    settings.page = Some(value.to_owned());
                }
                _ => {
                    return Err(format!(
                        "`{setting}` is not a setting of the docs' test; it takes {KNOWN}"
                    ));
                }
            }
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(settings: &[&str]) -> Result<Settings, String> {
        Settings::read(&settings.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn settings_are_read_from_their_words() {
        let settings = read(&[
            "exit 3 1",
            "http 409",
            "stdin \"a\\nb\\n\"",
            "before askloop runs",
            "page use-chat",
            "own server",
        ])
        .unwrap();
        assert_eq!(settings.exits, [3, 1]);
        assert_eq!(settings.http, [409]);
        assert_eq!(settings.stdin.as_deref(), Some("a\nb\n"));
        assert_eq!(settings.before, ["askloop runs"]);
        assert_eq!(settings.page.as_deref(), Some("use-chat"));
        assert!(settings.own_server);
    }

    #[test]
    fn an_unknown_or_malformed_setting_is_refused_naming_what_is_taken() {
        let unknown = read(&["exits 3"]).unwrap_err();
        assert!(
            unknown.contains("`exits 3` is not a setting") && unknown.contains("`exit N...`"),
            "{unknown}"
        );
        let malformed = read(&["http four"]).unwrap_err();
        assert!(malformed.contains("e.g. `http 409`"), "{malformed}");
        assert!(read(&["stdin plain"]).unwrap_err().contains("JSON string"));
    }
}
