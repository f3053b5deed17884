//! The scenarios of the integrity campaign, one function each. A scenario attacks a
//! real workspace (a copy of a template) with the real `evolve` executable and the
//! embedded hostile operator, then checks its invariant and the common end state
//! ([`checks::settled`]). `Ok(detail)` means every check held; `Err(reason)` names the
//! first one that did not.

use super::Rng;
use super::checks::{self, champion_is, never_evaluated, settled, stopped};
use super::compare::{first_difference, history};
use super::lab::{self, GateSpec, Lab, Reference, Spec, Trial, events, task_name};
use crate::lifecycle::evaluate::EvalError;
use crate::workspace::Workspace;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a scenario function gets: the lab and this trial's own random numbers.
pub struct Ctx<'a> {
    pub lab: &'a Lab,
    pub rng: Rng,
}

pub type Check = Result<String, String>;

/// One scenario: its name, the invariant it requires (one line), and its trial.
pub struct Scenario {
    pub name: &'static str,
    pub invariant: &'static str,
    pub run: fn(&mut Ctx) -> Check,
}

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "kill_during_mutation",
        invariant: "SIGKILL mid-mutate; verify ok, run refuses until repair, resume = uninterrupted run",
        run: kill_during_mutation,
    },
    Scenario {
        name: "kill_during_evaluation",
        invariant: "SIGKILL mid-evaluation; no score certified, resume re-evaluates = uninterrupted run",
        run: kill_during_evaluation,
    },
    Scenario {
        name: "kill_after_stamp",
        invariant: "SIGKILL after stamp+receipt; pending gate, never a parent, resume gates once = uninterrupted",
        run: kill_after_stamp,
    },
    Scenario {
        name: "evaluator_edit",
        invariant: "an evaluator edit is an invalid proposal; a commit with another evaluator is never evaluated",
        run: evaluator_edit,
    },
    Scenario {
        name: "outside_surface",
        invariant: "a write outside the mutable surface is an invalid proposal, never evaluated",
        run: outside_surface,
    },
    Scenario {
        name: "protected_evidence",
        invariant: "mutate cannot read evaluator, archive, receipts, anchor; no gate/sealed name reaches it",
        run: protected_evidence,
    },
    Scenario {
        name: "forged_outcome",
        invariant: "an edited score is found by verify, certifies nothing, and the writer refuses the archive",
        run: forged_outcome,
    },
    Scenario {
        name: "escape_dotdot",
        invariant: "a write through `..` is denied: operator_failed, nothing outside /target written",
        run: escape_dotdot,
    },
    Scenario {
        name: "escape_symlink",
        invariant: "a planted escaping symlink cannot be followed and is never committed or evaluated",
        run: escape_symlink,
    },
    Scenario {
        name: "network",
        invariant: "every socket, listen and DNS attempt is denied; nothing reaches a local listener",
        run: network,
    },
    Scenario {
        name: "runaway_cpu",
        invariant: "a spinning mutate is stopped at its deadline: operator_failed (timeout), run continues",
        run: runaway_cpu,
    },
    Scenario {
        name: "memory_bomb",
        invariant: "a memory bomb stops at the cap: operator_failed (out_of_memory), run continues",
        run: memory_bomb,
    },
    Scenario {
        name: "blocking_sleep",
        invariant: "a sleep in a host call past the deadline is cut: operator_failed (timeout)",
        run: blocking_sleep,
    },
    Scenario {
        name: "stdout_flood",
        invariant: "a 4 MiB stdout flood is truncated to 256 KiB; the candidate is still evaluated",
        run: stdout_flood,
    },
    Scenario {
        name: "malformed_result",
        invariant: "a result breaking the contract is malformed_result: operator_failed, never evaluated",
        run: malformed_result,
    },
    Scenario {
        name: "self_edited_gate",
        invariant: "a child that breaks its own gate is never kept (fail closed), even when it scores higher",
        run: self_edited_gate,
    },
    Scenario {
        name: "bricking_self_edit",
        invariant: "a child that breaks a stage's component is an invalid proposal, never a parent; the run goes on",
        run: bricking_self_edit,
    },
    Scenario {
        name: "forged_signature",
        invariant: "a garbled, copied or stale receipt signature is found by verify; its row is no parent",
        run: forged_signature,
    },
    Scenario {
        name: "dropped_reordered_lines",
        invariant: "a dropped or swapped archive line is found by verify and the writer refuses the archive",
        run: dropped_reordered_lines,
    },
    Scenario {
        name: "agent_takes_key",
        invariant: "a candidate's agent cannot read the key or write the archive; a planted agent link reveals nothing",
        run: agent_takes_key,
    },
    Scenario {
        name: "moved_tag",
        invariant: "a moved gen/<id> tag is found by verify and its row is no longer a parent",
        run: moved_tag,
    },
    Scenario {
        name: "quota",
        invariant: "1 GiB or 100,000 files past the disk quota: operator_failed (quota_exceeded), nothing of it kept",
        run: quota,
    },
    Scenario {
        name: "oversized_select_and_record",
        invariant: "a select with more ids than children, or a record annotation over 64 KiB, is malformed_result and never archived",
        run: oversized_select_and_record,
    },
];

/// How long to wait for a run to reach a kill point before giving up.
const MARKER_DEADLINE: Duration = Duration::from_secs(120);

// ----- kill scenarios ------------------------------------------------------------

fn two_generations(mutate: Value) -> Spec {
    Spec {
        mutate,
        generations: 2,
        ..Spec::default()
    }
}

/// Start `evolve run`, wait until `marker` exists, wait `delay_ms` more, then SIGKILL
/// the process (`Child::kill` sends SIGKILL on Unix) and reap it.
fn kill_at(lab: &Lab, t: &Trial, marker: &Path, delay_ms: u64) -> Result<(), String> {
    let mut child = lab.spawn(&t.dir, &["run", "ws"])?;
    let start = Instant::now();
    while !marker.exists() {
        let exited = child
            .try_wait()
            .map_err(|e| format!("cannot wait for the run: {e}"))?;
        if let Some(status) = exited {
            return Err(format!(
                "the run exited ({status}) before {} appeared",
                marker.display()
            ));
        }
        if start.elapsed() > MARKER_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} did not appear", marker.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    child
        .kill()
        .map_err(|e| format!("cannot kill the run: {e}"))?;
    child
        .wait()
        .map_err(|e| format!("cannot reap the run: {e}"))?;
    Ok(())
}

fn has_event(t: &Trial, kind: &str, genid: &str, purpose: Option<&str>) -> Result<bool, String> {
    Ok(events(&t.ws)?.iter().any(|e| {
        e["type"] == kind
            && e["genid"] == genid
            && purpose.is_none_or(|p| e["body"]["purpose"] == p)
    }))
}

/// Resume to the end, then require the uninterrupted run's history and champion.
fn resume_matches(lab: &Lab, t: &Trial, reference: &Reference) -> Check {
    lab.run_ok(&t.dir, &["run", "ws", "--quiet"])?;
    let got = history(&events(&t.ws)?);
    if let Some(d) = first_difference(&got, &reference.history) {
        return Err(d);
    }
    let champion = settled(lab, t)?;
    match &reference.champion {
        Some((g, s)) if *g == champion.0 && (*s - champion.1).abs() <= 1e-9 => {
            Ok(format!("resumed = uninterrupted; champion gen {g} ({s})"))
        }
        other => Err(format!(
            "champion gen {} ({}) differs from the uninterrupted run's {other:?}",
            champion.0, champion.1
        )),
    }
}

fn kill_during_mutation(c: &mut Ctx) -> Check {
    let spec = two_generations(json!({"action": "climb", "sleep_ms": 1500}));
    let reference = c.lab.reference(&spec)?;
    let t = c.lab.workspace(&spec)?;
    let (g, delay) = ((1 + c.rng.below(2)).to_string(), c.rng.below(1000));
    kill_at(
        c.lab,
        &t,
        &t.ws.join(format!("runs/gen-{g}/mutate/input.json")),
        delay,
    )?;
    if !t.ws.join(format!("runs/worktrees/gen-{g}")).is_dir()
        || has_event(&t, "generation", &g, None)?
    {
        return Err(format!(
            "kill point gen {g} +{delay} ms missed the mutation"
        ));
    }
    checks::verify_clean(c.lab, &t)?;
    let refused = c.lab.run(&t.dir, &["run", "ws"])?;
    if refused.code != Some(2) || !refused.tail().contains("evolve repair") {
        return Err(format!(
            "a run over an interrupted worktree should refuse (exit 2) and name `evolve repair`; it ended with {}: {}",
            refused.exit(),
            refused.tail()
        ));
    }
    c.lab.run_ok(&t.dir, &["repair", "ws"])?;
    let done = resume_matches(c.lab, &t, &reference)?;
    Ok(format!("killed gen {g} mutate +{delay} ms; {done}"))
}

fn kill_during_evaluation(c: &mut Ctx) -> Check {
    let spec = Spec {
        tasks: 8,
        verifier_sleep_s: 0.3,
        ..two_generations(json!({"action": "climb"}))
    };
    let reference = c.lab.reference(&spec)?;
    let t = c.lab.workspace(&spec)?;
    let (g, delay) = ((1 + c.rng.below(2)).to_string(), c.rng.below(700));
    kill_at(
        c.lab,
        &t,
        &t.ws
            .join(format!("runs/evaluations/candidate/gen-{g}/attempt-1")),
        delay,
    )?;
    if !has_event(&t, "generation", &g, None)? || has_event(&t, "evaluation", &g, None)? {
        return Err(format!(
            "kill point gen {g} evaluation +{delay} ms missed the evaluation"
        ));
    }
    checks::verify_clean(c.lab, &t)?;
    let status = checks::row(&checks::log(c.lab, &t)?, &g)?["status"].clone();
    if status != "committed" {
        return Err(format!(
            "an interrupted evaluation left gen {g} {status}, expected committed"
        ));
    }
    let done = resume_matches(c.lab, &t, &reference)?;
    Ok(format!("killed gen {g} evaluation +{delay} ms; {done}"))
}

fn kill_after_stamp(c: &mut Ctx) -> Check {
    let spec = Spec {
        gate: GateSpec::Slow { sleep_ms: 1500 },
        ..two_generations(json!({"action": "climb"}))
    };
    let reference = c.lab.reference(&spec)?;
    let t = c.lab.workspace(&spec)?;
    let (g, delay) = ((1 + c.rng.below(2)).to_string(), c.rng.below(700));
    kill_at(
        c.lab,
        &t,
        &t.ws.join(format!("runs/gen-{g}/gate/input.json")),
        delay,
    )?;
    let last = events(&t.ws)?
        .into_iter()
        .rfind(|e| e["genid"] == g.as_str())
        .map(|e| e["type"].clone());
    if last != Some(json!("evaluation")) {
        return Err(format!(
            "kill point gen {g} gate +{delay} ms: the last event of gen {g} is {last:?}, not its evaluation"
        ));
    }
    checks::verify_clean(c.lab, &t)?;
    let log = checks::log(c.lab, &t)?;
    let row = checks::row(&log, &g)?;
    if row["status"] != "pending_gate" || row["eligible"] != false {
        return Err(format!(
            "gen {g} after the stamp: {row}; expected pending_gate and not eligible"
        ));
    }
    let done = resume_matches(c.lab, &t, &reference)?;
    let evaluations = events(&t.ws)?
        .iter()
        .filter(|e| {
            e["type"] == "evaluation"
                && e["genid"] == g.as_str()
                && e["body"]["purpose"] == "candidate"
        })
        .count();
    if evaluations != 1 {
        return Err(format!("gen {g} was evaluated {evaluations} times"));
    }
    Ok(format!("killed gen {g} gate +{delay} ms; {done}"))
}

// ----- boundary scenarios --------------------------------------------------------

/// Run a one-generation fixture to the end.
fn run_one(c: &Ctx, spec: &Spec) -> Result<Trial, String> {
    let t = c.lab.workspace(spec)?;
    c.lab.run_ok(&t.dir, &["run", "ws", "--quiet"])?;
    Ok(t)
}

/// The generation stopped as expected, was never evaluated, and gen 0 stays champion.
fn rejected(c: &Ctx, t: &Trial, status: &str, needles: &[&str]) -> Check {
    let stop = stopped(c.lab, t, "1", status, needles)?;
    never_evaluated(t, "1")?;
    champion_is(&settled(c.lab, t)?, "0")?;
    Ok(format!("{stop}; champion gen 0 re-evaluates"))
}

fn evaluator_edit(c: &mut Ctx) -> Check {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1200}),
        // `evaluator/**` could not be included (init refuses it): the implicit exclude
        // is what this scenario tests.
        surface: vec!["target/**".into()],
        ..Spec::default()
    };
    let t = c.lab.workspace(&spec)?;
    let task = task_name(c.rng.below(spec.tasks as u64) as usize);
    let verifier = format!("evaluator/tasks/{task}/tests/test.sh");
    // Another process (not the operator: it has no handle on evaluator/) edits the
    // child's copy of a verifier while mutate runs.
    let mut child = c.lab.spawn(&t.dir, &["run", "ws", "--quiet"])?;
    let edited = edit_when_mutating(&t, &verifier);
    let code = lab::wait(&mut child, lab::COMMAND_DEADLINE)?;
    edited?;
    if code != Some(0) {
        return Err(format!("the run exited {code:?}"));
    }
    // Gate and sealed task names are redacted in reasons (`private-<n>`).
    let done = rejected(
        c,
        &t,
        "invalid_proposal",
        &["evaluator/tasks/", "/tests/test.sh"],
    )?;
    evaluator_change_refused(&t, &verifier)?;
    Ok(format!(
        "{verifier}: {done}; a commit with it is refused evaluation"
    ))
}

/// Once gen 1's mutate has started, overwrite `verifier` in its worktree with one that
/// rewards everything.
fn edit_when_mutating(t: &Trial, verifier: &str) -> Result<(), String> {
    let marker = t.ws.join("runs/gen-1/mutate/input.json");
    let start = Instant::now();
    while !marker.exists() {
        if start.elapsed() > MARKER_DEADLINE {
            return Err(format!("{} did not appear", marker.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let victim = t.ws.join("runs/worktrees/gen-1").join(verifier);
    std::fs::write(&victim, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n")
        .map_err(|e| format!("cannot edit {}: {e}", victim.display()))
}

/// A commit whose evaluator differs from gen/0's, written straight into the repository
/// (as a process with write access to it could), is refused by the evaluation itself.
fn evaluator_change_refused(t: &Trial, verifier: &str) -> Result<(), String> {
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    let tree = t.dir.join("tampered");
    ws.store
        .materialize(ws.genesis, &tree)
        .map_err(|e| e.to_string())?;
    std::fs::write(
        tree.join(verifier),
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    )
    .map_err(|e| format!("cannot edit the tampered tree: {e}"))?;
    let snap = ws
        .store
        .snapshot(&tree, Some(ws.genesis), &Default::default(), &|_| false)
        .map_err(|e| e.to_string())?;
    let commit = ws
        .store
        .commit(
            snap.tree,
            Some(ws.genesis),
            "selftest: tampered evaluator",
            false,
        )
        .map_err(|e| e.to_string())?;
    match checks::evaluate_outside_the_run(&ws, "selftest-tampered", Some("0"), commit)? {
        Err(EvalError::EvaluatorChanged { .. }) => Ok(()),
        Err(e) => Err(format!("the tampered commit failed otherwise: {e}")),
        Ok(done) => Err(format!(
            "a commit with an edited evaluator was evaluated: {} {:?}",
            done.outcome, done.score
        )),
    }
}

fn outside_surface(c: &mut Ctx) -> Check {
    let variants = [
        ("other.txt", "0.9\n"),
        ("sub/value.txt", "0.9\n"),
        (
            "agent.sh",
            "#!/bin/sh\necho 1 > \"$EVOLVE_APP_DIR/answer.txt\"\n",
        ),
    ];
    let (path, content) = variants[c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "write", "path": path, "content": content}),
            ..Spec::default()
        },
    )?;
    let done = rejected(c, &t, "invalid_proposal", &[&format!("target/{path}")])?;
    Ok(format!("target/{path}: {done}"))
}

/// The notes of generation `genid`'s mutate result.
fn mutate_notes(t: &Trial, genid: &str) -> Result<Vec<String>, String> {
    let path = t.ws.join(format!("runs/gen-{genid}/mutate/result.json"));
    let v: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| format!("{} is missing or not JSON", path.display()))?;
    let notes = v["ok"]["notes"]
        .as_array()
        .ok_or_else(|| format!("mutate did not return a proposal: {v}"))?;
    Ok(notes
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect())
}

/// Every probe line in `notes` was denied (at least `min` of them), none breached.
fn all_denied(notes: &[String], min: usize) -> Result<usize, String> {
    if let Some(b) = notes.iter().find(|n| n.contains("BREACH")) {
        return Err(format!("the sandbox let through: {b}"));
    }
    let denied = notes.iter().filter(|n| n.contains(": denied: ")).count();
    if denied < min {
        return Err(format!(
            "expected at least {min} denied attempts, got {denied}: {notes:?}"
        ));
    }
    Ok(denied)
}

/// The accepted honest edit: gen 1 completes, is kept, and is the champion.
fn accepted(c: &Ctx, t: &Trial) -> Check {
    let champion = settled(c.lab, t)?;
    champion_is(&champion, "1")?;
    Ok(format!("gen 1 accepted at {} and re-evaluates", champion.1))
}

fn protected_evidence(c: &mut Ctx) -> Check {
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "pry"}),
            ..Spec::default()
        },
    )?;
    let denied = all_denied(&mutate_notes(&t, "1")?, 10)?;
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    let private: Vec<&String> = ws
        .task_set
        .split
        .gate
        .iter()
        .chain(&ws.task_set.split.sealed)
        .collect();
    let mut seen = 0;
    for file in files_under(&t.ws.join("runs/gen-1")) {
        let text = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        seen += 1;
        if let Some(name) = private.iter().find(|n| text.contains(n.as_str())) {
            return Err(format!(
                "the private task name {name} reached {}",
                file.display()
            ));
        }
    }
    if seen < 4 {
        return Err(format!(
            "only {seen} files of the mutate call were recorded"
        ));
    }
    let done = accepted(c, &t)?;
    Ok(format!(
        "{denied} reads denied; {} private names absent from {seen} files; {done}",
        private.len()
    ))
}

/// The hostile command agent of `agent_takes_key`: every attempt prints `<what>: denied:`
/// or `BREACH <what>`, then it answers honestly so the run goes on.
fn hostile_agent_script(lab_root: &Path, keys: &Path) -> String {
    let (root, keys) = (lab_root.display(), keys.display());
    format!(
        r#"#!/bin/sh
cat "$EVOLVE_AGENT_DIR/value.txt" > /app/answer.txt
try() {{ if sh -c "$2" >/dev/null 2>&1; then echo "BREACH $1"; else echo "$1: denied: refused"; fi; }}
try "read the key directory" "cat '{keys}'/* | grep -q ."
try "list the lab" "ls '{root}' | grep -q ."
try "find an archive" "find '{root}' -name archive.jsonl | grep -q ."
try "append to an archive" "for f in \$(find '{root}' -name archive.jsonl); do echo forged >> \$f || exit 1; done; find '{root}' -name archive.jsonl | grep -q ."
try "write into .evolve" "for d in '{root}'/*/ws/.evolve; do touch \$d/pwned || exit 1; done; ls '{root}'/*/ws/.evolve/pwned"
try "read gen/0's evaluator through git" "git --git-dir=\$(ls -d '{root}'/*/ws/.git | head -n1) show gen/0:evaluator/task-set.json | grep -q ."
try "list /root" "ls /root | grep -q ."
try "see the docker socket" "test -e /var/run/docker.sock"
try "run as uid 0" "test \$(id -u) = 0"
"#
    )
}

fn agent_takes_key(c: &mut Ctx) -> Check {
    let keys = c.lab.keys().to_path_buf();
    let spec = Spec {
        mutate: json!({
            "action": "agent_attacks",
            // WASI refuses an absolute link target; a relative one leaves the tree all the same.
            "path": "../../../../../../../../../../../../etc/passwd",
            "content": hostile_agent_script(c.lab.root(), &keys),
        }),
        surface: vec!["target/**".into()],
        ..Spec::default()
    };
    let t = c.lab.workspace(&spec)?;
    // The secrets: `<id>.key`. Beside each, `<id>.json` records the workspace it is for,
    // which the framework itself rewrites when a workspace moves (as the lab's do).
    let key_files: Vec<_> = files_under(&keys)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|x| x == "key"))
        .collect();
    let key_bytes: Vec<(std::path::PathBuf, Vec<u8>)> = key_files
        .iter()
        .map(|f| (f.clone(), std::fs::read(f).unwrap_or_default()))
        .collect();
    if key_bytes.is_empty() {
        return Err(format!("no key file under {}", keys.display()));
    }
    c.lab.run_ok(&t.dir, &["run", "ws", "--quiet"])?;
    let notes = mutate_notes(&t, "1")?;
    // The two planted links: one message, whether or not the target exists, and no
    // host path in it.
    let link_replies: Vec<&str> = notes
        .iter()
        .filter_map(|n| {
            n.strip_prefix("link to an existing file: ")
                .or(n.strip_prefix("link to a missing file: "))
        })
        .collect();
    if link_replies.len() != 2 || link_replies[0] != link_replies[1] {
        return Err(format!(
            "a planted agent link was answered differently: {notes:?}"
        ));
    }
    let lab_root = c.lab.root().display().to_string();
    if let Some(n) = notes
        .iter()
        .find(|n| n.contains(&lab_root) || n.contains("/tmp/"))
    {
        return Err(format!("a tasks reply shows a host path: {n}"));
    }
    // Every attempt of the agent, in every trial it ran (mutate's train trial and the
    // evaluations), was refused, and nothing of the key is anywhere in the workspace.
    let (mut denied, mut logs) = (0, 0);
    for file in files_under(&t.ws) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for (key, secret) in &key_bytes {
            if !secret.is_empty() && bytes.windows(secret.len()).any(|w| w == secret.as_slice()) {
                return Err(format!(
                    "the key {} reached {}",
                    key.display(),
                    file.display()
                ));
            }
        }
        if file.file_name().is_some_and(|n| n == "agent.txt") {
            let text = String::from_utf8_lossy(&bytes);
            if let Some(b) = text.lines().find(|l| l.contains("BREACH")) {
                return Err(format!("the agent got through: {b} ({})", file.display()));
            }
            let refused = text.lines().filter(|l| l.contains(": denied: ")).count();
            if refused > 0 && refused != 9 {
                return Err(format!(
                    "{refused} of the agent's 9 attempts were refused ({})",
                    file.display()
                ));
            }
            denied += refused;
            logs += usize::from(refused > 0);
        }
    }
    // mutate's train trial and gen 1's evaluation at least.
    if logs < 2 {
        return Err(format!(
            "the hostile agent ran in {logs} trials, expected at least 2"
        ));
    }
    for (key, secret) in &key_bytes {
        if std::fs::read(key).unwrap_or_default() != *secret {
            return Err(format!("the key {} changed", key.display()));
        }
    }
    if t.ws.join(".evolve/pwned").exists() {
        return Err("the agent wrote into .evolve".into());
    }
    let done = accepted(c, &t)?;
    Ok(format!(
        "{denied} attempts refused in {logs} agent logs; links answered alike; {done}"
    ))
}

/// Regular files under `dir`, recursively, never following links.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&p)),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
    out
}

fn escape_dotdot(c: &mut Ctx) -> Check {
    let variants = [
        "../../escape.txt",
        "../evaluator/tasks/escape.txt",
        "../.evolve/escape.jsonl",
    ];
    let path = variants[c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "write", "path": path, "content": "escaped"}),
            surface: vec!["target/**".into()],
            ..Spec::default()
        },
    )?;
    let leaked: Vec<_> = files_under(&t.dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("escape"))
        })
        .collect();
    if !leaked.is_empty() {
        return Err(format!("the operator wrote outside /target: {leaked:?}"));
    }
    let done = rejected(c, &t, "operator_failed", &["mutate"])?;
    Ok(format!("{path}: {done}"))
}

fn escape_symlink(c: &mut Ctx) -> Check {
    let variants = [
        format!("../evaluator/tasks/{}/tests/test.sh", task_name(0)),
        "/etc/passwd".to_string(),
        "../../../../.evolve/archive.jsonl".to_string(),
    ];
    let dest = &variants[c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "symlink", "path": "answer", "content": dest}),
            surface: vec!["target/**".into()],
            ..Spec::default()
        },
    )?;
    if planting_refused(&t)? {
        // The sandbox refuses to even create an absolute link (cap-std).
        let done = rejected(c, &t, "operator_failed", &["mutate", "symlink"])?;
        return Ok(format!("answer -> {dest}: planting refused; {done}"));
    }
    all_denied(&mutate_notes(&t, "1")?, 2)?;
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    if ws.tag_commit("1").is_some() {
        return Err("a tree holding the escaping link was committed and tagged".into());
    }
    let done = rejected(c, &t, "invalid_proposal", &["target/answer"])?;
    Ok(format!("answer -> {dest}: not followed; {done}"))
}

/// Whether gen 1's mutate reported that creating its symlink was not permitted.
fn planting_refused(t: &Trial) -> Result<bool, String> {
    let path = t.ws.join("runs/gen-1/mutate/result.json");
    let v: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| format!("{} is missing or not JSON", path.display()))?;
    let message = v["error"]["message"].as_str().unwrap_or("");
    Ok(v["error"]["kind"] == "reported_error"
        && message.contains("symlink /target/answer")
        && message.contains("not permitted"))
}

fn network(c: &mut Ctx) -> Check {
    let listener = c.lab.listener()?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("listener address: {e}"))?
        .port();
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "network", "port": port}),
            ..Spec::default()
        },
    )?;
    let denied = all_denied(&mutate_notes(&t, "1")?, 4)?;
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok((_, from)) => {
            return Err(format!(
                "the local listener accepted a connection from {from}"
            ));
        }
        Err(e) => return Err(format!("cannot poll the listener: {e}")),
    }
    let done = accepted(c, &t)?;
    Ok(format!(
        "{denied} network attempts denied; listener untouched; {done}"
    ))
}

fn limited(c: &Ctx, action: &str, memory_mib: Option<u32>, kind: &str) -> Check {
    let t = run_one(
        c,
        &Spec {
            mutate: json!({ "action": action }),
            mutate_timeout_s: 2.0,
            mutate_memory_mib: memory_mib,
            ..Spec::default()
        },
    )?;
    rejected(c, &t, "operator_failed", &["mutate", kind])
}

fn runaway_cpu(c: &mut Ctx) -> Check {
    limited(c, "spin", None, "timeout")
}

fn memory_bomb(c: &mut Ctx) -> Check {
    limited(c, "memory_bomb", Some(64), "out_of_memory")
}

fn blocking_sleep(c: &mut Ctx) -> Check {
    limited(c, "sleep", None, "timeout")
}

fn stdout_flood(c: &mut Ctx) -> Check {
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "flood", "flood_kib": 4096}),
            ..Spec::default()
        },
    )?;
    let log = t.ws.join("runs/gen-1/mutate/operator.stdout.log");
    let bytes = std::fs::read(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    if bytes.len() > (256 << 10) + 128 || !text.contains("more bytes dropped") {
        return Err(format!(
            "the stdout log holds {} bytes and {} a truncation note",
            bytes.len(),
            if text.contains("more bytes dropped") {
                "has"
            } else {
                "lacks"
            }
        ));
    }
    let done = accepted(c, &t)?;
    Ok(format!("log kept {} bytes; {done}", bytes.len()))
}

fn malformed_result(c: &mut Ctx) -> Check {
    let variant = ["dotdot_path", "nan_usd", "huge_note"][c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "malformed", "variant": variant}),
            ..Spec::default()
        },
    )?;
    let done = rejected(c, &t, "operator_failed", &["mutate", "malformed_result"])?;
    Ok(format!("{variant}: {done}"))
}

fn self_edited_gate(c: &mut Ctx) -> Check {
    let variant = ["delete", "garbage", "wrong_world"][c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "disable_gate", "variant": variant}),
            surface: vec!["target/value.txt".into(), "operators/**".into()],
            ..Spec::default()
        },
    )?;
    // The guardrail at the surface check loads the edited gate for its stage before the
    // tree is committed: the child never reaches the evaluator, let alone its gate.
    let stop = stopped(
        c.lab,
        &t,
        "1",
        "invalid_proposal",
        &[
            "surface",
            "operators/gate.wasm (the gate stage's component)",
        ],
    )?;
    never_evaluated(&t, "1")?;
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    let gate0 = ws
        .store
        .read_blob(ws.genesis, "operators/gate.wasm", 64 << 20)
        .map_err(|e| e.to_string())?;
    let hillclimb = crate::builtin::find("gate", "hillclimb").map(|o| o.bytes.to_vec());
    if gate0.is_none() || gate0 != hillclimb {
        return Err("gen/0's gate component changed".into());
    }
    champion_is(&settled(c.lab, &t)?, "0")?;
    Ok(format!(
        "{variant}: {stop}, never evaluated; gen/0's gate intact; champion gen 0"
    ))
}

/// What each `break_operator` variant must be refused for.
fn broken_component_problem(stage: &str, variant: &str) -> String {
    match variant {
        "garbage" => "is not a valid component".into(),
        "delete" => format!("was deleted; the {stage} stage loads it"),
        // Mutate's component is replaced by select's, any other by mutate's.
        _ if stage == "mutate" => "exports the `select` world, not this stage's".into(),
        _ => "exports the `mutate` world, not this stage's".into(),
    }
}

fn bricking_self_edit(c: &mut Ctx) -> Check {
    let stage = ["select", "rollout", "mutate", "gate", "record"][c.rng.below(5) as usize];
    let variant = ["garbage", "wrong_world", "delete"][c.rng.below(3) as usize];
    // Generation 1's child breaks the component and raises the score (0.2 > 0.1); the
    // children of generations 2 and 3 only raise it.
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "break_operator", "path": stage, "variant": variant}),
            surface: vec!["target/value.txt".into(), "operators/**".into()],
            generations: 3,
            ..Spec::default()
        },
    )?;
    let file = format!("operators/{stage}.wasm (the {stage} stage's component)");
    let problem = broken_component_problem(stage, variant);
    let stop = stopped(
        c.lab,
        &t,
        "1",
        "invalid_proposal",
        &["surface", &file, &problem],
    )?;
    never_evaluated(&t, "1")?;
    if events(&t.ws)?
        .iter()
        .any(|e| e["type"] == "generation" && e["genid"] == "1")
    {
        return Err("gen 1 was committed (it has a generation event)".into());
    }
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    if let Some(commit) = ws.tag_commit("1") {
        return Err(format!("gen/1 is tagged ({commit})"));
    }
    // The run went on normally: both later children were evaluated and kept, each from
    // the champion of its time, and the last is the champion.
    let log = checks::log(c.lab, &t)?;
    for (genid, parent) in [("2", "0"), ("3", "2")] {
        let r = checks::row(&log, genid)?;
        if r["parent"] != parent || r["verdict"] != "keep" {
            return Err(format!(
                "gen {genid} should be kept as a child of gen {parent}: {r}"
            ));
        }
    }
    let champion = settled(c.lab, &t)?;
    champion_is(&champion, "3")?;
    Ok(format!(
        "{stage}/{variant}: {stop}, never committed or evaluated; gens 2 and 3 kept, champion gen 3 ({})",
        champion.1
    ))
}

// ----- evidence tampering --------------------------------------------------------

/// A copy of a finished two-generation run, and its archive's lines.
fn finished(c: &Ctx) -> Result<(Trial, Vec<String>), String> {
    let t = c
        .lab
        .finished(&two_generations(json!({"action": "climb"})))?;
    let lines = read_lines(&t.ws.join(".evolve/archive.jsonl"))?;
    Ok((t, lines))
}

fn read_lines(path: &Path) -> Result<Vec<String>, String> {
    Ok(std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .lines()
        .map(str::to_string)
        .collect())
}

fn write_lines(path: &Path, lines: &[String]) -> Result<(), String> {
    std::fs::write(path, lines.join("\n") + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

fn parse(line: &str) -> Result<Value, String> {
    serde_json::from_str(line).map_err(|e| format!("archive line is not JSON: {e}"))
}

/// Generation `genid` is not an eligible parent, and not the champion.
fn not_a_parent(c: &Ctx, t: &Trial, genid: &str) -> Result<(), String> {
    let log = checks::log(c.lab, t)?;
    if let Some(r) = log.iter().find(|r| r["genid"] == genid)
        && (r["eligible"] != false || r["champion"] != false)
    {
        return Err(format!("tampered gen {genid} still counts: {r}"));
    }
    Ok(())
}

/// The writer refuses to append to the tampered archive, and leaves it untouched.
fn writer_refuses(c: &Ctx, t: &Trial) -> Result<(), String> {
    let path = t.ws.join(".evolve/archive.jsonl");
    let before = std::fs::read(&path).map_err(|e| e.to_string())?;
    let out = c
        .lab
        .run(&t.dir, &["run", "ws", "--max-generations", "3", "--quiet"])?;
    if out.code != Some(2) {
        return Err(format!(
            "`evolve run` on the tampered archive ended with {}, expected exit 2: {}",
            out.exit(),
            out.tail()
        ));
    }
    if std::fs::read(&path).map_err(|e| e.to_string())? != before {
        return Err("`evolve run` changed the tampered archive".into());
    }
    Ok(())
}

/// Whatever is still champion over the certified lines re-evaluates to its score.
fn surviving_champion(t: &Trial) -> Result<String, String> {
    match checks::champion_reproduces(t) {
        Err(e) if e.starts_with("no champion") => Ok("no champion left".into()),
        other => other,
    }
}

fn forged_outcome(c: &mut Ctx) -> Check {
    let (t, mut lines) = finished(c)?;
    let candidates: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            parse(&lines[i])
                .is_ok_and(|e| e["type"] == "evaluation" && e["body"]["purpose"] != "anchor")
        })
        .collect();
    let i = candidates[c.rng.below(candidates.len() as u64) as usize];
    let forged = 0.5 + c.rng.below(500) as f64 / 1000.0;
    let mut event = parse(&lines[i])?;
    let genid = event["genid"].as_str().unwrap_or("").to_string();
    event["body"]["score"] = json!(forged);
    lines[i] = event.to_string();
    write_lines(&t.ws.join(".evolve/archive.jsonl"), &lines)?;
    let v = checks::verify_finds(c.lab, &t, &["event_hash_mismatch"])?;
    if v.champion
        .as_ref()
        .is_some_and(|(_, s)| (*s - forged).abs() < 1e-12)
    {
        return Err(format!("the forged score {forged} became the champion's"));
    }
    not_a_parent(c, &t, &genid)?;
    writer_refuses(c, &t)?;
    let champ = surviving_champion(&t)?;
    Ok(format!(
        "gen {genid} score -> {forged} on line {}: found, refused; {champ}",
        i + 1
    ))
}

fn forged_signature(c: &mut Ctx) -> Check {
    let (t, lines) = finished(c)?;
    let receipts_path = t.ws.join(".evolve/receipts.jsonl");
    let mut receipts = read_lines(&receipts_path)?;
    let named: Vec<usize> = (0..lines.len())
        .filter(|&i| parse(&lines[i]).is_ok_and(|e| e["genid"].is_string()))
        .collect();
    let i = named[c.rng.below(named.len() as u64) as usize];
    let genid = parse(&lines[i])?["genid"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let mut receipt = parse(&receipts[i])?;
    let sig = receipt["sig"].as_str().unwrap_or("").to_string();
    let variant = ["garbled", "copied", "stale"][c.rng.below(3) as usize];
    match variant {
        "garbled" => {
            let k = c.rng.below(sig.len() as u64) as usize;
            let flipped = if &sig[k..=k] == "0" { "1" } else { "0" };
            receipt["sig"] = json!(format!("{}{flipped}{}", &sig[..k], &sig[k + 1..]));
        }
        "copied" => {
            let j = (i + 1 + c.rng.below(lines.len() as u64 - 1) as usize) % lines.len();
            receipt["sig"] = parse(&receipts[j])?["sig"].clone();
        }
        _ => {
            // The event edited and its receipt's digest updated to match: only the
            // signature, which needs the secret key, can tell.
            let mut event = parse(&lines[i])?;
            event["at"] = json!("2000-01-01T00:00:00Z");
            let mut edited = lines.clone();
            edited[i] = event.to_string();
            write_lines(&t.ws.join(".evolve/archive.jsonl"), &edited)?;
            receipt["event_sha256"] = json!(evolve_archive::sha256_hex(edited[i].as_bytes()));
        }
    }
    receipts[i] = receipt.to_string();
    write_lines(&receipts_path, &receipts)?;
    checks::verify_finds(c.lab, &t, &["signature_invalid"])?;
    not_a_parent(c, &t, &genid)?;
    let champ = surviving_champion(&t)?;
    Ok(format!(
        "{variant} signature on line {} (gen {genid}): found; {champ}",
        i + 1
    ))
}

fn dropped_reordered_lines(c: &mut Ctx) -> Check {
    let (t, mut lines) = finished(c)?;
    let n = lines.len();
    let (what, from) = if c.rng.below(2) == 0 {
        let i = 1 + c.rng.below(n as u64 - 1) as usize;
        lines.remove(i);
        (format!("dropped line {}", i + 1), i)
    } else {
        let i = 1 + c.rng.below(n as u64 - 2) as usize;
        lines.swap(i, i + 1);
        (format!("swapped lines {} and {}", i + 1, i + 2), i)
    };
    write_lines(&t.ws.join(".evolve/archive.jsonl"), &lines)?;
    let found = || -> Check {
        checks::verify_finds(
            c.lab,
            &t,
            &[
                "seq_mismatch",
                "chain_broken",
                "receipt_orphan",
                "receipt_order",
            ],
        )?;
        // Dropping the last line leaves a valid prefix: only the orphaned receipt tells.
        let damaged = damaged_lines(&lines)?;
        if damaged.first() != Some(&from).filter(|&&f| f < lines.len()) {
            return Err(format!(
                "the chain should break first at line {}, it breaks at {damaged:?}",
                from + 1
            ));
        }
        for &i in &damaged {
            if let Some(g) = parse(&lines[i])?["genid"].as_str() {
                not_a_parent(c, &t, g)?;
            }
        }
        writer_refuses(c, &t)?;
        surviving_champion(&t)
    };
    match found() {
        Ok(champ) => Ok(format!("{what}: found, refused; {champ}")),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// Positions of the lines whose own chain fields no longer hold, recomputed here from
/// the archive format (docs/archive.md): `seq` must equal the position and `prev` the
/// SHA-256 of the line before. Certification is per line, so after a swap the chain
/// heals two lines later; after a drop every later `seq` is off.
fn damaged_lines(lines: &[String]) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(1) {
        let e = parse(line)?;
        let prev = evolve_archive::sha256_hex(lines[i - 1].as_bytes());
        if e["seq"] != json!(i) || e["prev"] != json!(prev) {
            out.push(i);
        }
    }
    Ok(out)
}

fn moved_tag(c: &mut Ctx) -> Check {
    let (t, _) = finished(c)?;
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    let g = (1 + c.rng.below(2)).to_string();
    let other = if c.rng.below(2) == 0 {
        "0"
    } else if g == "1" {
        "2"
    } else {
        "1"
    };
    let dest = ws
        .tag_commit(other)
        .ok_or_else(|| format!("gen/{other} is missing"))?;
    // What a process with write access to the repository could do: a loose ref
    // overrides a packed one, so this moves the tag whichever way it is stored.
    let tag = t.ws.join(format!(".git/refs/tags/gen/{g}"));
    std::fs::create_dir_all(t.ws.join(".git/refs/tags/gen"))
        .and_then(|()| std::fs::write(&tag, format!("{dest}\n")))
        .map_err(|e| format!("{}: {e}", tag.display()))?;
    if ws.tag_commit(&g).as_deref() != Some(dest.as_str()) {
        return Err(format!("moving gen/{g} did not take effect"));
    }
    checks::verify_finds(c.lab, &t, &["tag_moved"])?;
    not_a_parent(c, &t, &g)?;
    let champ = surviving_champion(&t)?;
    Ok(format!("gen/{g} -> gen/{other}'s commit: found; {champ}"))
}

// ----- caps on what an operator leaves behind (issue 22) ---------------------------

fn quota(c: &mut Ctx) -> Check {
    let variant = ["scratch_bytes", "scratch_files", "target_bytes"][c.rng.below(3) as usize];
    let t = run_one(
        c,
        &Spec {
            mutate: json!({"action": "fill", "variant": variant}),
            // Smaller than the default, so the binding's own quota is what stops it.
            mutate_disk_mib: Some(32),
            ..Spec::default()
        },
    )?;
    // Nothing the operator wrote survives anywhere in the trial: not in the stage's
    // scratch, not in a checkout, not in a commit.
    let kept: Vec<_> = files_under(&t.dir)
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()) == Some("fill.bin"))
        .collect();
    if !kept.is_empty() {
        return Err(format!("over-quota writes were kept: {kept:?}"));
    }
    let scratch = t.ws.join("runs/gen-1/mutate/scratch");
    let left = std::fs::read_dir(&scratch).map_or(0, |d| d.count());
    if left > 0 {
        return Err(format!(
            "{} holds {left} entries after the call",
            scratch.display()
        ));
    }
    let limit = if variant == "scratch_files" {
        "10000 files"
    } else {
        "33554432 bytes"
    };
    let done = rejected(
        c,
        &t,
        "operator_failed",
        &["mutate", "quota_exceeded", limit],
    )?;
    Ok(format!("{variant}: scratch empty, nothing kept; {done}"))
}

/// A select that returns 1,000 ids for one child (the archive once kept 900,000).
const MANY_IDS_SELECT: &str =
    "fn select(ctx, archive) {\n    let ids = [];\n    ids.pad(1000, \"0\");\n    ids\n}\n";
/// Two ids for the lab's one child: under the sandbox's cap, but more than one per child.
const TWO_IDS_SELECT: &str = "fn select(ctx, archive) {\n    [\"0\", \"0\"]\n}\n";
/// A record that returns a 100 KB annotation (archived with every generation once).
const HUGE_RECORD: &str = "fn annotate(ctx, child) {\n    let blob = \"\";\n    blob.pad(100000, 'x');\n    #{x_blob: blob}\n}\n";

fn oversized_select_and_record(c: &mut Ctx) -> Check {
    let archive_bytes =
        |t: &Trial| std::fs::metadata(t.ws.join(".evolve/archive.jsonl")).map_or(0, |m| m.len());
    if c.rng.below(2) == 0 {
        let (ids, script) = if c.rng.below(2) == 0 {
            (1000, MANY_IDS_SELECT)
        } else {
            (2, TWO_IDS_SELECT)
        };
        let t = run_one(
            c,
            &Spec {
                select_script: Some(script),
                ..Spec::default()
            },
        )?;
        let selects = events(&t.ws)?
            .iter()
            .filter(|e| e["type"] == "select")
            .count();
        if selects > 0 {
            return Err(format!("{selects} select decision(s) were archived"));
        }
        // Select fails for the whole generation before any child has a parent, so the
        // check reads gen 1's status event rather than its row.
        let (status, reason) = checks::stop_reason(&t, "1")?.ok_or("gen 1 has no status event")?;
        let returned = format!("select returned {ids} parent ids");
        let needles = ["select", "malformed_result", returned.as_str()];
        if status != "operator_failed" || needles.iter().any(|n| !reason.contains(n)) {
            return Err(format!("gen 1 stopped as {status}: {reason}"));
        }
        never_evaluated(&t, "1")?;
        // `settled` would also require every row to name its parent, which no row of a
        // generation whose select failed can: check the rest of it here.
        let v = checks::verify_clean(c.lab, &t)?;
        if checks::row(&checks::log(c.lab, &t)?, "1")?["eligible"] != false {
            return Err("gen 1, whose select failed, is an eligible parent".into());
        }
        champion_is(&v.champion.ok_or("`evolve verify` names no champion")?, "0")?;
        checks::champion_reproduces(&t)?;
        let done = "gen 1: operator_failed (select, malformed_result); champion gen 0 re-evaluates";
        return Ok(format!(
            "select, {ids} ids: {done}; archive {} bytes",
            archive_bytes(&t)
        ));
    }
    let t = run_one(
        c,
        &Spec {
            record_script: Some(HUGE_RECORD),
            ..Spec::default()
        },
    )?;
    let events = events(&t.ws)?;
    let record = events
        .iter()
        .rfind(|e| e["type"] == "record" && e["genid"] == "1")
        .ok_or("gen 1 has no record event")?;
    let error = record["body"]["error"].as_str().unwrap_or("");
    if record["body"]["annotations"] != json!({})
        || !error.contains("malformed_result")
        || !error.contains("65536")
    {
        return Err(format!(
            "gen 1's record event keeps {} (error: {error:?})",
            record["body"]["annotations"]
        ));
    }
    let bytes = archive_bytes(&t);
    if bytes > 1 << 20 {
        return Err(format!("the archive is {bytes} bytes after one generation"));
    }
    let done = accepted(c, &t)?;
    Ok(format!(
        "record, 100 KB annotation: refused, annotations {{}}; archive {bytes} bytes; {done}"
    ))
}
