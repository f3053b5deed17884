//! What one operator invocation costs, side by side:
//!
//! * cold: compile the component from bytes, then instantiate and call;
//! * cached in memory: instantiate and call a component compiled earlier;
//! * on-disk cache: load the host-written `.cwasm` (MAC checked), instantiate, call;
//! * python3: spawn `python3` for the same JSON-in, JSON-out selection, which is what a
//!   framework running each operator as a subprocess pays per call.
//!
//! Every wasm call gets its real grants (fresh store, `/target` and `/scratch`
//! preopens, capped stdout/stderr, memory limiter, deadline).
//! Run: `cargo bench -p evolve --bench operator_call`.

use evolve::builtin;
use evolve::sandbox::types::*;
use evolve::sandbox::{
    Capabilities, GrantRequest, Grants, Limits, LoadedOperator, Sandbox, SandboxConfig, StageInput,
};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let checkout = work.path().join("candidate");
    let scratch = work.path().join("scratch");
    std::fs::create_dir_all(checkout.join("target")).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    let cache_dir = work.path().join("cache");
    let op = builtin::find("select", "greedy").expect("select/greedy is built in");
    let grants = Grants::for_stage(
        Stage::Select,
        &GrantRequest {
            checkout: &checkout,
            operators_in_surface: false,
            scratch: &scratch,
            feedback: None,
        },
    );
    let limits = Limits {
        timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let archive = sample_archive(50);
    let input = || StageInput::Select {
        ctx: ctx(),
        archive: archive.clone(),
    };

    let sb = Sandbox::new(SandboxConfig {
        cache_dir: Some(cache_dir.clone()),
        fuel: false,
    })
    .unwrap();
    let call = |sb: &Sandbox, loaded: &LoadedOperator| {
        let report =
            rt.block_on(sb.call(loaded, &grants, &limits, Capabilities::default(), input()));
        assert!(report.outcome.is_ok(), "{:?}", report.outcome);
    };

    let cold = measure(5, || {
        let fresh = Sandbox::new(SandboxConfig::default()).unwrap();
        let loaded = fresh
            .load_bytes(Stage::Select, op.bytes, "bench".into())
            .unwrap();
        call(&fresh, &loaded);
    });
    let loaded = sb
        .load_bytes(Stage::Select, op.bytes, "bench".into())
        .unwrap();
    let memory = measure(500, || call(&sb, &loaded));
    let disk = measure(200, || {
        sb.clear_memory_cache();
        let loaded = sb
            .load_bytes(Stage::Select, op.bytes, "bench".into())
            .unwrap();
        assert_eq!(loaded.cache, evolve::sandbox::CacheSource::Disk);
        call(&sb, &loaded);
    });
    let python = python_call(&archive);

    println!("operator invocation (select/greedy over a 50-row archive), medians:");
    row("cold compile + instantiate + call", cold, 5);
    row("cached in memory: instantiate + call", memory, 500);
    row("on-disk cache: load + instantiate + call", disk, 200);
    match python {
        Some(p) => {
            row("python3 subprocess, JSON in/out", p, 30);
            println!(
                "in-memory cached call is {:.0}x cheaper than the python3 subprocess (goal: >= 50x, <= 0.5 ms)",
                p.as_secs_f64() / memory.as_secs_f64()
            );
        }
        None => println!("python3 subprocess: skipped (python3 not found)"),
    }
}

fn row(name: &str, d: Duration, n: usize) {
    println!("  {name:<45} {:>10.3} ms  (n={n})", d.as_secs_f64() * 1e3);
}

fn measure(n: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

const PY_GREEDY: &str = "import json,sys\nrows=json.load(sys.stdin)['rows']\nbest=None\nfor r in rows:\n    if r['eligible'] and r['score'] is not None and (best is None or r['score']>best['score']): best=r\nprint(json.dumps({'parents':[best['generation_id']]}))\n";

fn python_call(archive: &ArchiveView) -> Option<Duration> {
    Command::new("python3").arg("--version").output().ok()?;
    let rows: Vec<serde_json::Value> = archive
        .rows
        .iter()
        .map(|r| serde_json::json!({"generation_id": r.generation_id, "eligible": r.eligible, "score": r.score}))
        .collect();
    let payload = serde_json::json!({ "rows": rows }).to_string();
    Some(measure(30, || {
        let mut child = Command::new("python3")
            .args(["-c", PY_GREEDY])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
    }))
}

fn ctx() -> CallContext {
    CallContext {
        generation_id: "7".into(),
        parent: None,
        generation: 7,
        seed: 1,
        config: "{}".into(),
        deadline_ms: 10_000,
    }
}

fn sample_archive(n: usize) -> ArchiveView {
    let rows = (0..n)
        .map(|i| ArchiveRow {
            generation_id: i.to_string(),
            parent: i.checked_sub(1).map(|p| p.to_string()),
            generation: i as u32,
            status: GenerationStatus::Complete,
            score: Some((i * 37 % 101) as f64 / 100.0),
            eligible: i % 3 != 2,
            verdict: Some(Verdict::Keep),
            children: 1,
            task_vector: vec![TaskScore {
                task: "train-1".into(),
                trials: vec![Trial {
                    repetition: 0,
                    status: TrialStatus::BenchmarkComplete,
                    reward: Some(1.0),
                }],
            }],
            cost_usd: 0.0,
            annotations: "{}".into(),
        })
        .collect();
    ArchiveView {
        rows,
        champion: None,
    }
}
