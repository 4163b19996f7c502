//! A real SMTP server for tests that mail: Python's aiosmtpd (Debian's
//! `python3-aiosmtpd`) on a loopback port, keeping each message it receives
//! in a maildir, and Python's `email` package to read a message back.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The Python with Debian's aiosmtpd (a pyenv `python3` earlier on PATH
/// may lack it).
pub const PYTHON: &str = "/usr/bin/python3";

/// Why an SMTP server cannot be started here, if it cannot.
pub fn missing_smtp() -> Option<String> {
    let ok = Command::new(PYTHON)
        .args(["-c", "import aiosmtpd"])
        .output()
        .is_ok_and(|out| out.status.success());
    (!ok).then(|| format!("{PYTHON} cannot import aiosmtpd (apt-get install -y python3-aiosmtpd)"))
}

/// A loopback port free right now.
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("a bound address").port()
}

/// A real SMTP server keeping what it receives in a maildir; killed when
/// dropped.
#[derive(Debug)]
pub struct Smtp {
    child: Child,
}

impl Smtp {
    /// Starts one on `127.0.0.1:port`, keeping messages in `maildir`, and
    /// waits until it accepts connections.
    ///
    /// # Panics
    /// When it cannot be started or does not listen within 60 s.
    pub fn start(port: u16, maildir: &Path) -> Smtp {
        let smtp = Smtp {
            child: Command::new(PYTHON)
                .args(["-m", "aiosmtpd", "-n", "-c", "aiosmtpd.handlers.Mailbox", "-l"])
                .arg(format!("127.0.0.1:{port}"))
                .arg(maildir)
                .stdin(Stdio::null())
                .spawn()
                .expect("aiosmtpd starts"),
        };
        // Ready once it accepts connections (60 s at most: a hang guard;
        // dropping `smtp` on the panic ends the process).
        for _ in 0..600 {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return smtp;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("aiosmtpd did not listen on port {port}");
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The messages in a maildir, oldest first.
pub fn messages(maildir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = ["new", "cur"]
        .iter()
        .filter_map(|sub| std::fs::read_dir(maildir.join(sub)).ok())
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    found.sort();
    found
}

/// Waits (60 s at most: a hang guard) until the maildir holds at least
/// `count` messages; returns them all.
///
/// # Panics
/// When they do not arrive in time.
pub fn wait_for_messages(maildir: &Path, count: usize) -> Vec<PathBuf> {
    for _ in 0..600 {
        let found = messages(maildir);
        if found.len() >= count {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{count} message(s) did not arrive in {}: {} did",
        maildir.display(),
        messages(maildir).len()
    );
}

/// A message read by Python's `email` package: `headers` (name, value
/// pairs), `subject`, `to`, `messageId`, and the `text` and `html` bodies.
///
/// # Panics
/// When Python cannot read it.
pub fn parse(message: &Path) -> Value {
    const READ: &str = r#"
import email, email.policy, json, sys
with open(sys.argv[1], 'rb') as f:
    m = email.message_from_binary_file(f, policy=email.policy.default)
print(json.dumps({
    'headers': [[k, str(v)] for k, v in m.items()],
    'subject': str(m['subject']),
    'to': str(m['to']),
    'messageId': str(m['message-id']),
    'text': m.get_body(('plain',)).get_content(),
    'html': m.get_body(('html',)).get_content(),
}))
"#;
    let out = Command::new(PYTHON)
        .args(["-c", READ])
        .arg(message)
        .output()
        .expect("python reads the message");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("python printed JSON")
}
