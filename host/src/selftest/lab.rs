//! The campaign's laboratory: a temporary directory holding the embedded hostile
//! components, one private key directory, workspace templates (built once per fixture
//! and copied for every trial), and a runner for the current `evolve` executable.

use serde_json::{Value, json};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

include!(concat!(env!("OUT_DIR"), "/embedded_selftest.rs"));

/// Longest any single `evolve` command of the campaign may take before it is killed and
/// the trial fails (a hang is itself a broken invariant: a run must end).
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(300);

/// Which gate the fixture's recipe binds.
#[derive(Debug, Clone, PartialEq)]
pub enum GateSpec {
    /// The library's `gate/hillclimb`.
    Hillclimb,
    /// The embedded `slow_gate`: busy-waits, then keeps improvements.
    Slow { sleep_ms: u64 },
}

/// One experiment fixture: a target whose agent answers the number in
/// `target/value.txt`, tasks whose verifier rewards exactly that number, and a recipe
/// binding the embedded hostile mutate.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub tasks: usize,
    /// Seconds each verifier sleeps (a slow evaluation to kill).
    pub verifier_sleep_s: f64,
    /// The `selftest_mutate` configuration.
    pub mutate: Value,
    pub mutate_timeout_s: f64,
    pub mutate_memory_mib: Option<u32>,
    /// The mutate binding's `disk_mib` (its writable grants' quota), if not the default.
    pub mutate_disk_mib: Option<u32>,
    pub gate: GateSpec,
    pub surface: Vec<String>,
    pub generations: u32,
    /// A Rhai script for select (`operator: script`) instead of select/greedy, and for
    /// record instead of record/notes: written as `operators/<stage>/selftest.rhai`.
    pub select_script: Option<&'static str>,
    pub record_script: Option<&'static str>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            tasks: 4,
            verifier_sleep_s: 0.0,
            mutate: json!({"action": "climb"}),
            mutate_timeout_s: 60.0,
            mutate_memory_mib: None,
            mutate_disk_mib: None,
            gate: GateSpec::Hillclimb,
            surface: vec!["target/value.txt".into()],
            generations: 1,
            select_script: None,
            record_script: None,
        }
    }
}

impl Spec {
    /// A key naming the fixture, for the template cache.
    fn key(&self) -> String {
        format!("{self:?}")
    }
}

/// What an uninterrupted run of a fixture produced.
#[derive(Debug, Clone)]
pub struct Reference {
    pub history: Vec<Value>,
    pub champion: Option<(String, f64)>,
}

/// One trial's own copy of a workspace: `dir/ws`.
pub struct Trial {
    pub dir: PathBuf,
    pub ws: PathBuf,
}

/// The result of one `evolve` command.
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// How the command ended, in words: `exit 2`, or `killed by a signal`.
    pub fn exit(&self) -> String {
        match self.code {
            Some(code) => format!("exit {code}"),
            None => "killed by a signal".into(),
        }
    }

    /// The output's last lines, for a failure reason.
    pub fn tail(&self) -> String {
        let all = format!("{}{}", self.stdout, self.stderr);
        let lines: Vec<&str> = all.lines().collect();
        lines[lines.len().saturating_sub(6)..].join(" | ")
    }
}

pub struct Lab {
    root: PathBuf,
    _tmp: tempfile::TempDir,
    exe: PathBuf,
    keys: PathBuf,
    components: PathBuf,
    templates: RefCell<HashMap<String, PathBuf>>,
    finished: RefCell<HashMap<String, PathBuf>>,
    references: RefCell<HashMap<String, Reference>>,
    counter: Cell<u64>,
    listener: std::cell::OnceCell<std::net::TcpListener>,
    /// Trial directories not yet swept.
    trials: RefCell<Vec<PathBuf>>,
    /// Time spent building templates and reference runs, which is not a trial's own.
    setup: Cell<Duration>,
}

impl Lab {
    /// A fresh laboratory under the system's temporary directory.
    pub fn new() -> Result<Lab, String> {
        let tmp = tempfile::Builder::new()
            .prefix("evolve-selftest-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find the running evolve executable: {e}"))?;
        let root = tmp.path().to_path_buf();
        let components = root.join("components");
        std::fs::create_dir_all(&components).map_err(|e| io("create", &components, e))?;
        for (name, bytes) in SELFTEST_COMPONENTS {
            let path = components.join(format!("{name}.wasm"));
            std::fs::write(&path, bytes).map_err(|e| io("write", &path, e))?;
        }
        Ok(Lab {
            keys: root.join("keys"),
            root,
            _tmp: tmp,
            exe,
            components,
            templates: RefCell::default(),
            finished: RefCell::default(),
            references: RefCell::default(),
            counter: Cell::new(0),
            listener: std::cell::OnceCell::new(),
            trials: RefCell::default(),
            setup: Cell::new(Duration::ZERO),
        })
    }

    /// The lab's own directory: every trial's workspace lives under it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The key directory every workspace of the lab signs with (`EVOLVE_KEY_DIR`).
    pub fn keys(&self) -> &Path {
        &self.keys
    }

    fn fresh_dir(&self, kind: &str) -> Result<PathBuf, String> {
        let n = self.counter.get() + 1;
        self.counter.set(n);
        let dir = self.root.join(format!("{kind}-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        Ok(dir)
    }

    /// An `evolve` command on the current executable, in `cwd`, with the lab's key
    /// directory (the caller's compile cache is inherited).
    pub fn command(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.args(args)
            .current_dir(cwd)
            .env("EVOLVE_KEY_DIR", &self.keys)
            .stdin(Stdio::null());
        c
    }

    /// Start `evolve args` in `cwd`, its stdout and stderr going to files in `cwd`
    /// (files, not pipes: a killed or chatty run can never block on a full pipe).
    fn start(&self, cwd: &Path, args: &[&str]) -> Result<(Child, PathBuf, PathBuf), String> {
        let n = self.counter.get() + 1;
        self.counter.set(n);
        let out = cwd.join(format!("evolve-{n}.out"));
        let err = cwd.join(format!("evolve-{n}.err"));
        let stdout = std::fs::File::create(&out).map_err(|e| io("create", &out, e))?;
        let stderr = std::fs::File::create(&err).map_err(|e| io("create", &err, e))?;
        let child = self
            .command(cwd, args)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        Ok((child, out, err))
    }

    /// Start `evolve args` in `cwd` and return at once.
    pub fn spawn(&self, cwd: &Path, args: &[&str]) -> Result<Child, String> {
        self.start(cwd, args).map(|(child, _, _)| child)
    }

    /// Run `evolve args` in `cwd` to completion (killed after [`COMMAND_DEADLINE`]).
    pub fn run(&self, cwd: &Path, args: &[&str]) -> Result<Out, String> {
        let (mut child, out, err) = self.start(cwd, args)?;
        let code = wait(&mut child, COMMAND_DEADLINE)
            .map_err(|e| format!("`evolve {}`: {e}", args.join(" ")))?;
        Ok(Out {
            code,
            stdout: std::fs::read_to_string(&out).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err).unwrap_or_default(),
        })
    }

    /// Run `evolve args` and require exit 0.
    pub fn run_ok(&self, cwd: &Path, args: &[&str]) -> Result<Out, String> {
        let out = self.run(cwd, args)?;
        if out.code != Some(0) {
            return Err(format!(
                "`evolve {}` ended with {}: {}",
                args.join(" "),
                out.exit(),
                out.tail()
            ));
        }
        Ok(out)
    }

    /// A trial's own copy of the fixture's freshly initialized workspace.
    pub fn workspace(&self, spec: &Spec) -> Result<Trial, String> {
        let template = self.template(spec)?;
        self.copy_of(&template, "trial")
    }

    /// A trial's own copy of the fixture's workspace after an uninterrupted run.
    pub fn finished(&self, spec: &Spec) -> Result<Trial, String> {
        let key = spec.key();
        let known = self.finished.borrow().get(&key).cloned();
        let dir = match known {
            Some(dir) => dir,
            None => {
                let template = self.template(spec)?;
                let start = Instant::now();
                let t = self.copy_of(&template, "template")?;
                self.run_ok(&t.dir, &["run", "ws", "--quiet"])?;
                self.finished.borrow_mut().insert(key, t.dir.clone());
                self.setup.set(self.setup.get() + start.elapsed());
                t.dir
            }
        };
        self.copy_of(&dir, "trial")
    }

    /// The uninterrupted run of `spec`: its history and champion (computed once).
    pub fn reference(&self, spec: &Spec) -> Result<Reference, String> {
        let key = spec.key();
        if let Some(r) = self.references.borrow().get(&key) {
            return Ok(r.clone());
        }
        let t = self.finished(spec)?;
        let start = Instant::now();
        let r = Reference {
            history: super::compare::history(&events(&t.ws)?),
            champion: verify(self, &t)?.champion,
        };
        self.setup.set(self.setup.get() + start.elapsed());
        self.references.borrow_mut().insert(key, r.clone());
        Ok(r)
    }

    fn template(&self, spec: &Spec) -> Result<PathBuf, String> {
        let key = spec.key();
        if let Some(dir) = self.templates.borrow().get(&key) {
            return Ok(dir.clone());
        }
        let start = Instant::now();
        let dir = self.fresh_dir("template")?;
        write_fixture(&dir, spec, &self.components)?;
        self.run_ok(&dir, &["init", "ws", "--recipe", "recipe.yaml"])?;
        self.templates.borrow_mut().insert(key, dir.clone());
        self.setup.set(self.setup.get() + start.elapsed());
        Ok(dir)
    }

    /// A copy of `template`'s workspace in a fresh directory; a `"trial"` copy is
    /// removed by the next [`Lab::sweep`].
    fn copy_of(&self, template: &Path, kind: &str) -> Result<Trial, String> {
        let dir = self.fresh_dir(kind)?;
        let ws = dir.join("ws");
        if kind == "trial" {
            self.trials.borrow_mut().push(dir.clone());
        }
        copy_tree(&template.join("ws"), &ws)?;
        Ok(Trial { dir, ws })
    }

    /// A TCP listener on 127.0.0.1 for the whole campaign, never accepting by itself:
    /// an operator that reached it would leave a connection in its backlog.
    pub fn listener(&self) -> Result<&std::net::TcpListener, String> {
        if let Some(l) = self.listener.get() {
            return Ok(l);
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
        Ok(self.listener.get_or_init(|| l))
    }

    /// Total time spent so far building templates and reference runs.
    pub fn setup_time(&self) -> Duration {
        self.setup.get()
    }

    /// Remove the directories of finished trials (templates stay), so a long campaign
    /// does not fill the disk.
    pub fn sweep(&self) {
        for dir in self.trials.borrow_mut().drain(..) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("cannot {what} {}: {e}", path.display())
}

/// Wait for `child` at most `deadline`; kill it (SIGKILL) and fail after that.
pub fn wait(child: &mut Child, deadline: Duration) -> Result<Option<i32>, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.code()),
            Ok(None) if start.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("did not finish within {} s", deadline.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("cannot wait for the process: {e}")),
        }
    }
}

/// The archive's events, parsed (a torn or unparsable line is an error).
pub fn events(ws: &Path) -> Result<Vec<Value>, String> {
    let path = ws.join(".evolve/archive.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| io("read", &path, e))?;
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{} line {}: not JSON: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Copy a directory tree: files with their modes, symlinks as symlinks.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| io("create", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| io("read", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io("read", from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| io("stat", &src, e))?;
        if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| io("read link", &src, e))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| io("link", &dst, e))?;
        } else if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| io("copy", &src, e))?;
        }
    }
    Ok(())
}

fn write_file(path: &Path, body: &str, executable: bool) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    }
    std::fs::write(path, body).map_err(|e| io("write", path, e))?;
    let mode = if executable { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io("chmod", path, e))
}

/// Task names of the fixture: `canary-NN`. Which of them are gate or sealed tasks is
/// decided by `evolve init`; those names must never reach an operator.
pub fn task_name(i: usize) -> String {
    format!("canary-{i:02}")
}

fn write_fixture(dir: &Path, spec: &Spec, components: &Path) -> Result<(), String> {
    let agent = "#!/bin/sh\ncat \"$EVOLVE_AGENT_DIR/value.txt\" > \"$EVOLVE_APP_DIR/answer.txt\"\n";
    write_file(&dir.join("target/agent.sh"), agent, true)?;
    write_file(
        &dir.join("target/agent.toml"),
        "command = [\"./agent.sh\"]\n",
        false,
    )?;
    write_file(&dir.join("target/value.txt"), "0.1\n", false)?;
    let sleep = if spec.verifier_sleep_s > 0.0 {
        format!("sleep {}\n", spec.verifier_sleep_s)
    } else {
        String::new()
    };
    for i in 0..spec.tasks {
        let t = dir.join("tasks").join(task_name(i));
        write_file(
            &t.join("environment/Dockerfile"),
            "FROM scratch\nWORKDIR /app\n",
            false,
        )?;
        write_file(
            &t.join("task.toml"),
            "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n",
            false,
        )?;
        write_file(
            &t.join("instruction.md"),
            "Write your number to /app/answer.txt.\n",
            false,
        )?;
        write_file(
            &t.join("tests/test.sh"),
            &format!("#!/bin/sh\n{sleep}cat /app/answer.txt > /logs/verifier/reward.txt\n"),
            true,
        )?;
        write_file(
            &t.join("solution/solve.sh"),
            "#!/bin/sh\necho 1 > /app/answer.txt\n",
            true,
        )?;
    }
    for (stage, script) in [
        ("select", spec.select_script),
        ("record", spec.record_script),
    ] {
        if let Some(text) = script {
            write_file(
                &dir.join(format!("operators/{stage}/selftest.rhai")),
                text,
                false,
            )?;
        }
    }
    write_file(&dir.join("recipe.yaml"), &recipe(spec, components), false)
}

fn recipe(spec: &Spec, components: &Path) -> String {
    let quoted = |p: PathBuf| Value::String(p.display().to_string()).to_string();
    let mutate_op = quoted(components.join("selftest_mutate.wasm"));
    let memory = spec
        .mutate_memory_mib
        .map_or(String::new(), |m| format!(", memory_mib: {m}"))
        + &spec
            .mutate_disk_mib
            .map_or(String::new(), |m| format!(", disk_mib: {m}"));
    let (gate_op, gate_cfg) = match &spec.gate {
        GateSpec::Hillclimb => ("hillclimb".to_string(), json!({"strict": true})),
        GateSpec::Slow { sleep_ms } => (
            quoted(components.join("slow_gate.wasm")),
            json!({ "sleep_ms": sleep_ms }),
        ),
    };
    let script_or = |script: Option<&str>, stage: &str, builtin: &str| match script {
        Some(_) => {
            format!("{{operator: script, config: {{source: operators/{stage}/selftest.rhai}}}}")
        }
        None => format!("{{operator: {builtin}}}"),
    };
    let select = script_or(spec.select_script, "select", "greedy");
    let record = script_or(spec.record_script, "record", "notes");
    let surface: Vec<String> = spec
        .surface
        .iter()
        .map(|s| Value::String(s.clone()).to_string())
        .collect();
    format!(
        "experiment: {{name: selftest, max_generations: {gens}, children_per_gen: 1, seed: 3, budget_usd: 0}}\n\
         target: {{path: target}}\n\
         surface: {{include: [{surface}]}}\n\
         operators:\n\
         \x20 select: {select}\n\
         \x20 rollout: {{operator: noop}}\n\
         \x20 mutate: {{operator: {mutate_op}, timeout_s: {timeout}{memory}, config: {mutate}}}\n\
         \x20 gate: {{operator: {gate_op}, timeout_s: 60, config: {gate_cfg}}}\n\
         \x20 record: {record}\n\
         evaluator: {{engine: local, dataset: tasks, splits: {{train: 0.25, gate: 0.5, sealed: 0.25, seed: 0}}, n_concurrent: 1}}\n",
        gens = spec.generations,
        surface = surface.join(", "),
        timeout = spec.mutate_timeout_s,
        mutate = spec.mutate,
    )
}

/// What `evolve verify --json` reported.
pub struct Verified {
    pub ok: bool,
    pub kinds: Vec<String>,
    pub champion: Option<(String, f64)>,
}

/// Run `evolve verify ws --json`; exit 0 or 1 with a report, anything else is an error.
pub fn verify(lab: &Lab, t: &Trial) -> Result<Verified, String> {
    let out = lab.run(&t.dir, &["verify", "ws", "--json"])?;
    let report: Value = serde_json::from_str(&out.stdout).map_err(|e| {
        format!(
            "`evolve verify --json` printed no JSON ({e}): {}",
            out.tail()
        )
    })?;
    let ok = report["ok"] == true;
    if out.code != Some(if ok { 0 } else { 1 }) {
        return Err(format!(
            "`evolve verify` ended with {} with ok = {ok}",
            out.exit()
        ));
    }
    let mut kinds: Vec<String> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str().map(str::to_string))
        .collect();
    if report["repository_findings"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        kinds.push("repository".into());
    }
    let champion = report["champion"]["genid"].as_str().map(|g| {
        (
            g.to_string(),
            report["champion"]["score"].as_f64().unwrap_or(f64::NAN),
        )
    });
    Ok(Verified {
        ok,
        kinds,
        champion,
    })
}
