//! What one operator invocation costs: compiled cold, cached in memory, cached on disk,
//! and a `python3` subprocess (what a framework running operators as scripts pays at
//! least, before its operator does anything).

use super::stats::{Stat, time};
use crate::builtin;
use crate::sandbox::types::*;
use crate::sandbox::{
    CacheSource, Capabilities, GrantRequest, Grants, Limits, LoadedOperator, Sandbox,
    SandboxConfig, StageInput,
};
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::runtime::Runtime;

/// The operator invocation costs, each with its order statistics.
#[derive(Debug, Clone, Serialize)]
pub struct Invocation {
    /// `select/greedy` over a 50-row archive, the call every measurement makes.
    pub operator: &'static str,
    /// A fresh engine: compile the component, instantiate it, call it.
    pub cold: Stat,
    /// Instantiate a component compiled earlier and call it (fresh store and grants).
    pub cached: Stat,
    /// Load the host-written precompiled `.cwasm` (MAC checked), instantiate, call.
    pub disk_cache: Stat,
    /// `python3 -c pass`; `None` when `python3` is not installed.
    pub python_subprocess: Option<Stat>,
    /// The Python median divided by the cached median.
    pub cached_vs_python: Option<f64>,
}

struct Call<'a> {
    rt: &'a Runtime,
    grants: Grants,
    limits: Limits,
    archive: ArchiveView,
}

impl Call<'_> {
    fn run(&self, sb: &Sandbox, op: &LoadedOperator) -> Result<(), String> {
        let input = StageInput::Select {
            ctx: ctx(),
            archive: self.archive.clone(),
        };
        let report = self.rt.block_on(sb.call(
            op,
            &self.grants,
            &self.limits,
            Capabilities::default(),
            input,
        ));
        report
            .outcome
            .map(|_| ())
            .map_err(|f| format!("select/greedy failed: {f}"))
    }
}

/// Measure in `work` (an empty directory): `n` cold calls, `10·n` cached calls, `n` from
/// the disk cache and `n` Python subprocesses.
pub fn measure(rt: &Runtime, work: &Path, n: usize) -> Result<Invocation, String> {
    let op = builtin::find("select", "greedy").ok_or("select/greedy is not built in")?;
    let checkout = work.join("candidate");
    let scratch = work.join("scratch");
    for dir in [checkout.join("target"), scratch.clone()] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
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
    let call = Call {
        rt,
        grants,
        limits,
        archive: sample_archive(50),
    };
    let sandbox = |cache_dir: Option<&Path>| {
        Sandbox::new(SandboxConfig {
            cache_dir: cache_dir.map(Path::to_path_buf),
            fuel: false,
        })
        .map_err(|e| format!("cannot start the sandbox: {e}"))
    };
    let load = |sb: &Sandbox| {
        sb.load_bytes(Stage::Select, op.bytes, "bench".into())
            .map_err(|e| format!("cannot load select/greedy: {e}"))
    };
    let cold = time(n, |_| {
        let fresh = sandbox(None)?;
        call.run(&fresh, &load(&fresh)?)
    })?;
    let sb = sandbox(Some(&work.join("cache")))?;
    let loaded = load(&sb)?;
    call.run(&sb, &loaded)?; // warm: the first call builds the stage's linker
    let cached = time(10 * n, |_| call.run(&sb, &loaded))?;
    let disk_cache = time(n, |_| {
        sb.clear_memory_cache();
        let loaded = load(&sb)?;
        if loaded.cache != CacheSource::Disk {
            return Err(format!("expected a disk-cache hit, got {:?}", loaded.cache));
        }
        call.run(&sb, &loaded)
    })?;
    let python_subprocess = python(n)?;
    Ok(Invocation {
        operator: "select/greedy over a 50-row archive",
        cold,
        cached,
        disk_cache,
        cached_vs_python: python_subprocess.map(|p| p.median_ms / cached.median_ms.max(1e-6)),
        python_subprocess,
    })
}

/// `python3 -c pass`, or `None` when there is no `python3` to run.
fn python(n: usize) -> Result<Option<Stat>, String> {
    if Command::new("python3").arg("--version").output().is_err() {
        return Ok(None);
    }
    time(n, |_| {
        let out = Command::new("python3")
            .args(["-c", "pass"])
            .output()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("python3 -c pass exited with {}", out.status))
        }
    })
    .map(Some)
}

fn ctx() -> CallContext {
    CallContext {
        generation_id: "7".into(),
        parent: None,
        generation: 7,
        seed: 1,
        config: "{}".into(),
        deadline_ms: 10_000,
        script: None,
    }
}

fn sample_archive(n: usize) -> ArchiveView {
    let row = |i: usize| ArchiveRow {
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
    };
    ArchiveView {
        rows: (0..n).map(row).collect(),
        champion: None,
    }
}
