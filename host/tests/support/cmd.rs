//! The one way a test runs the `evolve` binary. [`evolve`] starts a command with the
//! shared component cache and no stdin; [`Evolve::ok`] and [`Evolve::code`] check how it
//! ended and, when it did not end so, fail with the command line, its directory, its exit
//! status, stdout and stderr, so a red test says what was run and what it printed.

use serde_json::Value;
use std::ffi::OsStr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// `evolve ARGS`, to be configured and run.
pub struct Evolve {
    cmd: Command,
    shown: Vec<String>,
    cwd: Option<PathBuf>,
}

pub fn evolve<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Evolve {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evolve"));
    cmd.env("EVOLVE_CACHE_DIR", super::ws::cache_dir())
        .stdin(Stdio::null());
    Evolve {
        cmd,
        shown: vec!["evolve".into()],
        cwd: None,
    }
    .args(args)
}

impl Evolve {
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        for a in args {
            self.shown.push(a.as_ref().to_string_lossy().into_owned());
            self.cmd.arg(a);
        }
        self
    }

    pub fn arg(self, a: impl AsRef<OsStr>) -> Self {
        self.args([a])
    }

    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cmd.current_dir(dir.as_ref());
        self.cwd = Some(dir.as_ref().to_path_buf());
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Keys go to `dir` (`EVOLVE_KEY_DIR`), never to the user's key store.
    pub fn keys(self, dir: impl AsRef<Path>) -> Self {
        self.env("EVOLVE_KEY_DIR", dir.as_ref())
    }

    /// The configured command, for a test that spawns it itself.
    pub fn command(self) -> Command {
        self.cmd
    }

    /// Start it with stdout and stderr piped.
    pub fn spawn(mut self) -> Child {
        self.cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.shown.join(" ")))
    }

    /// Run it to the end, however it ends.
    pub fn run(mut self) -> Ran {
        let output = self
            .cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.shown.join(" ")));
        Ran {
            output,
            shown: self.shown,
            cwd: self.cwd,
        }
    }

    /// Run it; it must succeed.
    pub fn ok(self) -> Ran {
        let ran = self.run();
        assert!(ran.status.success(), "{}", ran.report("to succeed"));
        ran
    }

    /// Run it; it must exit with `code`.
    pub fn code(self, code: i32) -> Ran {
        let ran = self.run();
        assert_eq!(
            ran.status.code(),
            Some(code),
            "{}",
            ran.report(&format!("to exit with {code}"))
        );
        ran
    }
}

/// For what the builder does not cover (piped stdio, `status()`), the `Command` itself.
impl Deref for Evolve {
    type Target = Command;
    fn deref(&self) -> &Command {
        &self.cmd
    }
}

impl DerefMut for Evolve {
    fn deref_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }
}

/// A finished `evolve` command: its [`Output`], and what is needed to report it.
#[derive(Debug)]
pub struct Ran {
    pub output: Output,
    shown: Vec<String>,
    cwd: Option<PathBuf>,
}

impl Deref for Ran {
    type Target = Output;
    fn deref(&self) -> &Output {
        &self.output
    }
}

impl Ran {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Its stdout as JSON (failing with the report when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("{}", self.report(&format!("to print JSON ({e})"))))
    }

    /// What was run, where, how it ended and what it printed; `expected` says what the
    /// test wanted.
    pub fn report(&self, expected: &str) -> String {
        format!(
            "expected `{}` {expected}\ndirectory: {}\nstatus: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.shown.join(" "),
            self.cwd
                .as_ref()
                .map_or("(the test's own)".into(), |d| d.display().to_string()),
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }
}

#[test]
fn a_failed_command_is_reported_with_what_was_run_where_and_what_it_printed() {
    let dir = tempfile::tempdir().unwrap();
    let ran = evolve(["frobnicate", "--now"]).cwd(dir.path()).run();
    let report = ran.report("to succeed");
    assert!(
        report.starts_with("expected `evolve frobnicate --now` to succeed\n"),
        "{report}"
    );
    assert!(
        report.contains(&format!("directory: {}\n", dir.path().display())),
        "{report}"
    );
    assert!(report.contains("status: exit status: 2"), "{report}");
    let stderr = report.split("--- stderr\n").nth(1).unwrap_or("");
    assert!(stderr.contains("frobnicate"), "{report}");
    let panic = std::panic::catch_unwind(|| evolve(["frobnicate"]).ok()).unwrap_err();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("expected `evolve frobnicate` to succeed"),
        "{message}"
    );
}
