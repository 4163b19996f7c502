//! `--db`: what the command does when the database is missing, damaged,
//! read only or full.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

mod common;

use common::*;

const FAILURE: i32 = 1;

#[test]
fn read_commands_on_a_mistyped_db_say_none_exists_exit_1_and_create_nothing() {
    let env = Env::new();
    let typo = env.dir.path().join("rnus.db");
    let typo_arg = typo.to_str().unwrap();
    for args in [
        vec!["runs"],
        vec!["runs", "--json"],
        vec!["runs", "show", "r1"],
        vec!["resume", "r1", "--answer", "x"],
        vec!["approve", "r1"],
        vec!["decline", "r1"],
    ] {
        let out = env.cmd().arg("--db").arg(typo_arg).args(&args).output().unwrap();
        assert_eq!(code(&out), FAILURE, "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(
            message.contains(&format!("cannot use the database {typo_arg}: no database exists there")),
            "{args:?}: {message}"
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
    let left: Vec<_> = std::fs::read_dir(env.dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
}

#[test]
fn a_relative_db_is_created_by_run_and_hinted_with_its_absolute_path() {
    let env = Env::new();
    let out = env
        .cmd()
        .args(["--db", "here.db", "run", "Plan my project"])
        .output()
        .unwrap();
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let absolute = env.dir.path().join("here.db");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("askloop --db {} resume ", absolute.display())),
        "{text}"
    );
    assert!(!text.contains("--db here.db"), "{text}");
}

#[test]
fn garbage_and_truncated_databases_fail_with_1_naming_the_file_and_the_cause() {
    let env = Env::new();
    let garbage = env.dir.path().join("garbage.db");
    std::fs::write(&garbage, "not a database at all ".repeat(300)).unwrap();
    for args in [vec!["runs"], vec!["run", "hi"], vec!["resume", "r1", "--answer", "x"]] {
        let out = env.cmd().arg("--db").arg(&garbage).args(&args).output().unwrap();
        assert_eq!(code(&out), FAILURE, "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains(garbage.to_str().unwrap()), "{message}");
        assert!(message.contains("not a SQLite database"), "{message}");
    }

    // A real database cut short, as a failed copy leaves it.
    for i in 0..12 {
        let out = env.run(&["run", &format!("Plan project {i} {}", "x".repeat(3000))]);
        assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    }
    let checkpoint = rusqlite_checkpoint(&env.db());
    assert!(checkpoint > 16384, "{checkpoint}");
    let cut = env.dir.path().join("cut.db");
    std::fs::write(&cut, &std::fs::read(env.db()).unwrap()[..8192]).unwrap();
    let out = env.cmd().arg("--db").arg(&cut).args(["runs"]).output().unwrap();
    assert_eq!(code(&out), FAILURE, "{}", stderr(&out));
    assert!(stderr(&out).contains("damaged SQLite database"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(" at line "), "{}", stderr(&out));
}

/// Folds the WAL into the database file and returns the file's size.
fn rusqlite_checkpoint(path: &std::path::Path) -> u64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    conn.close().unwrap();
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn a_file_where_a_folder_should_be_fails_with_1() {
    let env = Env::new();
    std::fs::write(env.dir.path().join("file"), "x").unwrap();
    for args in [vec!["run", "hi"], vec!["runs"]] {
        let out = env.cmd().args(["--db", "file/runs.db"]).args(&args).output().unwrap();
        assert_eq!(code(&out), FAILURE, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("a file is in the way"), "{}", stderr(&out));
    }
}

#[test]
fn a_database_in_a_read_only_folder_can_be_listed_and_shown_but_not_resumed() {
    // As the last writer left it (its -wal and -shm files beside it), and
    // closed cleanly (none).
    read_only_folder(false);
    read_only_folder(true);
}

fn read_only_folder(clean: bool) {
    let env = Env::new();
    let out = env.run(&["run", "Plan my project"]);
    assert_eq!(code(&out), SUSPENDED, "{}", stderr(&out));
    let run_id = env.only_run_id();
    if clean {
        // Closed cleanly: no -wal or -shm file is left beside it.
        rusqlite_checkpoint(&env.db());
        assert!(!env.dir.path().join("runs.db-shm").exists());
    }
    make_read_only(&env.db());
    make_read_only(env.dir.path());

    let run = |args: &[&str]| as_unprivileged(&mut env.cmd()).args(args).output().unwrap();
    let listed = run(&["runs"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    assert!(stdout(&listed).contains(&run_id), "{}", stdout(&listed));
    let shown = run(&["runs", "show", &run_id]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(stdout(&shown).contains("What should the project be called?"));
    let resumed = run(&["resume", &run_id, "--answer", "Zed"]);
    assert_eq!(code(&resumed), FAILURE, "{}", stderr(&resumed));
    assert!(stderr(&resumed).contains("read only"), "{}", stderr(&resumed));
    assert!(
        stderr(&resumed).contains(env.db().to_str().unwrap()),
        "{}",
        stderr(&resumed)
    );

    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(env.show(&run_id)["status"], "suspended", "nothing changed");
}

#[test]
fn a_read_only_database_file_in_a_writable_folder_can_be_listed() {
    let env = Env::new();
    env.run(&["run", "Plan my project"]);
    let run_id = env.only_run_id();
    make_read_only(&env.db());
    let out = as_unprivileged(&mut env.cmd())
        .args(["runs", "show", &run_id, "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// A full disk, for real: a tiny tmpfs. Only root can mount one; elsewhere
/// the mapping of SQLite's "disk full" is proven by askloop-store's unit
/// tests.
#[test]
fn a_full_disk_fails_with_1_saying_disk_full() {
    if !running_as_root() {
        eprintln!("not root: cannot mount a small tmpfs; the disk-full mapping is unit-tested in askloop-store");
        return;
    }
    let env = Env::new();
    let mount_point = env.dir.path().join("small");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=160k", "tmpfs"])
        .arg(&mount_point)
        .status()
        .unwrap();
    assert!(mounted.success(), "root could not mount a tmpfs");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mount_point.clone());
    let db = mount_point.join("runs.db");
    let mut last = None;
    for i in 0..200 {
        let out = env
            .cmd()
            .arg("--db")
            .arg(&db)
            .args(["run", &format!("Plan project {i}: {}", "words ".repeat(2000))])
            .output()
            .unwrap();
        if code(&out) != SUSPENDED {
            last = Some(out);
            break;
        }
    }
    let out = last.expect("160 KiB filled up");
    assert_eq!(code(&out), FAILURE, "{}", stderr(&out));
    let message = stderr(&out);
    assert!(message.contains("disk full"), "{message}");
    assert!(message.contains(db.to_str().unwrap()), "{message}");
}
