//! The command line as a user meets it, through the real binary: exit codes (0 success,
//! 1 findings, 2 usage errors, 130 interrupted), errors as `evolve: <what> (<where>)`
//! with a hint, `--json` errors, completions, `diff`, `export` + `verify --bundle`, and
//! Ctrl-C during a run: the stage ends `cancelled`, the archive verifies, and the next
//! `evolve run` resumes and completes.

use crate::ws;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Output};
use ws::{Exp, Spec, text, wait_for};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// A workspace-less experiment directory for commands that need none.
fn scratch() -> Exp {
    Exp::new(&Spec::default())
}

#[test]
fn usage_errors_exit_2_in_the_evolve_format_with_a_hint() {
    let e = scratch();
    let out = e.evolve(&["frobnicate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.starts_with("evolve: "), "{err}");
    assert!(err.contains("(command line)"), "{err}");
    assert!(err.contains("hint: "), "{err}");

    let out = e.evolve(&["status", "no-such-workspace"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.starts_with("evolve: cannot open workspace"), "{err}");
    assert!(err.contains("hint: create one with `evolve init"), "{err}");

    let out = e.evolve(&["recipe", "show", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("hint: `evolve recipe list` names them"));
}

#[test]
fn with_json_an_error_is_also_json_on_stdout() {
    let e = scratch();
    let out = e
        .evolve(&["log", "no-such-workspace", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v = stdout_json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["exit_code"], 2);
    assert!(
        v["error"]["what"]
            .as_str()
            .unwrap()
            .starts_with("cannot open workspace")
    );
    assert!(v["error"]["hint"].as_str().is_some());
}

#[test]
fn help_has_examples_and_completions_are_generated() {
    let e = scratch();
    for cmd in ["run", "diff", "export", "verify", "completions"] {
        let out = e.evolve(&[cmd, "--help"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out).contains("Examples:"), "{cmd}: {}", text(&out));
    }
    let out = e.evolve(&["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.contains("_evolve()"), "{script}");
    assert!(script.contains("export"), "every command is completed");
    let out = e.evolve(&["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    let v = stdout_json(
        &e.evolve(&["completions", "zsh", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(v["shell"], "zsh");
    assert!(v["script"].as_str().unwrap().contains("#compdef evolve"));
}

#[test]
fn diff_shows_a_generation_against_its_parent_or_any_other() {
    let e = Exp::new(&Spec {
        generations: 1,
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let v = e.json(&["diff", "1", "-w", "ws", "--json"]);
    assert_eq!(v["against"], "0", "the default is the parent");
    assert_eq!(
        v["files"],
        json!([{"path": "target/value.txt", "change": "modified", "insertions": 1, "deletions": 1}])
    );
    let patch = v["patch"].as_str().unwrap();
    assert!(patch.contains("-0.1"), "{patch}");
    let stat = e.run_ok(&["diff", "1", "--against", "0", "-w", "ws", "--stat"]);
    assert!(
        text(&stat).contains("modified  target/value.txt (+1 -1)"),
        "{}",
        text(&stat)
    );
    let same = e.json(&["diff", "1", "--against", "1", "-w", "ws", "--json"]);
    assert_eq!(same["files"], json!([]));

    e.usage_error(&["diff", "0", "-w", "ws"], "has no parent");
    e.usage_error(&["diff", "7", "-w", "ws"], "not in the archive");
    e.usage_error(&["diff", "1", "--against", "7", "-w", "ws"], "no gen/7 tag");
}

/// A file name chosen to spoof a terminal: the newline would print a fake
/// `modified evaluator/task-set.json` line, the carriage return would send the cursor back
/// to overwrite it with `verify: ok`, and the bidi override (U+202E) would show `fdp.exe`
/// as `exe.pdf`; the quote and the space are what git quotes (or not) in a patch header.
const HOSTILE_NAME: &str =
    "evil \"q\"\nmodified evaluator/task-set.json\rverify: ok \u{202E}fdp.exe";

/// Its content: an escape sequence that would retitle the window and clear the screen, and
/// a line that starts with `++ ` (`+++ ` in the patch, which the old count skipped).
const HOSTILE_CONTENT: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2Jscreen cleared\n++ not a header\n";

/// A gate that keeps every child with a reason (and a stderr line) that would print a line
/// of its own and reverse what follows it.
const HOSTILE_GATE: &str = "fn decide(ctx, child, parent) {\n  print(\"\\u001b[2J\\rverify: ok \\u202Eevil\");\n  #{verdict: \"keep\", reason: \"kept\\nverify: ok \\u202Esdrawkcab\"}\n}\n";

/// Every character of `out` a terminal would act on rather than show (its line breaks
/// aside), and every line that would pass for one the framework printed.
fn spoofing(out: &str) -> Vec<String> {
    let mut found: Vec<String> = out
        .chars()
        .filter(|c| {
            (c.is_control() && *c != '\n')
                || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
        })
        .map(|c| format!("raw {c:?}"))
        .collect();
    for line in out.lines() {
        let l = line.trim_start();
        if l.starts_with("modified evaluator/") || l.starts_with("verify: ok") {
            found.push(format!("forged line {line:?}"));
        }
    }
    found
}

/// Text from the candidate tree and from an operator (a file name with a newline, a
/// carriage return, a quote, a space and a bidi override; a gate reason and operator stderr
/// with the same) reaches `run`, `diff`, `diff --stat`, `show`, `log` and `status` escaped,
/// the file name quoted as git quotes it, and `diff --stat` counts its lines right.
#[test]
fn hostile_names_and_reasons_are_escaped_on_the_terminal() {
    let e = Exp::new(&Spec {
        // Unclaimed: the result check refuses a claimed path with a control character, but
        // the framework takes the candidate's changes from its tree.
        mutate: json!({"action": "write", "path": HOSTILE_NAME, "content": HOSTILE_CONTENT, "claim": false}),
        gate: (
            "script".into(),
            json!({"source": "operators/gate/hostile.rhai"}),
        ),
        surface: vec!["target/**".into()],
        generations: 1,
        ..Spec::default()
    });
    let script = e.root().join("operators/gate/hostile.rhai");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(&script, HOSTILE_GATE).unwrap();
    e.init();
    let run = e.run_ok(&["run", "ws"]);
    let path = format!("target/{HOSTILE_NAME}");

    // The JSON output keeps the real name and content (serde_json escapes them).
    let v = e.json(&["diff", "1", "-w", "ws", "--json"]);
    assert_eq!(
        v["files"],
        json!([{"path": path, "change": "added", "insertions": 2, "deletions": 0}])
    );
    let row = e.log().into_iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(row["verdict"], "keep", "{row}");

    let quoted = "\"target/evil \\\"q\\\"\\nmodified evaluator/task-set.json\\rverify: ok \\342\\200\\256fdp.exe\"";
    let stat = String::from_utf8(e.run_ok(&["diff", "1", "-w", "ws", "--stat"]).stdout).unwrap();
    assert!(
        stat.contains(&format!("  added     {quoted} (+2 -0)\n")),
        "{stat}"
    );
    let patch = String::from_utf8(e.run_ok(&["diff", "1", "-w", "ws"]).stdout).unwrap();
    assert!(
        patch.contains("+\\x1b]0;pwned\\x07\\x1b[2Jscreen cleared\n+++ not a header\n"),
        "{patch}"
    );
    let show = String::from_utf8(e.run_ok(&["show", "1", "-w", "ws"]).stdout).unwrap();
    assert!(
        show.contains("reason=kept\\nverify: ok \\u{202E}sdrawkcab"),
        "{show}"
    );
    assert!(
        show.contains("stderr: \\x1b[2J\\rverify: ok \\u{202E}evil"),
        "{show}"
    );
    let run_err = String::from_utf8(run.stderr).unwrap();
    assert!(
        run_err.contains("gate keep: kept\\nverify: ok \\u{202E}sdrawkcab"),
        "{run_err}"
    );
    let log = String::from_utf8(e.run_ok(&["log", "ws"]).stdout).unwrap();
    let status = String::from_utf8(e.run_ok(&["status", "ws"]).stdout).unwrap();
    for (what, out) in [
        ("run", &run_err),
        ("diff --stat", &stat),
        ("diff", &patch),
        ("show", &show),
        ("log", &log),
        ("status", &status),
    ] {
        let found = spoofing(out);
        assert!(found.is_empty(), "evolve {what}: {found:?} in\n{out}");
    }
}

/// The workspace keeps no working copy; `checkout` writes a generation out, taking its
/// commit from the certified archive row, so a moved tag does not change what it writes.
#[test]
fn checkout_writes_a_generation_from_its_archived_commit_not_its_tag() {
    let e = Exp::new(&Spec {
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let mut top: Vec<String> = std::fs::read_dir(&e.ws)
        .unwrap()
        .map(|d| d.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert_eq!(top, [".evolve", ".git"], "init writes no working copy");
    e.run_ok(&["run", "ws", "--quiet"]);
    let value =
        |dir: &str| std::fs::read_to_string(e.root().join(dir).join("target/value.txt")).unwrap();

    e.run_ok(&["checkout", "0", "seed", "-w", "ws"]);
    assert_eq!(value("seed"), "0.1\n");
    e.run_ok(&["checkout", "1", "one", "-w", "ws"]);
    assert_ne!(value("one"), "0.1\n", "generation 1 mutated the value");
    let champion = e.json(&["checkout", "champion", "best", "-w", "ws", "--json"]);
    let genid = champion["genid"].as_str().unwrap();
    assert_eq!(
        value("best"),
        value(if genid == "0" { "seed" } else { "one" })
    );

    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    std::fs::write(e.ws.join(".git/refs/tags/gen/1"), format!("{gen0}\n")).unwrap();
    e.run_ok(&["checkout", "1", "again", "-w", "ws"]);
    assert_eq!(
        value("again"),
        value("one"),
        "the archive's commit, not the moved tag"
    );

    for (args, says) in [
        (
            vec!["checkout", "1", "one", "-w", "ws"],
            "absent or empty directory",
        ),
        (
            vec!["checkout", "7", "x", "-w", "ws"],
            "not in the certified archive",
        ),
    ] {
        e.usage_error(&args, says);
    }
}

#[test]
fn an_exported_bundle_verifies_without_the_workspace_or_the_key_and_tampering_is_found() {
    let e = Exp::new(&Spec::default());
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let exported = e.json(&["export", "evidence", "-w", "ws", "--json"]);
    assert_eq!(exported["ok"], true);
    assert_eq!(exported["tags"], 3, "gen/0, gen/1, gen/2");
    let out = e
        .evolve(&["export", "evidence", "-w", "ws"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an export never overwrites");

    // Away from the workspace, with an empty key directory: only the bundle is read.
    let bundle = e.root().join("evidence");
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::rename(&e.ws, elsewhere.path().join("moved-ws")).unwrap();
    std::fs::remove_dir_all(&e.keys).unwrap();
    let verify = |extra: &[&str]| {
        let mut args = vec!["verify", "--bundle", bundle.to_str().unwrap()];
        args.extend_from_slice(extra);
        e.evolve(&args)
            .current_dir(elsewhere.path())
            .output()
            .unwrap()
    };
    let ok = verify(&["--json"]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let v = stdout_json(&ok);
    assert_eq!(v["ok"], true);
    assert!(v["champion"]["genid"].is_string());

    // Change one score in the bundle's archive: the signature and the manifest disagree.
    let path = bundle.join("archive.jsonl");
    let original = std::fs::read_to_string(&path).unwrap();
    let line = original
        .lines()
        .position(|l| l.contains("\"type\":\"evaluation\""))
        .unwrap();
    let tampered: Vec<String> = original
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                l.replacen("\"score\":", "\"score\":9", 1)
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_ne!(tampered.join("\n") + "\n", original);
    std::fs::write(&path, tampered.join("\n") + "\n").unwrap();
    let bad = verify(&[]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    let report = text(&bad);
    assert!(report.contains("verify: FAIL"), "{report}");
    assert!(
        report.contains("bundle: archive.jsonl: SHA-256"),
        "the manifest names the changed file: {report}"
    );
    assert!(
        report.contains(&format!("line {}", line + 1)),
        "the archive finding names the line: {report}"
    );
}

fn interrupt(child: &Child) {
    // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
    let r = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0, "SIGINT delivered");
}

/// Interrupt a run once `stage_input` exists; returns the run's output.
fn interrupt_at(e: &Exp, stage_input: &str) -> Output {
    let child = e.spawn_run();
    wait_for(120, stage_input, || e.ws.join(stage_input).exists());
    interrupt(&child);
    child.wait_with_output().unwrap()
}

fn status_events(e: &Exp, genid: &str) -> Vec<Value> {
    e.events()
        .into_iter()
        .filter(|x| x["genid"] == genid && x["type"] == "status")
        .collect()
}

#[test]
fn ctrl_c_during_the_gate_cancels_it_and_the_next_run_resumes_and_completes() {
    let e = Exp::new(&Spec {
        gate: (
            ws::component("slow_gate").display().to_string(),
            json!({"sleep_ms": 8000}),
        ),
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let out = interrupt_at(&e, "runs/gen-1/gate/input.json");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    let err = stderr(&out);
    assert!(err.contains("gate of gen 1 ended `cancelled`"), "{err}");
    assert!(err.contains("evolve run ws"), "says how to resume: {err}");

    e.run_ok(&["verify", "ws"]);
    let statuses = status_events(&e, "1");
    assert_eq!(statuses.len(), 1, "{statuses:#?}");
    assert_eq!(statuses[0]["body"]["status"], "cancelled");
    assert_eq!(statuses[0]["body"]["failure_stage"], "gate");
    let row = e.log().into_iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(row["status"], "cancelled");

    // The resume is told in words, not as a Rust value (`Gate { commit: …, parent:
    // Some("0") }`).
    let resumed = stderr(&e.run_ok(&["run", "ws"]));
    assert!(
        resumed.contains("gen 1: resuming at the gate of commit "),
        "{resumed}"
    );
    assert!(resumed.contains("(parent gen 0)"), "{resumed}");
    for debug in ["Some(", "{ commit", "Gate {"] {
        assert!(!resumed.contains(debug), "{debug} in {resumed}");
    }
    e.run_ok(&["verify", "ws"]);
    let events = e.events();
    let of = |t: &str| {
        events
            .iter()
            .filter(|x| x["genid"] == "1" && x["type"] == t)
            .count()
    };
    assert_eq!(of("evaluation"), 1, "the evaluation is not redone");
    assert_eq!(of("gate"), 1);
    assert_eq!(of("record"), 1);
    let row = e.log().into_iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(
        row["status"], "benchmark_complete",
        "the resume supersedes the cancellation"
    );
    assert!(row["verdict"].is_string());
}

#[test]
fn ctrl_c_during_mutate_discards_the_fork_and_the_next_run_starts_the_child_again() {
    let e = Exp::new(&Spec {
        mutate: json!({"action": "climb", "sleep_ms": 8000}),
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let out = interrupt_at(&e, "runs/gen-1/mutate/input.json");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        !e.ws.join("runs/worktrees/gen-1").exists(),
        "no child worktree is left: no repair is needed"
    );
    e.run_ok(&["verify", "ws"]);
    let statuses = status_events(&e, "1");
    assert_eq!(statuses.len(), 1, "{statuses:#?}");
    assert_eq!(statuses[0]["body"]["status"], "cancelled");
    assert_eq!(statuses[0]["body"]["failure_stage"], "mutate");

    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
    let row = e.log().into_iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(row["status"], "benchmark_complete", "{row:#?}");
    let selects = e.events().iter().filter(|x| x["type"] == "select").count();
    assert_eq!(selects, 1, "the archived select decision is reused");
}

/// A machine that cannot contain a local trial (no bubblewrap) runs the offline demo, whose
/// trials are built-in code only, and says so; an agent of the user's own gets one clear
/// error before anything is made: no workspace, no key, and never an unconfined run.
#[test]
fn without_a_sandbox_the_demo_runs_and_an_own_agent_is_refused_before_anything_is_made() {
    let e = scratch();
    let demo = e
        .evolve(&["demo", "fresh-demo"])
        .env("EVOLVE_LOCAL_NO_BWRAP", "1")
        .output()
        .unwrap();
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo));
    assert!(
        stderr(&demo).contains("bubblewrap is not installed"),
        "{}",
        text(&demo)
    );
    // Every trial says how it ran: on the host, as framework code.
    let results: Vec<String> = walk(&e.root().join("fresh-demo/runs"))
        .into_iter()
        .filter(|p| {
            p.ends_with("result.json") && p.parent().unwrap().parent().unwrap().ends_with("trials")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(!results.is_empty(), "no trial results found");
    for r in &results {
        assert!(r.contains("\"unconfined:framework_code\""), "{r}");
    }
    let keys_before = std::fs::read_dir(&e.keys).map(|d| d.count()).unwrap_or(0);
    // The scratch recipe's target is a command agent of the user's own.
    let init = e
        .evolve(&["init", "fresh-init", "--recipe", "recipe.yaml"])
        .env("EVOLVE_LOCAL_NO_BWRAP", "1")
        .output()
        .unwrap();
    assert_eq!(init.status.code(), Some(2), "{}", text(&init));
    let err = stderr(&init);
    assert!(err.contains("apt-get install bubblewrap"), "{err}");
    assert!(err.contains("unconfined_trials"), "{err}");
    assert!(
        !e.root().join("fresh-init").exists(),
        "init made a workspace"
    );
    let keys = std::fs::read_dir(&e.keys).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        keys, keys_before,
        "a key was made for a workspace that cannot run"
    );
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Processes whose command line starts with `name` (argv[0] as `exec -a` set it).
fn processes_named(name: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).next() == Some(name.as_bytes()))
        })
        .count()
}

/// `kill -9` of evolve in the middle of a trial takes the trial's processes with it: the
/// jail dies with its parent, so an agent with no time limit cannot keep running.
#[test]
fn a_trial_dies_with_a_killed_evolve() {
    let e = scratch();
    let root = e.root();
    let task = root.join("tasks/t");
    for (path, body) in [
        ("environment/Dockerfile", "FROM scratch\n"),
        ("task.toml", "[agent]\ntimeout_sec = 600\n"),
        ("instruction.md", "Wait.\n"),
        (
            "tests/test.sh",
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        ),
    ] {
        std::fs::create_dir_all(task.join(path).parent().unwrap()).unwrap();
        std::fs::write(task.join(path), body).unwrap();
    }
    let name = format!("evolve-orphan-probe-{}", std::process::id());
    let agent = root.join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("run.sh"),
        format!("#!/bin/bash\nexec -a {name} sleep 600\n"),
    )
    .unwrap();
    std::fs::set_permissions(agent.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(agent.join("agent.toml"), "command = [\"./run.sh\"]\n").unwrap();
    let mut child = e
        .evolve(&["tasks", "run", "tasks", "--agent", "agent", "--out", "out"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(60, "the agent to start", || processes_named(&name) == 1);
    child.kill().unwrap(); // SIGKILL: evolve cleans up nothing itself
    child.wait().unwrap();
    wait_for(10, "the agent to die with evolve", || {
        processes_named(&name) == 0
    });
}

/// `status` and `run --dry-run` describe the workspace: after a run past the recipe's
/// limit, status does not read `generations: 3 (max 1)` and the dry run does not
/// estimate the recipe's generation all over again.
#[test]
fn status_and_the_dry_run_describe_the_workspace_not_the_recipe() {
    let e = Exp::new(&Spec {
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let fresh = text(&e.run_ok(&["status", "ws"]));
    assert!(
        fresh.contains("generations: 0 of 1 (`evolve run ws` continues up to gen 1)"),
        "{fresh}"
    );
    e.run_ok(&["run", "ws", "--max-generations", "3", "--quiet"]);

    let status = text(&e.run_ok(&["status", "ws"]));
    assert!(
        status.contains(
            "generations: 3; the recipe's limit (max_generations 1) is reached: \
             `evolve run ws --max-generations N` runs up to gen N"
        ),
        "{status}"
    );
    assert!(!status.contains("(max 1)"), "{status}");
    let v = e.json(&["status", "ws", "--json"]);
    assert_eq!(
        (
            &v["generations"],
            &v["max_generations"],
            &v["limit_reached"]
        ),
        (&json!(3), &json!(1), &json!(true)),
        "{v}"
    );

    let dry = text(&e.run_ok(&["run", "ws", "--dry-run"]));
    assert!(
        dry.contains("0 more generations: the workspace has 3 and runs up to gen 1"),
        "{dry}"
    );
    assert!(
        dry.contains("`evolve run ws --max-generations N` runs up to gen N (a total, not N more)"),
        "{dry}"
    );
    assert!(
        dry.contains("plus 0 genesis and sealed-anchor trial(s)"),
        "{dry}"
    );
    let v = e.json(&["run", "ws", "--dry-run", "--json"]);
    assert_eq!(v["generations"], 0, "{v}");
    assert_eq!(v["candidate_trials"], 0, "{v}");
    assert_eq!(v["genesis_and_anchor_trials"], 0, "{v}");
    assert_eq!(v["generations_in_workspace"], 3, "{v}");

    // --max-generations is a total: 5 runs gens 4 and 5, not five more.
    let more = text(&e.run_ok(&["run", "ws", "--dry-run", "--max-generations", "5"]));
    assert!(
        more.contains("2 generation(s) to run (the workspace has 3; up to gen 5)"),
        "{more}"
    );
    let v = e.json(&["run", "ws", "--dry-run", "--max-generations", "5", "--json"]);
    assert_eq!(
        v["candidate_trials"],
        2 * 2,
        "2 generations × 2 gate tasks: {v}"
    );
}

#[test]
fn the_run_help_says_max_generations_is_a_total() {
    let help = text(&scratch().run_ok(&["run", "--help"]));
    // Its help as one line (clap wraps it to the terminal's width).
    let line = help
        .lines()
        .skip_while(|l| !l.contains("--max-generations <N>"))
        .take(4)
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        line.contains("a total for the workspace, not N more"),
        "{help}"
    );
    assert!(help.contains("--children-per-gen <K>"), "{help}");
}

/// Progress lines show scores as `evolve log` does (four decimals), not as
/// `0.3126966666666667`.
#[test]
fn progress_lines_round_scores() {
    let e = Exp::new(&Spec {
        mutate: json!({"action": "write", "path": "value.txt", "content": "0.3126966666666667\n"}),
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let err = stderr(&e.run_ok(&["run", "ws"]));
    assert!(
        err.contains("gate keep: child score 0.3127 > parent score 0.1000"),
        "{err}"
    );
    assert!(!err.contains("0.3126966666666667"), "{err}");
}

/// `evolve` alone is a request for help, not an error: the help with its list of
/// commands on stdout, exit 0.
#[test]
fn a_bare_evolve_prints_its_help() {
    let out = scratch().evolve(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stderr(&out), "", "nothing on stderr");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Usage: evolve"), "{help}");
    assert!(help.contains("Commands:"), "{help}");
    for command in ["demo", "init", "run", "status", "show", "repair"] {
        assert!(
            help.contains(&format!("\n  {command} ")),
            "{command}: {help}"
        );
    }
    assert!(!help.contains("error:"), "{help}");
    assert!(!help.starts_with("evolve:"), "{help}");
}

#[test]
fn a_missing_argument_is_named_with_an_example() {
    let e = scratch();
    let out = e.usage_error(&["show"], "not provided: <GENID> (command line)");
    assert!(
        stderr(&out).contains("for example `evolve show 3 -w ws`"),
        "{}",
        text(&out)
    );
}

/// A hint that sends the user to `evolve repair` (or `run`, `retry`) names the workspace
/// they gave, quoted for the shell where it needs to be.
#[test]
fn hints_name_the_workspace_the_user_gave() {
    let e = Exp::new(&Spec {
        generations: 1,
        ..Spec::default()
    });
    e.run_ok(&["init", "my ws", "--recipe", "recipe.yaml"]);
    std::fs::create_dir_all(e.root().join("my ws/runs/worktrees/gen-1")).unwrap();
    let out = e.usage_error(&["run", "my ws"], "left child worktree(s) gen-1");
    let err = stderr(&out);
    assert!(err.contains("run `evolve repair 'my ws'`"), "{err}");
    assert!(err.contains("then `evolve run 'my ws'` resumes"), "{err}");
    let out = e.usage_error(&["retry", "0", "-w", "my ws"], "left child worktree(s)");
    assert!(
        stderr(&out).contains("`evolve repair 'my ws'`"),
        "{}",
        text(&out)
    );
    e.run_ok(&["repair", "my ws"]);
    let init = text(&e.run_ok(&["init", "other ws", "--recipe", "recipe.yaml"]));
    assert!(init.contains("next: evolve run 'other ws'"), "{init}");
}

/// The keys of `evolve keys list --json`, by experiment id.
fn listed_keys(e: &Exp) -> Vec<Value> {
    e.json(&["keys", "list", "--json"])["keys"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn key_of<'a>(keys: &'a [Value], workspace: &std::path::Path) -> &'a Value {
    let workspace = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    keys.iter()
        .find(|k| k["workspace"].as_str() == workspace.to_str())
        .unwrap_or_else(|| panic!("no key for {} in {keys:#?}", workspace.display()))
}

/// Each `init` leaves a private key outside the workspace, with a record of the workspace
/// it is for. `keys list` says which still exist; `keys prune` removes only the keys of
/// deleted workspaces (`--dry-run` removes nothing), keeps a key without a record unless
/// told otherwise, and a moved workspace's record follows it on its next archive write.
#[test]
fn keys_list_and_prune_remove_only_the_keys_of_deleted_workspaces() {
    let e = scratch();
    for ws in ["ws", "doomed", "moved"] {
        e.run_ok(&["init", ws, "--recipe", "recipe.yaml"]);
    }
    let keys = listed_keys(&e);
    assert_eq!(keys.len(), 3, "{keys:#?}");
    for k in &keys {
        assert_eq!(k["state"], "in_use", "{k}");
        assert!(k["created"].as_str().unwrap().ends_with('Z'), "{k}");
        let record = std::path::Path::new(k["key_file"].as_str().unwrap()).with_extension("json");
        let mode = std::fs::metadata(&record).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the record is as private as the key");
    }
    let doomed_key = key_of(&keys, &e.root().join("doomed"))["key_file"]
        .as_str()
        .unwrap()
        .to_string();
    let ws_key = key_of(&keys, &e.ws)["key_file"]
        .as_str()
        .unwrap()
        .to_string();

    // A key from before records existed, and two workspaces gone (one deleted, one moved).
    let legacy = e.keys.join("legacy-0123abcd.key");
    std::fs::write(&legacy, "{}\n").unwrap();
    std::fs::set_permissions(&legacy, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_dir_all(e.root().join("doomed")).unwrap();
    std::fs::rename(e.root().join("moved"), e.root().join("moved-here")).unwrap();
    let human = e.run_ok(&["keys", "list"]);
    let said = text(&human);
    assert!(said.contains("4 private key(s) in"), "{said}");
    assert!(said.contains("unknown workspace"), "{said}");
    assert!(said.contains("the workspace no longer exists"), "{said}");

    // The moved workspace's next archive write brings its record along.
    e.run_ok(&["repair", "moved-here"]);
    let keys = listed_keys(&e);
    assert_eq!(
        key_of(&keys, &e.root().join("moved-here"))["state"],
        "in_use"
    );
    let legacy_row = keys
        .iter()
        .find(|k| k["experiment"] == "legacy-0123abcd")
        .unwrap();
    assert_eq!(legacy_row["state"], "unknown_workspace");
    assert!(legacy_row["workspace"].is_null());

    let dry = e.json(&["keys", "prune", "--dry-run", "--json"]);
    assert_eq!(dry["dry_run"], true);
    let would: Vec<&str> = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_file"].as_str().unwrap())
        .collect();
    assert_eq!(would, [doomed_key.as_str()]);
    assert!(
        std::path::Path::new(&doomed_key).exists(),
        "a dry run removes nothing"
    );

    let out = e.run_ok(&["keys", "prune"]);
    assert!(
        text(&out).contains(&format!("removed {doomed_key}")),
        "{}",
        text(&out)
    );
    assert!(!std::path::Path::new(&doomed_key).exists());
    assert!(
        !std::path::Path::new(&doomed_key)
            .with_extension("json")
            .exists()
    );
    assert!(
        std::path::Path::new(&ws_key).exists(),
        "a live workspace keeps its key"
    );
    assert!(
        legacy.exists(),
        "a key without a record needs --include-unknown"
    );
    assert!(text(&out).contains("--include-unknown"), "{}", text(&out));

    let out = e.json(&["keys", "prune", "--include-unknown", "--json"]);
    assert_eq!(out["removed"].as_array().unwrap().len(), 1, "{out:#}");
    assert!(!legacy.exists());
    let left: Vec<Value> = listed_keys(&e);
    assert_eq!(left.len(), 2, "{left:#?}");
    assert!(left.iter().all(|k| k["state"] == "in_use"), "{left:#?}");
    // The workspaces whose keys stayed still run.
    e.run_ok(&["run", "ws", "--max-generations", "1", "--quiet"]);
}

/// Bytes under `dir`, as `du` counts them (allocated blocks), never through a link.
fn disk_use(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut n = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            n += disk_use(&e.path());
        }
    }
    n
}

/// `evolve gc` drops the reproducible run data of finished, non-champion generations
/// and the checkout caches, says how many bytes it freed (and, with `--dry-run`, would
/// free), refuses while a run holds the workspace, and leaves everything `verify` and
/// `export` need: both, and `verify --bundle` of the export, pass afterwards.
#[test]
fn gc_frees_run_data_and_verify_and_export_still_pass() {
    let e = Exp::new(&Spec {
        generations: 3,
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let champion = e.log().into_iter().find(|r| r["champion"] == true).unwrap()["genid"]
        .as_str()
        .unwrap()
        .to_string();
    let runs = e.ws.join("runs");
    let before = disk_use(&runs);
    let non_champion = if champion == "1" { "2" } else { "1" };
    assert!(runs.join(format!("gen-{non_champion}")).is_dir());

    // Refused while a run holds the lock.
    {
        let _lock = evolve_archive::RunLock::acquire(&e.ws).unwrap();
        let out = e.evolve(&["gc", "ws"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            stderr(&out).contains("gc refuses while a run holds the workspace"),
            "{}",
            text(&out)
        );
        assert_eq!(disk_use(&runs), before, "nothing was removed");
    }

    let dry = e.json(&["gc", "ws", "--dry-run", "--json"]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["bytes_freed"], 0);
    let removable = dry["bytes_removable"].as_u64().unwrap();
    assert!(removable > 0, "{dry:#}");
    assert_eq!(disk_use(&runs), before, "a dry run removes nothing");
    let paths: Vec<&str> = dry["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&format!("runs/gen-{non_champion}").as_str()),
        "{paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.ends_with(&format!("gen-{champion}"))),
        "the champion's records stay: {paths:?}"
    );

    let out = e.run_ok(&["gc", "ws"]);
    let said = text(&out);
    assert!(said.contains(&format!("({removable} bytes)")), "{said}");
    assert!(said.starts_with("removed runs/"), "{said}");
    let after = disk_use(&runs);
    assert!(after < before, "{after} >= {before}");
    assert!(!runs.join(format!("gen-{non_champion}")).exists());
    assert!(!runs.join("checkouts").exists());
    assert!(runs.join(format!("gen-{champion}")).is_dir());
    assert!(
        runs.join(format!("evaluations/candidate/gen-{champion}"))
            .is_dir()
    );
    let again = e.json(&["gc", "ws", "--json"]);
    assert_eq!(again["removed"], json!([]), "a second gc finds nothing");

    e.run_ok(&["verify", "ws"]);
    e.run_ok(&["show", non_champion, "-w", "ws"]);
    // diff reads only the repository; a gated generation's verdict comes first.
    let diff = e.run_ok(&["diff", non_champion, "-w", "ws"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    assert!(diff.starts_with("gate: "), "{diff}");
    let v = e.json(&["diff", non_champion, "-w", "ws", "--json"]);
    assert!(v["verdict"].is_string() && v["proposed"] == false, "{v:#}");
    e.run_ok(&["export", "evidence", "-w", "ws"]);
    e.run_ok(&["verify", "--bundle", "evidence"]);
    // The workspace still runs: the checkouts come back from the commits.
    e.run_ok(&["run", "ws", "--max-generations", "4", "--quiet"]);
    e.run_ok(&["verify", "ws"]);

    // A workspace that does not verify keeps every record.
    let archive = e.ws.join(".evolve/archive.jsonl");
    let text_of = std::fs::read_to_string(&archive).unwrap();
    std::fs::write(&archive, text_of.replacen("\"score\":", "\"score\":9", 1)).unwrap();
    let before = disk_use(&runs);
    let out = e.evolve(&["gc", "ws"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(stderr(&out).contains("does not verify"), "{}", text(&out));
    assert_eq!(disk_use(&runs), before);
}

/// A harbor CLI that is missing is an unavailable engine: `evolve run` and `evolve tasks run`
/// exit 2 naming EVOLVE_HARBOR_BIN and how to install harbor, before any trial runs.
#[test]
fn a_missing_harbor_cli_exits_2_naming_evolve_harbor_bin_before_any_trial() {
    let e = scratch();
    let recipe = e.root().join("recipe.yaml");
    let text = std::fs::read_to_string(&recipe).unwrap();
    std::fs::write(&recipe, text.replacen("engine: local", "engine: harbor", 1)).unwrap();
    e.init();
    let missing = e.root().join("no-such-harbor");
    let says_how = |stderr: &str| {
        assert!(stderr.contains("EVOLVE_HARBOR_BIN"), "{stderr}");
        assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
        assert!(stderr.contains("pip install harbor"), "{stderr}");
    };
    let run = e
        .evolve(&["run", "ws"])
        .env("EVOLVE_HARBOR_BIN", &missing)
        .code(2);
    says_how(&run.stderr());
    assert!(!run.stderr().contains("trial 1/"), "{}", run.stderr());
    let trials: Vec<_> = walk(&e.ws)
        .into_iter()
        .filter(|p| p.ends_with("result.json"))
        .collect();
    assert!(trials.is_empty(), "trials ran: {trials:?}");

    let out = e.root().join("tasks-out");
    let tasks = e
        .evolve(&[
            "tasks", "run", "tasks", "--engine", "harbor", "--agent", "oracle", "--out",
        ])
        .arg(&out)
        .env("EVOLVE_HARBOR_BIN", &missing)
        .code(2);
    says_how(&tasks.stderr());
    assert!(!out.join("trials").exists(), "trials ran under {out:?}");
}
