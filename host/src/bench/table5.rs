//! The six framework operations of RSIHub's Table 5, with its names, measured on this
//! implementation's real code paths.

use super::fixture;
use super::stats::{Stat, time};
use crate::layout;
use crate::lifecycle::{self, child};
use crate::sandbox::Sandbox;
use crate::workspace::init;
use evolve_archive::{Archive, champion, eligibility};
use evolve_snapshot::{Limits, Oid, Store, Surface};
use serde::Serialize;
use std::path::Path;
use tokio::runtime::Runtime;

/// Files in the benchmark target (the "realistic target").
pub const TARGET_FILES: usize = 1000;
/// Generations in the benchmark archive.
pub const GENERATIONS: u64 = 1000;

/// One operation: what was measured, its order statistics and RSIHub's median beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub operation: &'static str,
    pub what: &'static str,
    #[serde(flatten)]
    pub stat: Stat,
    pub rsihub_median_ms: f64,
    /// RSIHub's median divided by ours: how many times lower this implementation is.
    pub ratio: f64,
}

fn row(operation: &'static str, what: &'static str, stat: Stat, rsihub_median_ms: f64) -> Row {
    Row {
        operation,
        what,
        stat,
        rsihub_median_ms,
        ratio: rsihub_median_ms / stat.median_ms.max(1e-6),
    }
}

/// Measure all six in `work` (an empty directory) for the recipe directory at
/// `recipe_dir` (a [`fixture::experiment`]), `n` samples each. Also returns the disk's
/// file-creation floor: the target's files written with plain writes, `n` times, right
/// before the candidate worktree row (what any operation that writes the target out,
/// as that row does, cannot go below on this disk in its current state). It is a phase
/// of its own: interleaved with another row's samples, the writeback of its thousand
/// files would be counted in that row.
pub fn measure(
    rt: &Runtime,
    sb: &Sandbox,
    work: &Path,
    recipe_dir: &Path,
    n: usize,
) -> Result<(Vec<Row>, Stat), String> {
    // The first init compiles the five components (an installed binary has them cached).
    let ws = init_workspace(rt, sb, recipe_dir, &work.join("ws"))?;
    let init_stat = time(n, |i| {
        init_workspace(rt, sb, recipe_dir, &work.join(format!("ws-init-{i}")))
    })?;
    let mut rows = vec![row(
        "workspace init",
        "`evolve init` of a 1,000-file target with four tasks and five built-in operators: recipe \
         check (each component normalizes its config), reading the target, task-set freeze, gen/0 \
         written from memory as two synced packs + commit + tag, key, archive genesis (fsynced)",
        init_stat,
        155.0,
    )];
    let floor = time(n, |i| {
        fixture::source_files(&work.join(format!("floor-{i}")), TARGET_FILES)
    })?;
    rows.extend(worktree_and_surface(&ws, n)?);
    rows.push(archive_update(work, n)?);
    rows.extend(state_and_replay(work, n)?);
    Ok((rows, floor))
}

/// `evolve init` of the recipe at `recipe_dir` into `dir`; returns the workspace root.
pub fn init_workspace(
    rt: &Runtime,
    sb: &Sandbox,
    recipe_dir: &Path,
    dir: &Path,
) -> Result<std::path::PathBuf, String> {
    let req = init::InitRequest {
        dir: dir.to_path_buf(),
        recipe_text: fixture::RECIPE.to_string(),
        recipe_base: recipe_dir.to_path_buf(),
        seed: None,
        tasks: None,
    };
    rt.block_on(init::init(sb, &req))
        .map(|done| done.root)
        .map_err(|e| format!("workspace init failed: {e}"))
}

/// Worktree + snapshot of a child, then surface validation of its actual diff.
fn worktree_and_surface(ws: &Path, n: usize) -> Result<Vec<Row>, String> {
    let store = Store::open(ws).map_err(|e| e.to_string())?;
    let parent: Oid = store
        .tag_target("gen/0")
        .map_err(|e| e.to_string())?
        .ok_or("the benchmark workspace has no gen/0 tag")?;
    let worktree = |i: usize| ws.join(format!("runs/worktrees/gen-{i}"));
    let snapshot = |wt: &Path| {
        store
            .snapshot(
                wt,
                Some(parent),
                &Limits::default(),
                &layout::skip_top_level,
            )
            .map_err(|e| e.to_string())
    };
    let edited = "target/src/m07/f0007.txt";
    let worktree_stat = time(n, |i| {
        let wt = worktree(i);
        store.materialize(parent, &wt).map_err(|e| e.to_string())?;
        std::fs::write(wt.join(edited), format!("edited {i}\n")).map_err(|e| e.to_string())?;
        let snap = snapshot(&wt)?;
        store
            .commit(snap.tree, Some(parent), "bench", false)
            .map_err(|e| e.to_string())
    })?;
    let surface = Surface::new(&["target/**".into()], &["target/src/m39/**".into()])
        .map_err(|e| e.to_string())?;
    let wt = worktree(0);
    let surface_stat = time(n, |_| {
        let snap = snapshot(&wt)?;
        match surface.check(&snap.changes).as_slice() {
            [] if snap.changes.len() == 1 => Ok(snap.changes.len()),
            v => Err(format!(
                "unexpected surface result: {} changes, {v:?}",
                snap.changes.len()
            )),
        }
    })?;
    Ok(vec![
        row(
            "candidate worktree + snapshot",
            "materialize the parent commit of the 1,000-file target into a child directory, edit \
             one file, snapshot, commit",
            worktree_stat,
            756.0,
        ),
        row(
            "surface validation",
            "the actual tree diff of the mutated child against its parent (every file \
             stat-checked against its materialization record, re-hashed when anything differs) \
             + include/exclude globs, implicit excludes, link checks",
            surface_stat,
            27.0,
        ),
    ])
}

/// Validate and append a 20-task stamped evaluation with its receipt, then recompute
/// eligibility and the champion.
fn archive_update(work: &Path, n: usize) -> Result<Row, String> {
    let mut a = fixture::genesis(&work.join("arch-append/archive.jsonl"))?;
    let stat = time(n, |i| {
        let g = (i + 1).to_string();
        fixture::append_evaluation(&mut a, &g, i as u64 + 1)?;
        let rows = a.rows();
        let el = eligibility(&rows, a.fixed_identity().as_ref(), &|_| None);
        Ok::<_, String>(champion(&rows, &el))
    })?;
    Ok(row(
        "evaluation stamp + archive update",
        "validate a 20-task stamped evaluation, append it with its signed receipt (two fsyncs), \
         recompute eligibility and champion",
        stat,
        32.0,
    ))
}

/// Open a 1,000-generation archive as its writer, then fold, eligibility and champion
/// (state verification), or the driver's state and every generation's next step (replay).
fn state_and_replay(work: &Path, n: usize) -> Result<Vec<Row>, String> {
    let path = work.join("arch-1000/archive.jsonl");
    let tags = fixture::generations(&path, GENERATIONS)?;
    let lookup = |g: &str| tags.iter().find(|(id, _)| id == g).map(|(_, c)| c.clone());
    let open =
        || Archive::open(&path, fixture::EXPERIMENT, fixture::key()).map_err(|e| e.to_string());
    let verify_stat = time(n, |_| {
        let a = open()?;
        let rows = a.rows();
        let el = eligibility(&rows, a.fixed_identity().as_ref(), &lookup);
        Ok::<_, String>(champion(&rows, &el))
    })?;
    let last = GENERATIONS as u32 + 1;
    let replay_stat = time(n, |_| {
        let a = open()?;
        let state = lifecycle::state_from(&a, &lookup);
        let pending = (1..=last)
            .filter(|g| child::next_step(&state, &g.to_string()) != child::Next::Done)
            .count();
        match pending {
            1 => Ok(pending),
            p => Err(format!(
                "replay found {p} generations to do; expected only {last}"
            )),
        }
    })?;
    Ok(vec![
        row(
            "state verification + champion recomputation",
            "open the 1,000-generation (4,004-event) archive as its writer (every line hashed, \
             chained, receipt-checked), fold, eligibility, champion",
            verify_stat,
            653.0,
        ),
        row(
            "recovery replay",
            "the same open plus the driver's state and the next step of every generation",
            replay_stat,
            1007.0,
        ),
    ])
}
