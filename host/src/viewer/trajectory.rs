//! One trial of a certified evaluation, with its trajectory: `GET
//! /api/generations/<genid>/evaluations/<line>/trials/<task>/<trial>`.
//!
//! As everywhere in the viewer, the request names no file: the generation is looked up
//! among the archived rows, the evaluation among its certified ones by archive line, the
//! task and the trial in that evaluation's stamped task vector. Only then is the trial's
//! directory derived, as `lifecycle/evaluate.rs` lays it out: `runs/evaluations/<purpose>/
//! gen-<id>/attempt-<n>/out/trials/<task>__r<k>/`, in the evaluation's own attempt or, for
//! a trial it reused, in one of its `source_attempts`. Its `trajectory.json` is read
//! without following a link, up to [`READ_CAP`], and served bounded
//! ([`evaluator_harbor::trajectory::summary::bound`]).
//!
//! Gate and sealed trials are shown like any other: the viewer is the researcher's own
//! tool on the host, and shows sealed results already (docs/viewer.md). It never writes.

use crate::workspace::Workspace;
use evaluator_harbor::result::trial_name;
use evaluator_harbor::trajectory::{self, summary};
use evolve_archive::{Evaluation, Row};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The largest `trajectory.json` the viewer reads.
pub const READ_CAP: u64 = 64 << 20;
/// What the viewer serves of one: far more than operators get, still bounded (1 Mi
/// characters of JSON).
pub const VIEW_BOUNDS: summary::Bounds = summary::Bounds {
    field_chars: 20_000,
    max_steps: 1000,
    max_items: 200,
    total_chars: 1 << 20,
};

/// The attempts whose directories may hold `ev`'s trials: its own, then the ones it reused
/// trials from (latest first, as `reusable_trials` prefers them).
fn attempts(ev: &Evaluation) -> Vec<u64> {
    let mut out: Vec<u64> = ev
        .stamp
        .get("attempt")
        .and_then(Value::as_u64)
        .into_iter()
        .collect();
    let mut sources: Vec<u64> = ev
        .stamp
        .get("source_attempts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    sources.sort_unstable_by(|a, b| b.cmp(a));
    out.extend(sources);
    out
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// The directory of `task`'s trial `rep` of `ev`, and the attempt it is in, if one exists.
pub fn trial_dir(
    ws: &Workspace,
    genid: &str,
    ev: &Evaluation,
    task: &str,
    rep: u32,
) -> Option<(u64, PathBuf)> {
    let purpose = ev.purpose()?;
    // A purpose is one path component the host wrote; anything else is not looked up.
    if purpose.is_empty() || purpose.contains(['/', '\\']) || purpose.starts_with('.') {
        return None;
    }
    if !evaluator_harbor::task::valid_task_name(task) {
        return None;
    }
    let base = ws.paths.evaluations(purpose, genid);
    attempts(ev).into_iter().find_map(|a| {
        let dir = base
            .join(format!("attempt-{a}"))
            .join("out/trials")
            .join(trial_name(task, rep));
        is_real_dir(&dir).then_some((a, dir))
    })
}

/// Whether the trial's directory holds a `trajectory.json` (a regular file, never a link).
pub fn has_trajectory(ws: &Workspace, genid: &str, ev: &Evaluation, task: &str, rep: u32) -> bool {
    trial_dir(ws, genid, ev, task, rep).is_some_and(|(_, d)| {
        std::fs::symlink_metadata(trajectory::path(&d)).is_ok_and(|m| m.is_file())
    })
}

/// The trial `stamped` (task `task` of `ev`, a certified evaluation of `row`) with its
/// trajectory, read bounded, or why there is none.
pub fn trial(ws: &Workspace, row: &Row, ev: &Evaluation, task: &str, stamped: &Value) -> Value {
    let rep = stamped
        .get("trial")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    let mut out = json!({
        "genid": row.genid, "line": ev.line, "purpose": ev.purpose(), "task": task,
        "trial": rep, "trial_name": trial_name(task, rep),
        "status": stamped.get("status"), "reward": stamped.get("reward"),
        "timeout_owner": stamped.get("timeout_owner"), "error_kind": stamped.get("error_kind"),
        "attempt": Value::Null, "available": false,
    });
    let Some((attempt, dir)) = trial_dir(ws, &row.genid, ev, task, rep) else {
        out["why"] = json!(
            "the trial's directory is not in runs/evaluations (removed by `evolve gc`, or never written)"
        );
        return out;
    };
    out["attempt"] = json!(attempt);
    add_trajectory(&mut out, &dir);
    out
}

/// The `trajectory.json` in `dir`, read without following a link and bounded, into `out`
/// (`available`, `counts`, `cut`, `trajectory`), or why it could not be (`why`).
fn add_trajectory(out: &mut Value, dir: &Path) {
    match summary::load(dir, READ_CAP) {
        Ok(t) => {
            let bounded = summary::bound(&t, &VIEW_BOUNDS, &|s: &str| s.to_string());
            out["available"] = json!(true);
            out["counts"] = json!(summary::counts(&t));
            out["cut"] = json!(bounded.cut);
            out["trajectory"] = serde_json::to_value(&bounded.trajectory).unwrap_or(Value::Null);
        }
        Err(why) => out["why"] = json!(why.to_string()),
    }
}

/// The file a stage's operator leaves its own trajectory in, in its `/scratch` (e.g. the
/// conversation of `mutate/coder`), as the run directory keeps it: `runs/gen-<id>/<stage>/scratch/`.
pub const STAGE_SCRATCH: &str = "scratch";

/// Whether the stage directory `dir` holds an operator's trajectory (a regular file in a
/// real `scratch/` directory, never through a link).
pub fn stage_has_trajectory(dir: &Path) -> bool {
    let scratch = dir.join(STAGE_SCRATCH);
    is_real_dir(&scratch)
        && std::fs::symlink_metadata(trajectory::path(&scratch)).is_ok_and(|m| m.is_file())
}

/// The trajectory the operator of `stage` left for generation `genid`, read bounded as a
/// trial's is. The operator wrote it, so it is read like any hostile file: no link is
/// followed, and it is served as data, bounded.
pub fn stage(genid: &str, stage: &str, dir: Option<&Path>) -> Value {
    let mut out = json!({"genid": genid, "stage": stage, "available": false});
    let Some(dir) = dir
        .map(|d| d.join(STAGE_SCRATCH))
        .filter(|d| is_real_dir(d))
    else {
        out["why"] = json!(
            "this stage's run directory holds no scratch directory (never called, or removed by `evolve gc`)"
        );
        return out;
    };
    add_trajectory(&mut out, &dir);
    out
}
