//! What the benchmarks run on: a recipe directory with a target of many files and a small
//! task set, and a long archive written by the real writer.

use evolve_archive::{
    Archive, Event, ExperimentKey, Receipt, check_stamp, genesis_anchor, receipts_path_for,
    sha256_hex, types,
};
use serde_json::{Map, Value, json};
use std::path::Path;

/// The experiment id of the benchmark archives.
pub const EXPERIMENT: &str = "bench";

/// The recipe every benchmark workspace uses: the cheapest built-in operators (greedy
/// select, no rollout, perturb one number, a hill-climbing gate, notes), no final anchor.
pub const RECIPE: &str = "experiment: {name: bench, max_generations: 1000}\n\
    target: {path: target}\n\
    surface: {include: [\"target/**\"]}\n\
    operators:\n  select: {operator: greedy}\n  rollout: {operator: noop}\n  \
    mutate: {operator: perturb, config: {files: [{path: target/params.json, fields: [a]}]}}\n  \
    gate: {operator: hillclimb, config: {strict: true}}\n  record: {operator: notes}\n\
    evaluator: {dataset: tasks, anchor: {final: false}}\n";

fn write(path: &Path, body: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write_exec(path: &Path, body: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    write(path, body)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))
}

/// A recipe directory at `dir`: `recipe.yaml` ([`RECIPE`]), a target of `files` source
/// files in 40 directories plus `agent.toml`, `agent.sh` and `params.json`, and four tasks.
pub fn experiment(dir: &Path, files: usize) -> Result<(), String> {
    let target = dir.join("target");
    write(&target.join("agent.toml"), "command = [\"./agent.sh\"]\n")?;
    write_exec(
        &target.join("agent.sh"),
        "#!/bin/sh\necho 1 > \"$EVOLVE_APP_DIR/answer.txt\"\n",
    )?;
    write(&target.join("params.json"), "{\"a\": 1.0}\n")?;
    source_files(&target, files)?;
    for t in 0..4 {
        let task = dir.join(format!("tasks/t{t}"));
        // A file, not an empty directory: git keeps no empty directories, so an empty
        // `environment/` would be missing from the workspace's checkout and the task's
        // digest would no longer match the frozen one.
        write(&task.join("environment/Dockerfile"), "FROM scratch\n")?;
        write(&task.join("task.toml"), "version = \"1.0\"\n")?;
        write(&task.join("instruction.md"), "Answer.\n")?;
        write_exec(
            &task.join("tests/test.sh"),
            "#!/bin/sh\ncat /app/answer.txt > /logs/verifier/reward.txt\n",
        )?;
    }
    write(&dir.join("recipe.yaml"), RECIPE)
}

/// The target's `files` source files, in 40 directories under `dir/src`.
pub fn source_files(dir: &Path, files: usize) -> Result<(), String> {
    for i in 0..files {
        let path = dir.join(format!("src/m{:02}/f{i:04}.txt", i % 40));
        write(&path, &format!("file {i}\n"))?;
    }
    Ok(())
}

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A stamped evaluation of generation `genid` over 20 tasks.
pub fn stamp(
    genid: &str,
    generation: u64,
    parent: Option<&str>,
    purpose: &str,
) -> Map<String, Value> {
    let mut tasks = Map::new();
    let mut sum = 0.0;
    for t in 0..20u64 {
        let r = ((t * 7 + generation * 13) % 10) as f64 / 10.0;
        sum += r;
        let trial = json!({"trial": 0, "status": "benchmark_complete", "reward": r, "timeout_owner": null, "error_kind": null});
        tasks.insert(format!("task-{t:02}"), json!({ "trials": [trial] }));
    }
    let commit = &sha256_hex(genid.as_bytes())[..40];
    body(json!({
        "candidate_commit": commit, "candidate_tree": commit, "parent": parent, "generation": generation,
        "evaluator_fingerprint": evaluator(), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt",
        "contract_id": "c", "purpose": purpose, "outcome": "benchmark_complete",
        "trials": 20, "expected_trials": 20, "scoreable_trials": 20,
        "task_vector": {"schema_version": 1, "tasks": tasks}, "score": sum / 20.0,
        "cost_usd": 0.0, "timings": {"wall_s": 3.2}, "attempt": 1, "source_attempts": [],
    }))
}

fn evaluator() -> String {
    "e".repeat(40)
}

/// The signing key of every benchmark archive.
pub fn key() -> ExperimentKey {
    ExperimentKey::from_seed(EXPERIMENT, [7u8; 32])
}

const AT: &str = "2026-11-30T00:00:00Z";

/// A new archive at `path` holding only its genesis event.
pub fn genesis(path: &Path) -> Result<Archive, String> {
    let mut a = Archive::open(path, EXPERIMENT, key()).map_err(|e| e.to_string())?;
    let identity = json!({"evaluator_fingerprint": evaluator(), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"});
    append(
        &mut a,
        types::GENESIS,
        None,
        json!({ "fixed_identity": identity }),
    )?;
    Ok(a)
}

fn append(a: &mut Archive, ty: &str, genid: Option<&str>, v: Value) -> Result<(), String> {
    a.append(ty, genid, body(v), AT)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Append one evaluation of `genid` (for the archive-update benchmark).
pub fn append_evaluation(a: &mut Archive, genid: &str, generation: u64) -> Result<(), String> {
    let s = Value::Object(stamp(genid, generation, Some("0"), "candidate"));
    append(a, types::EVALUATION, Some(genid), s)
}

/// A `count`-generation archive (4·count + 4 events: genesis, then generation, evaluation,
/// gate and, except for gen 0, record per generation) with its receipts, exactly as the
/// writer lays them out. The lines are written in one go rather than through
/// [`Archive::append`], whose two fsyncs per event would make this fixture take most of a
/// minute; the benchmark then opens it with the real reader, which checks every line,
/// link and signature. Returns the `gen/<id>` tags it certifies, as `(genid, commit)`.
pub fn generations(path: &Path, count: u64) -> Result<Vec<(String, String)>, String> {
    let mut log = Log::new();
    let identity = json!({"evaluator_fingerprint": evaluator(), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"});
    log.push(
        types::GENESIS,
        None,
        json!({"experiment": EXPERIMENT, "fixed_identity": identity}),
    )?;
    let mut tags = Vec::new();
    let mut best = "0".to_string();
    for g in 0..=count {
        let id = g.to_string();
        let commit = sha256_hex(id.as_bytes())[..40].to_string();
        let parent = (g > 0).then(|| best.clone());
        log.push(
            types::GENERATION,
            Some(&id),
            json!({"parent": parent, "commit": commit}),
        )?;
        let purpose = if g == 0 { "genesis" } else { "candidate" };
        let s = Value::Object(stamp(&id, g, parent.as_deref(), purpose));
        log.push(types::EVALUATION, Some(&id), s)?;
        let keep = g % 3 == 0;
        let verdict = json!({"verdict": if keep { "keep" } else { "discard" }, "reason": "r"});
        log.push(types::GATE, Some(&id), verdict)?;
        if g > 0 {
            log.push(
                types::RECORD,
                Some(&id),
                json!({"annotations": {"note": "n"}}),
            )?;
        }
        if keep {
            best = id.clone();
        }
        tags.push((id, commit));
    }
    log.write(path)?;
    Ok(tags)
}

/// Archive and receipt lines built in memory: canonical, chained and signed.
struct Log {
    key: ExperimentKey,
    prev: String,
    seq: u64,
    archive: Vec<u8>,
    receipts: Vec<u8>,
}

impl Log {
    fn new() -> Log {
        Log {
            key: key(),
            prev: genesis_anchor(EXPERIMENT),
            seq: 0,
            archive: Vec::new(),
            receipts: Vec::new(),
        }
    }

    fn push(&mut self, ty: &str, genid: Option<&str>, v: Value) -> Result<(), String> {
        let body = body(v);
        if ty == types::EVALUATION {
            let problems = check_stamp(genid, &body);
            if !problems.is_empty() {
                return Err(format!("the fixture's stamp is invalid: {problems:?}"));
            }
        }
        let event = Event {
            seq: self.seq,
            prev: std::mem::take(&mut self.prev),
            event_type: ty.to_string(),
            genid: genid.map(str::to_string),
            at: AT.to_string(),
            body,
        };
        let line = event.canonical_line();
        let sha = sha256_hex(&line);
        let receipt = Receipt {
            seq: self.seq,
            event_sha256: sha.clone(),
            key_id: self.key.key_id().to_string(),
            sig: self.key.sign_receipt(self.seq, &sha),
        };
        self.archive.extend_from_slice(&line);
        self.archive.push(b'\n');
        self.receipts.extend(receipt.line());
        self.prev = sha;
        self.seq += 1;
        Ok(())
    }

    fn write(&self, path: &Path) -> Result<(), String> {
        write(path, "")?;
        let put = |p: &Path, bytes: &[u8]| {
            std::fs::write(p, bytes).map_err(|e| format!("cannot write {}: {e}", p.display()))
        };
        put(path, &self.archive)?;
        put(&receipts_path_for(path), &self.receipts)
    }
}
