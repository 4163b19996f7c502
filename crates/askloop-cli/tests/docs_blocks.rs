//! Every shell and JavaScript/TypeScript code block of `README.md` and
//! `docs/*.md` runs against a real `askloop serve`, or is listed in
//! `docs/exempt.toml` with the reason it cannot, so that the docs cannot
//! drift from what askloop does. A block that is neither run nor exempt, or
//! that fails, fails this test with its file and line and what to do.
//!
//! # Which blocks
//!
//! Fences in `sh`, `bash`, `shell` or `console` (run under bash; in
//! `console`, the lines after a `$ ` prompt, the others being output), `js`,
//! `javascript`, `ts` or `typescript` (run under Node), and `tsx` or `jsx`
//! (a React component, rendered in chromium). Other blocks (`toml`, `json`,
//! `text`, no language) are not run. `rust` blocks are not checked yet: the
//! library's examples will join through [`markdown::Language::Rust`], on the
//! same walk over the files and the same exemption list.
//!
//! # Where they run
//!
//! Each file's blocks run in order, in one folder of their own (the working
//! folder; `HOME` and `XDG_DATA_HOME` inside it, so nothing lands in `~`),
//! against one `askloop serve` started there on a free port: the offline
//! demo agent on the default database, or the agents and database the
//! file's examples name (`docs_blocks/fixtures.rs`). Shell blocks run as
//! `bash -Eu -o pipefail` with the freshly built `askloop` first on `PATH`;
//! an ERR trap does what `-e` does, so the first command that fails ends
//! the block, named by its line. Files run side by side, each on its own
//! thread.
//!
//! # What is filled in
//!
//! A block is written for a reader; the harness fills in what the reader's
//! machine would give:
//!
//! - `127.0.0.1:4111` and `localhost:4111` (the default address) are the
//!   server's address; `cargo run -p askloop-cli --` is `askloop`, the
//!   binary it builds; `postgres://user@host:5432/askloop` is the test
//!   database (`ASKLOOP_TEST_DATABASE_URL`), in a schema of the test's own.
//! - `RUN_ID` (the word) is the newest run waiting on a person, looked up
//!   when the command runs (so a block may start the run on one line and
//!   answer it on the next), quoted to fit where it stands.
//! - A variable a shell block sets on a line of its own (`API=http://...`)
//!   is set in the file's later blocks too, as a reader's terminal keeps it.
//! - Script blocks may use names the harness supplies without defining them
//!   (`client`, `agent`, a `writer` run waiting for approval as
//!   `otherRunId`...): the table is at the top of `tests/docs/run-block.mjs`.
//!
//! # Settings
//!
//! An HTML comment right above a block, invisible on the rendered page, says
//! what the docs promise of it (several are separated by `;`, or written as
//! several comments, one a line):
//!
//! - `<!-- docs-test: exit 3 -->`: a command of the block exits 3 as
//!   documented (`askloop run` when its run waits); the block goes on, and
//!   the test checks that the status came.
//! - `<!-- docs-test: http 409 -->`: a `curl` of the block is answered 409
//!   as documented. Every other answer of 400 or more fails the command:
//!   `curl` in a block is the real one, with its answer's status checked.
//! - `<!-- docs-test: stdin "Plan it\nZed\n" -->`: what the block reads.
//! - `<!-- docs-test: before askloop run "Plan it" -->`: commands run first,
//!   unseen, to make the state the prose before the block describes (one
//!   `before` a command line, without `;`).
//! - `<!-- docs-test: own server -->`: the block runs against a server of its
//!   own (the file's agents, a new database), for an example whose run ids
//!   the file's earlier blocks already used for other runs.
//! - `<!-- docs-test: page NAME -->`: a component's driver,
//!   `tests/docs/NAME.page.mjs`, which uses it in chromium as a person would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "docs_blocks/exempt.rs"]
mod exempt;
#[path = "docs_blocks/fixtures.rs"]
mod fixtures;
#[path = "docs_blocks/markdown.rs"]
mod markdown;
#[path = "docs_blocks/script.rs"]
mod script;
#[path = "docs_blocks/settings.rs"]
mod settings;
#[path = "docs_blocks/shell.rs"]
mod shell;
#[path = "docs_blocks/site.rs"]
mod site;

use fixtures::{POSTGRES, Postgres};
use markdown::{Block, Language};
use settings::Settings;
use site::{Site, workspace};

/// What the fix of a failing block can be, said after each failure.
const HOW_TO_FIX: &str = "Fix the block (it is what a reader runs); say what it documents in a comment \
     right above it (`<!-- docs-test: exit 3 -->`, `http 409`, `stdin \"...\"`, `before COMMAND`, `own server`, \
     `page NAME`); give its file's server the agents, tokens or settings the block names \
     (crates/askloop-cli/tests/docs_blocks/fixtures.rs); or, if it cannot run in a test, add it to \
     docs/exempt.toml with the reason. The conventions: crates/askloop-cli/tests/docs_blocks.rs.";

/// What this machine lacks for the blocks that need more than bash and
/// curl; under `CI=true` nothing may lack.
struct Missing {
    /// For script blocks: node and the pinned packages.
    node: Option<String>,
    /// For component blocks: those, chromium and playwright-core.
    browser: Option<String>,
}

impl Missing {
    fn here() -> Missing {
        let missing = Missing {
            node: script::missing(),
            browser: script::missing_browser(),
        };
        if let Some(lack) = missing.browser.as_ref().or(missing.node.as_ref())
            && std::env::var("CI").is_ok_and(|v| v == "true")
        {
            panic!("the docs' script and component blocks cannot run under CI: {lack}");
        }
        missing
    }
}

/// The files whose blocks are checked: README.md and docs/*.md.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Says why `file`'s blocks do not run here: a problem under `CI=true`,
/// where nothing may be skipped, a line on stderr elsewhere.
fn not_run(file: &str, lack: &str) -> Vec<String> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        return vec![format!("{file}: its blocks cannot run under CI: {lack}")];
    }
    eprintln!("{file}: its blocks not run: {lack}");
    Vec::new()
}

/// A block to run, and the starts of its lines the exemption list leaves
/// out.
struct ToRun<'a> {
    block: &'a Block,
    exempt_lines: Vec<String>,
}

/// Runs the blocks of one file, in order, at a site of their own; what
/// went wrong, block by block.
fn run_file(file: &str, blocks: &[ToRun<'_>], curl: &str, missing: &Missing) -> Vec<String> {
    let page = blocks.iter().any(|b| b.block.language == Language::Component);
    let fixture = fixtures::fixture(file);
    if let Some(lack) = fixture.lacks.and_then(|lacks| lacks()) {
        return not_run(file, &lack);
    }
    let postgres = if fixture.db == Some(POSTGRES) || blocks.iter().any(|b| b.block.text.contains(POSTGRES)) {
        match Postgres::new(file) {
            Some(postgres) => Some(postgres),
            // Skipped, said why (never under CI=true).
            None => return Vec::new(),
        }
    } else {
        None
    };
    let uses_postgres = postgres.is_some();
    let shared = Site::start(fixture, postgres, curl.to_owned(), page);
    let mut problems = Vec::new();
    let mut variables = Vec::new();
    for (index, ToRun { block, exempt_lines }) in blocks.iter().enumerate() {
        let settings = match Settings::read(&block.settings) {
            Ok(settings) => settings,
            Err(err) => {
                problems.push(format!("{block}: {err}"));
                continue;
            }
        };
        let own = settings.own_server.then(|| {
            let postgres = uses_postgres.then(|| Postgres::new(file)).flatten();
            Site::start(
                fixture,
                postgres,
                curl.to_owned(),
                block.language == Language::Component,
            )
        });
        let site = own.as_ref().unwrap_or(&shared);
        let result = match block.language {
            Language::Shell => shell::run_block(block, exempt_lines, &settings, site, index, &mut variables),
            Language::Script => match &missing.node {
                Some(missing) => {
                    eprintln!("{block}: not run: {missing}");
                    Ok(())
                }
                None => script::run(block, &site.fill_in(&block.text), None, site, index),
            },
            Language::Component => match (&missing.browser, &settings.page) {
                (_, None) => Err(format!(
                    "{block}: a component is rendered in chromium and used by a driver, tests/docs/NAME.page.mjs, \
                     named right above it: <!-- docs-test: page NAME -->"
                )),
                (Some(missing), _) => {
                    eprintln!("{block}: not run: {missing}");
                    Ok(())
                }
                (None, Some(page)) => script::run(block, &site.fill_in(&block.text), Some(page), site, index),
            },
            Language::Rust | Language::Other => Ok(()),
        };
        if let Err(problem) = result {
            problems.push(problem);
        }
    }
    problems
}

/// Every checked block of the docs with what the exemption list says of
/// it; the list's own problems.
fn blocks_of_the_docs() -> (Vec<Block>, exempt::Exempt, Vec<String>) {
    let mut blocks = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(workspace().join(&file)).unwrap();
        blocks.extend(markdown::blocks(&file, &text));
    }
    let list = std::fs::read_to_string(workspace().join(exempt::PATH)).unwrap();
    let list = exempt::parse(&list).unwrap_or_else(|err| panic!("{err}"));
    let (exempt, mut problems) = exempt::match_blocks(&list, &blocks);
    for (i, block) in blocks.iter().enumerate() {
        if exempt.blocks.contains_key(&i) && !block.settings.is_empty() {
            problems.push(format!(
                "{block} is exempt in {} and has settings for its run; drop one or the other",
                exempt::PATH
            ));
        }
    }
    (blocks, exempt, problems)
}

#[test]
fn every_shell_and_script_block_of_the_docs_runs_against_askloop_serve_or_is_exempt_with_its_reason() {
    let (blocks, exempt, mut problems) = blocks_of_the_docs();
    let curl = shell::real_curl().expect("curl is on PATH (the docs' blocks call it)");
    let missing = Missing::here();
    let per_file: Vec<(String, Vec<ToRun<'_>>)> = doc_files()
        .into_iter()
        .map(|file| {
            let to_run: Vec<ToRun<'_>> = (0..blocks.len())
                .filter(|i| {
                    blocks[*i].file == file && blocks[*i].language.is_checked() && !exempt.blocks.contains_key(i)
                })
                .map(|i| ToRun {
                    block: &blocks[i],
                    exempt_lines: exempt.lines.get(&i).cloned().unwrap_or_default(),
                })
                .collect();
            (file, to_run)
        })
        .filter(|(_, to_run)| !to_run.is_empty())
        .collect();
    // One thread per file: its blocks wait on processes far more than they
    // compute.
    std::thread::scope(|scope| {
        let runs: Vec<_> = per_file
            .iter()
            .map(|(file, to_run)| scope.spawn(|| run_file(file, to_run, &curl, &missing)))
            .collect();
        for (run, (file, _)) in runs.into_iter().zip(&per_file) {
            match run.join() {
                Ok(found) => problems.extend(found),
                Err(_) => problems.push(format!("{file}: its run stopped with a panic, printed above")),
            }
        }
    });
    assert!(
        problems.is_empty(),
        "{} problem(s) with the docs' code blocks:\n\n{}\n\n{HOW_TO_FIX}",
        problems.len(),
        problems.join("\n\n")
    );
}

/// The harness cannot pass a broken block: a command that fails is named by
/// its file and line (in a `console` block too, whose output lines are not
/// run), and a status a block claims but never sees fails it too.
#[test]
fn a_block_that_fails_or_claims_a_status_it_never_sees_is_reported_with_its_file_and_line() {
    let page = "# Example\n\n```sh\naskloop runs\naskloop runs show no-such-run\n```\n\n\
                <!-- docs-test: exit 3 -->\n```sh\naskloop runs\n```\n\n\
                ```console\n$ askloop runs\nNo runs yet.\n$ askloop runs --status nonsense\n```\n";
    let blocks = markdown::blocks("docs/example.md", page);
    let to_run: Vec<ToRun<'_>> = blocks
        .iter()
        .map(|block| ToRun {
            block,
            exempt_lines: Vec::new(),
        })
        .collect();
    let curl = shell::real_curl().expect("curl is on PATH");
    let missing = Missing {
        node: None,
        browser: None,
    };
    let problems = run_file("docs/example.md", &to_run, &curl, &missing);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].starts_with("docs/example.md:3 (```sh block under \"Example\") failed: the command on docs/example.md:5 exited with status 1"),
        "{}",
        problems[0]
    );
    assert!(problems[0].contains("no-such-run"), "{}", problems[0]);
    assert!(
        problems[1].contains("docs/example.md:9")
            && problems[1].contains("(`exit 3`) that a command exits 3, and none did"),
        "{}",
        problems[1]
    );
    // A console block's output is not run; its commands are.
    assert!(
        problems[2].contains("the command on docs/example.md:16 exited with status 2"),
        "{}",
        problems[2]
    );
}
