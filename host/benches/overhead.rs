//! The six framework operations of RSIHub's overhead table (Table 5), measured on this
//! implementation with the same names, each median printed beside RSIHub's.
//!
//! Run: `cargo bench -p evolve --bench overhead`. Results are recorded in
//! docs/benchmarks.md.

use evolve::lifecycle::{self, child};
use evolve::sandbox::{Sandbox, SandboxConfig};
use evolve::workspace::{init, layout};
use evolve_archive::{Archive, ExperimentKey, champion, eligibility, types};
use evolve_snapshot::{Limits, Oid, Store, Surface};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(name: &str, d: Duration, rsihub_ms: f64) {
    let ms = d.as_secs_f64() * 1e3;
    println!(
        "{name:<62} {ms:>9.2} ms   RSIHub {rsihub_ms:>6.0} ms   {:>6.0}× lower",
        rsihub_ms / ms
    );
}

fn time<T>(n: usize, mut f: impl FnMut(usize) -> T) -> Duration {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        std::hint::black_box(f(i));
        v.push(t.elapsed());
    }
    median(v)
}

fn write_exec(p: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A recipe directory: a target with `files` files and four tasks.
fn experiment(dir: &Path, files: usize) {
    std::fs::create_dir_all(dir.join("target/src")).unwrap();
    std::fs::write(
        dir.join("target/agent.toml"),
        "command = [\"./agent.sh\"]\n",
    )
    .unwrap();
    write_exec(
        &dir.join("target/agent.sh"),
        "#!/bin/sh\necho 1 > \"$EVOLVE_APP_DIR/answer.txt\"\n",
    );
    for i in 0..files {
        std::fs::write(
            dir.join(format!("target/src/m{:02}/f{i:04}.txt", i % 40))
                .tap_dir(),
            format!("file {i}\n"),
        )
        .unwrap();
    }
    for t in 0..4 {
        let d = dir.join(format!("tasks/t{t}"));
        std::fs::create_dir_all(d.join("environment")).unwrap();
        std::fs::write(d.join("task.toml"), "version = \"1.0\"\n").unwrap();
        std::fs::write(d.join("instruction.md"), "Answer.\n").unwrap();
        write_exec(
            &d.join("tests/test.sh"),
            "#!/bin/sh\ncat /app/answer.txt > /logs/verifier/reward.txt\n",
        );
    }
    std::fs::write(
        dir.join("recipe.yaml"),
        "experiment: {name: bench}\ntarget: {path: target}\nsurface: {include: [\"target/**\"]}\n\
         operators: {select: {operator: greedy}, rollout: {operator: noop}, mutate: {operator: perturb, config: {files: [{path: target/params.json, fields: [a]}]}}, gate: {operator: hillclimb}, record: {operator: notes}}\n\
         evaluator: {dataset: tasks}\n",
    )
    .unwrap();
}

trait TapDir {
    fn tap_dir(self) -> Self;
}
impl TapDir for std::path::PathBuf {
    fn tap_dir(self) -> Self {
        std::fs::create_dir_all(self.parent().unwrap()).unwrap();
        self
    }
}

/// A stamped evaluation over 20 tasks.
fn stamp(
    genid: &str,
    generation: u64,
    parent: Option<&str>,
    purpose: &str,
    evaluator: &str,
) -> Map<String, Value> {
    let mut tasks = Map::new();
    let mut sum = 0.0;
    for t in 0..20u64 {
        let r = ((t * 7 + generation * 13) % 10) as f64 / 10.0;
        sum += r;
        tasks.insert(format!("task-{t:02}"), json!({"trials": [{"trial": 0, "status": "benchmark_complete", "reward": r, "timeout_owner": null, "error_kind": null}]}));
    }
    let commit = evolve_archive::sha256_hex(genid.as_bytes())[..40].to_string();
    match json!({
        "candidate_commit": commit, "candidate_tree": commit, "parent": parent, "generation": generation,
        "evaluator_fingerprint": evaluator, "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt",
        "contract_id": "c", "purpose": purpose, "outcome": "benchmark_complete",
        "trials": 20, "expected_trials": 20, "scoreable_trials": 20,
        "task_vector": {"schema_version": 1, "tasks": tasks}, "score": sum / 20.0,
        "cost_usd": 0.0, "timings": {"wall_s": 3.2}, "attempt": 1, "source_attempts": [],
    }) {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

fn body(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// A 1,000-generation archive (4,003 events) written by the real writer.
fn thousand_generations(path: &Path) -> Vec<(String, String)> {
    let evaluator = "e".repeat(40);
    let key = ExperimentKey::from_seed("bench", [7u8; 32]);
    let mut a = Archive::open(path, "bench", key).unwrap();
    let at = "2026-11-30T00:00:00Z";
    a.append(types::GENESIS, None, body(json!({"fixed_identity": {"evaluator_fingerprint": evaluator, "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"}})), at).unwrap();
    let mut tags = vec![];
    let commit0 = evolve_archive::sha256_hex(b"0")[..40].to_string();
    a.append(
        types::GENERATION,
        Some("0"),
        body(json!({"parent": null, "commit": commit0})),
        at,
    )
    .unwrap();
    a.append(
        types::EVALUATION,
        Some("0"),
        stamp("0", 0, None, "genesis", &evaluator),
        at,
    )
    .unwrap();
    a.append(
        types::GATE,
        Some("0"),
        body(json!({"verdict": "keep", "reason": "baseline"})),
        at,
    )
    .unwrap();
    tags.push(("0".to_string(), commit0));
    let mut best = "0".to_string();
    for g in 1..=1000u64 {
        let id = g.to_string();
        let c = evolve_archive::sha256_hex(id.as_bytes())[..40].to_string();
        a.append(
            types::GENERATION,
            Some(&id),
            body(json!({"parent": best, "commit": c})),
            at,
        )
        .unwrap();
        let s = stamp(&id, g, Some(&best), "candidate", &evaluator);
        a.append(types::EVALUATION, Some(&id), s, at).unwrap();
        let keep = g % 3 == 0;
        a.append(
            types::GATE,
            Some(&id),
            body(json!({"verdict": if keep { "keep" } else { "discard" }, "reason": "r"})),
            at,
        )
        .unwrap();
        a.append(
            types::RECORD,
            Some(&id),
            body(json!({"annotations": {"note": "n"}})),
            at,
        )
        .unwrap();
        if keep {
            best = id.clone();
        }
        tags.push((id, c));
    }
    tags
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // SAFETY: single-threaded setup before any other thread reads the environment.
    unsafe { std::env::set_var("EVOLVE_KEY_DIR", w.join("keys")) };
    let sb = Sandbox::new(SandboxConfig::default()).unwrap();
    println!("evolve framework overhead (medians) vs RSIHub Table 5\n");

    // 1. Workspace init (a 10-file target, four tasks, five built-in operators).
    experiment(&w.join("small"), 10);
    let recipe = std::fs::read_to_string(w.join("small/recipe.yaml")).unwrap();
    let init_one = |i: usize| {
        let req = init::InitRequest {
            dir: w.join(format!("ws-init-{i}")),
            recipe_text: recipe.clone(),
            recipe_base: w.join("small"),
            seed: None,
            tasks: None,
        };
        rt.block_on(init::init(&sb, &req)).unwrap()
    };
    init_one(999); // compile the five components once (an installed binary has them cached)
    report("workspace init", time(15, init_one), 155.0);

    // 2. Candidate worktree + snapshot on a 1,000-file target.
    experiment(&w.join("big"), 1000);
    let big = std::fs::read_to_string(w.join("big/recipe.yaml")).unwrap();
    let ws_dir = w.join("ws-big");
    rt.block_on(init::init(
        &sb,
        &init::InitRequest {
            dir: ws_dir.clone(),
            recipe_text: big,
            recipe_base: w.join("big"),
            seed: None,
            tasks: None,
        },
    ))
    .unwrap();
    let store = Store::open(&ws_dir).unwrap();
    let parent: Oid = store.tag_target("gen/0").unwrap().unwrap();
    let worktree = |i: usize| ws_dir.join(format!("runs/worktrees/gen-{i}"));
    report(
        "candidate worktree + snapshot (1,000-file target)",
        time(30, |i| {
            let wt = worktree(i);
            store.materialize(parent, &wt).unwrap();
            std::fs::write(wt.join("target/src/m07/f0007.txt"), format!("edited {i}\n")).unwrap();
            let snap = store
                .snapshot(
                    &wt,
                    Some(parent),
                    &Limits::default(),
                    &layout::skip_top_level,
                )
                .unwrap();
            store
                .commit(snap.tree, Some(parent), "bench", false)
                .unwrap()
        }),
        756.0,
    );

    // 3. Surface validation: the actual diff of a mutated child against its parent, then
    //    the include/exclude globs, implicit excludes and link checks.
    let surface = Surface::new(
        &["target/**".to_string()],
        &["target/src/m39/**".to_string()],
    )
    .unwrap();
    let wt = worktree(0);
    report(
        "surface validation (actual tree diff + globs)",
        time(30, |_| {
            let snap = store
                .snapshot(
                    &wt,
                    Some(parent),
                    &Limits::default(),
                    &layout::skip_top_level,
                )
                .unwrap();
            assert!(surface.check(&snap.changes).is_empty());
            snap.changes.len()
        }),
        27.0,
    );

    // 4. Evaluation stamp + archive update (validate, append + receipt with fsyncs,
    //    champion recomputed from the writer's state).
    let arch_dir = w.join("arch-append");
    let key = ExperimentKey::from_seed("bench", [7u8; 32]);
    let mut a = Archive::open(&arch_dir.join("archive.jsonl"), "bench", key).unwrap();
    let ev = "e".repeat(40);
    a.append(types::GENESIS, None, body(json!({"fixed_identity": {"evaluator_fingerprint": ev, "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"}})), "2026-11-30T00:00:00Z").unwrap();
    report(
        "evaluation stamp + archive update",
        time(50, |i| {
            let g = (i + 1).to_string();
            a.append(
                types::EVALUATION,
                Some(&g),
                stamp(&g, i as u64 + 1, Some("0"), "candidate", &ev),
                "2026-11-30T00:00:00Z",
            )
            .unwrap();
            let rows = a.rows();
            let el = eligibility(&rows, a.fixed_identity().as_ref(), &|_| None);
            champion(&rows, &el)
        }),
        32.0,
    );

    // 5 and 6 on a 1,000-generation archive.
    let big_archive = w.join("arch-1000/archive.jsonl");
    let tags = thousand_generations(&big_archive);
    let lookup = |g: &str| tags.iter().find(|(id, _)| id == g).map(|(_, c)| c.clone());
    report(
        "state verification + champion recomputation (1,000 generations)",
        time(15, |_| {
            let a = Archive::open(
                &big_archive,
                "bench",
                ExperimentKey::from_seed("bench", [7u8; 32]),
            )
            .unwrap();
            let rows = a.rows();
            let el = eligibility(&rows, a.fixed_identity().as_ref(), &lookup);
            champion(&rows, &el)
        }),
        653.0,
    );
    report(
        "recovery replay (1,000 generations)",
        time(15, |_| {
            let a = Archive::open(
                &big_archive,
                "bench",
                ExperimentKey::from_seed("bench", [7u8; 32]),
            )
            .unwrap();
            let state = lifecycle::state_from(&a, &lookup);
            let pending = (1..=1001u32)
                .filter(|g| child::next_step(&state, &g.to_string()) != child::Next::Done)
                .count();
            assert_eq!(pending, 1, "only generation 1001 is left to do");
            pending
        }),
        1007.0,
    );
}
