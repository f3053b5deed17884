//! Kill -9 during each busy stage, recover, resume, and compare with an uninterrupted
//! run of the same recipe and seed, event for event (timestamps, durations, attempt
//! numbers and repair notes aside). No corrupted state is admitted at any point.

use crate::ws;
use evolve::selftest::compare::{first_difference, history};
use serde_json::{Value, json};
use ws::{Exp, Spec, kill9, text, wait_for};

fn uninterrupted(spec: &Spec) -> Vec<Value> {
    let e = Exp::new(spec);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
    history(&e.events())
}

/// The same comparison `evolve selftest` makes (`evolve::selftest::compare`).
fn assert_same_history(resumed: &Exp, reference: &[Value]) {
    let got = history(&resumed.events());
    if let Some(difference) = first_difference(&got, reference) {
        panic!("{difference}\nresumed:\n{got:#?}\nreference:\n{reference:#?}");
    }
    resumed.run_ok(&["verify", "ws"]);
}

#[test]
fn killed_during_mutation_repair_then_resume_matches_an_uninterrupted_run() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    kill9(child);
    e.run_ok(&["verify", "ws"]);
    // The interrupted child worktree stops the next run with an instruction.
    let refused = e.evolve(&["run", "ws"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("evolve repair"),
        "{}",
        text(&refused)
    );
    let repaired = e.run_ok(&["repair", "ws"]);
    assert!(
        text(&repaired).contains("removed clean stale worktree gen-1"),
        "{}",
        text(&repaired)
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    assert_same_history(&e, &reference);
}

#[test]
fn an_edited_interrupted_worktree_is_preserved_by_repair() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        generations: 1,
        ..Spec::default()
    };
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    kill9(child);
    std::fs::write(e.ws.join("runs/worktrees/gen-1/target/value.txt"), "0.77\n").unwrap();
    let repaired = e.run_ok(&["repair", "ws"]);
    assert!(
        text(&repaired).contains("moved edited worktree gen-1"),
        "{}",
        text(&repaired)
    );
    let kept =
        std::fs::read_to_string(e.ws.join("runs/interrupted/gen-1/target/value.txt")).unwrap();
    assert_eq!(kept, "0.77\n");
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn killed_during_evaluation_resume_reuses_completed_trials() {
    let spec = Spec {
        tasks: 8,
        verifier_sleep: 0.4,
        generations: 1,
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    let trials =
        e.ws.join("runs/evaluations/candidate/gen-1/attempt-1/out/trials");
    wait_for(120, "a completed candidate trial", || {
        std::fs::read_dir(&trials)
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| t.path().join("result.json").exists())
    });
    kill9(child);
    e.run_ok(&["verify", "ws"]);
    // The generation is committed and tagged but has no certified evaluation: the
    // next run evaluates it (no repair needed: no worktree is left).
    let log = e.log();
    assert_eq!(
        log.iter()
            .find(|r| r["genid"] == "1")
            .map(|r| r["status"].clone()),
        Some(json!("committed")),
        "{log:#?}"
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    let repairs: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|e| e["type"] == "repair" && e["genid"] == "1")
        .collect();
    assert_eq!(repairs.len(), 1, "one recorded repair of the reused trials");
    let reused = repairs[0]["body"]["trials"].as_array().unwrap();
    assert!(!reused.is_empty());
    assert!(reused.iter().all(|t| t["from_attempt"] == 1));
    let eval = e
        .events()
        .into_iter()
        .rfind(|e| {
            e["type"] == "evaluation" && e["genid"] == "1" && e["body"]["purpose"] == "candidate"
        })
        .unwrap();
    assert_eq!(eval["body"]["attempt"], 2);
    assert_eq!(eval["body"]["source_attempts"], json!([1]));
    assert_same_history(&e, &reference);
}

#[test]
fn killed_right_after_an_evaluation_event_resumes_at_gate() {
    let spec = Spec {
        gate: (
            ws::component("slow_gate").display().to_string(),
            json!({"sleep_ms": 1500}),
        ),
        generations: 1,
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "the gate to start", || {
        e.ws.join("runs/gen-1/gate/input.json").exists()
    });
    kill9(child);
    let types: Vec<Value> = e
        .events()
        .iter()
        .filter(|x| x["genid"] == "1")
        .map(|x| x["type"].clone())
        .collect();
    assert_eq!(types.last(), Some(&json!("evaluation")), "{types:?}");
    let log = e.log();
    let r = log.iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(r["status"], "pending_gate");
    assert_eq!(
        r["eligible"], false,
        "a generation pending gate is never a parent"
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    let evaluations = e
        .events()
        .iter()
        .filter(|x| {
            x["genid"] == "1" && x["type"] == "evaluation" && x["body"]["purpose"] == "candidate"
        })
        .count();
    assert_eq!(evaluations, 1, "the evaluation is not redone");
    assert_same_history(&e, &reference);
}

#[test]
fn a_second_run_is_refused_while_one_holds_the_lock() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        generations: 1,
        ..Spec::default()
    };
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    let second = e.evolve(&["run", "ws"]).output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", text(&second));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- Signals and a full disk --------------------------------------------------------

/// Live (non-zombie) processes whose command line contains `needle`.
fn procs_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// A `sleep` duration no other process on the machine uses: the trial's own processes
/// are found by it.
fn sleep_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("3{:03}.{nanos:09}", std::process::id() % 1000)
}

/// An experiment whose seed answers at once and whose every child's agent sleeps for
/// `sleep` seconds: gen 1's candidate evaluation is where the signal lands.
fn sleeping_child_experiment(sleep: &str) -> Exp {
    let e = Exp::new(&Spec {
        generations: 1,
        ..Spec::default()
    });
    std::fs::write(
        e.root().join("target/agent.sh"),
        format!(
            "#!/bin/sh\nv=$(cat \"$EVOLVE_AGENT_DIR/value.txt\")\n\
             [ \"$v\" = 0.1 ] || sleep {sleep}\n\
             echo \"$v\" > \"$EVOLVE_APP_DIR/answer.txt\"\n"
        ),
    )
    .unwrap();
    e.init();
    e
}

fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: kill(2) on a pid this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn sigterm_stops_a_run_as_ctrl_c_does_and_takes_its_trial_with_it() {
    let sleep = sleep_token();
    let e = sleeping_child_experiment(&sleep);
    let child = e.spawn_run();
    wait_for(120, "gen 1's agent to start", || {
        !procs_with(&sleep).is_empty()
    });
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    assert!(
        stderr.contains("evolve run ws"),
        "says how to resume: {stderr}"
    );
    wait_for(10, "the trial's processes to go", || {
        procs_with(&sleep).is_empty()
    });
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn sigkill_of_a_run_takes_its_jailed_trial_with_it() {
    let sleep = sleep_token();
    let e = sleeping_child_experiment(&sleep);
    let child = e.spawn_run();
    wait_for(120, "gen 1's agent to start", || {
        !procs_with(&sleep).is_empty()
    });
    kill9(child);
    // The jail's init dies with its parent (bubblewrap's --die-with-parent), and the
    // kernel ends its PID namespace with it.
    wait_for(10, "the trial's processes to go", || {
        procs_with(&sleep).is_empty()
    });
}

/// A task set of one task whose oracle sleeps for `sleep` seconds; `environment/` holds a
/// Dockerfile on the locally built base image, for the docker engine.
fn sleeping_task_set(root: &std::path::Path, sleep: &str) -> std::path::PathBuf {
    let task = root.join("tasks/sleepy");
    for (path, body) in [
        (
            "environment/Dockerfile",
            "FROM evolve-harbor-test-base:1\nWORKDIR /app\n".to_string(),
        ),
        ("task.toml", "version = \"1.0\"\n".to_string()),
        ("instruction.md", "Sleep.\n".to_string()),
        ("solution/solve.sh", format!("#!/bin/sh\nsleep {sleep}\n")),
        (
            "tests/test.sh",
            "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n".to_string(),
        ),
    ] {
        let p = task.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    root.join("tasks")
}

fn spawn_tasks_run(
    root: &std::path::Path,
    tasks: &std::path::Path,
    engine: &str,
) -> std::process::Child {
    crate::cmd::evolve(["tasks", "run"])
        .arg(tasks)
        .args(["--engine", engine, "--agent", "oracle", "--out"])
        .arg(root.join(format!("out-{engine}")))
        .spawn()
}

#[test]
fn sighup_of_tasks_run_on_the_local_engine_removes_its_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let sleep = sleep_token();
    let tasks = sleeping_task_set(tmp.path(), &sleep);
    let child = spawn_tasks_run(tmp.path(), &tasks, "local");
    wait_for(60, "the oracle to start", || !procs_with(&sleep).is_empty());
    signal(&child, libc::SIGHUP);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(129), "{stderr}");
    assert!(stderr.contains("stopped by SIGHUP"), "{stderr}");
    assert!(procs_with(&sleep).is_empty(), "removed before the exit");
}

/// Whether the Docker tests can run: a daemon and the offline base image. Outside CI a
/// missing daemon skips (with the reason); under CI=true it fails.
fn docker_ready() -> bool {
    let ci = ws::ci();
    let up = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !up {
        assert!(
            !ci,
            "CI=true but `docker info` fails: the Docker tests are required in CI"
        );
        eprintln!("SKIP: Docker daemon not available (`docker info` failed)");
        return false;
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../evaluator-harbor/testdata/build-base-image.sh"
    );
    let built = std::process::Command::new("bash")
        .arg(script)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        built || !ci,
        "CI=true but the base image could not be built"
    );
    built
}

/// The ids of the containers whose trial is `sleepy` and whose oracle runs `sleep`.
fn sleepy_containers(sleep: &str) -> Vec<String> {
    let ps = std::process::Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--no-trunc",
            "--filter",
            "label=dev.evolve.trial",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&ps.stdout)
        .split_whitespace()
        .filter(|id| {
            let top = std::process::Command::new("docker")
                .args(["top", id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&top.stdout).contains(sleep)
        })
        .map(String::from)
        .collect()
}

#[test]
fn docker_trials_go_with_a_sigterm_and_after_a_sigkill() {
    if !docker_ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sleep = sleep_token();
    let tasks = sleeping_task_set(tmp.path(), &sleep);

    // SIGTERM: the container is removed before `evolve` exits.
    let child = spawn_tasks_run(tmp.path(), &tasks, "docker");
    wait_for(120, "the oracle's container", || {
        !sleepy_containers(&sleep).is_empty()
    });
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out));
    assert_eq!(
        sleepy_containers(&sleep),
        Vec::<String>::new(),
        "removed on SIGTERM"
    );

    // SIGKILL cannot be handled: the container outlives `evolve`, and the next docker
    // engine to connect removes it, because its owner is gone.
    let child = spawn_tasks_run(tmp.path(), &tasks, "docker");
    wait_for(120, "the oracle's container", || {
        !sleepy_containers(&sleep).is_empty()
    });
    kill9(child);
    let left = sleepy_containers(&sleep);
    assert!(!left.is_empty(), "nothing to reap: the test proves nothing");
    let quick = tempfile::tempdir().unwrap();
    crate::cmd::evolve(["tasks", "run"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../evaluator-harbor/testdata/tasks"
        ))
        .args(["--engine", "docker", "--agent", "oracle", "--out"])
        .arg(quick.path().join("out"))
        .ok();
    assert_eq!(
        sleepy_containers(&sleep),
        Vec::<String>::new(),
        "the orphan was reaped"
    );
}

/// A tmpfs of `mib` MiB mounted at a new directory, unmounted on drop. Root only; outside
/// CI a machine that cannot mount skips.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        let ci = ws::ci();
        assert!(
            ok || !ci,
            "CI=true but a tmpfs cannot be mounted (the disk-full tests need root)"
        );
        if !ok {
            eprintln!("SKIP: cannot mount a tmpfs (not root?)");
        }
        ok.then_some(SmallDisk { dir })
    }

    fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Fill what is left of the disk.
    fn fill(&self) {
        let _ = std::process::Command::new("dd")
            .args(["if=/dev/zero", "bs=64k"])
            .arg(format!("of={}", self.path().join("filler").display()))
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_disk_is_named_as_such_not_taken_for_a_held_lock() {
    let Some(disk) = SmallDisk::mount(64) else {
        return;
    };
    let e = Exp::new(&Spec::default());
    e.init();
    // The workspace moves onto the small disk, which is then filled.
    let ws = disk.path().join("ws");
    let cp = std::process::Command::new("cp")
        .args(["-a"])
        .arg(&e.ws)
        .arg(&ws)
        .status()
        .unwrap();
    assert!(cp.success());
    std::fs::remove_file(ws.join(".evolve/run.lock")).ok();
    disk.fill();
    let out = e.evolve(&["run"]).arg(&ws).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("the disk is full (ENOSPC"), "{stderr}");
    assert!(!stderr.contains("one run per workspace"), "{stderr}");
}

#[test]
fn trials_on_a_full_disk_say_so_in_the_evaluation() {
    let Some(disk) = SmallDisk::mount(8) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let tasks = sleeping_task_set(tmp.path(), "0");
    disk.fill();
    let out = crate::cmd::evolve(["tasks", "run"])
        .arg(&tasks)
        .args(["--engine", "local", "--agent", "oracle", "--json", "--out"])
        .arg(disk.path().join("out"))
        .run();
    let all = text(&out);
    assert_ne!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("No space left on device"), "{all}");
    assert!(all.contains("the disk is full (ENOSPC"), "{all}");
}
