//! What the lifecycle pays per candidate for its git work, against RSIHub's
//! Table 5 ("candidate worktree + snapshot" 756 ms, "surface validation" 27 ms):
//!
//! * candidate worktree + snapshot: materialize the parent commit of a
//!   1,000-file target into a fresh directory, change one file, snapshot the
//!   directory against the parent and commit it (no HEAD move). Steady state
//!   reuses one `Store` (as the lifecycle does, so its blob cache is warm);
//!   the cold line opens a fresh one per run;
//! * snapshot of a fork with one edited file, with the stat records
//!   `materialize` keeps (files whose `lstat` is unchanged are not read) and
//!   without them (a fresh store, as after a restart: every file is read);
//! * surface validation: compile the recipe's surface globs and check a
//!   typical change list (both, since a generation pays both).
//!
//! Run: `cargo bench -p evolve-snapshot --bench snapshot_ops`. The work
//! happens under `$TMPDIR`: on a disk shared with busy builds, file creation
//! alone can take 100+ ms per 1,000 files, so `TMPDIR=/dev/shm` isolates what
//! this crate costs. Stat records are only kept on ext2/3/4, XFS and Btrfs
//! (tmpfs does not update ctime on every shared-mmap write), so on
//! `/dev/shm` the "with stat records" lines read every file too.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use evolve_snapshot::{Change, ChangeKind, EntryKind, Limits, Store, Surface};

const RUNS: usize = 30;

fn skip(name: &str) -> bool {
    matches!(name, ".git" | ".evolve" | "runs")
}

fn write(root: &Path, rel: &str, content: &[u8]) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

/// 1,000 target files of 0.5–4 KiB over 25 directories, plus the usual
/// framework-owned files.
fn seed(ws: &Path) {
    for i in 0..1000 {
        let body = format!("# file {i}\n").repeat(50 + (i * 37) % 300);
        write(
            ws,
            &format!("target/pkg{:02}/mod{i:04}.py", i % 25),
            body.as_bytes(),
        );
    }
    write(ws, "evaluator/tests/test.sh", b"#!/bin/sh\nexit 0\n");
    write(ws, "recipe.yaml", b"name: bench\n");
    write(ws, ".gitignore", b".evolve/\nruns/\n");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(what: &str, d: Duration) {
    println!(
        "{what:<48} median {:>9.3} ms  ({RUNS} runs)",
        d.as_secs_f64() * 1e3
    );
}

fn main() {
    let work = tempfile::tempdir().unwrap();
    let ws = work.path();
    println!("working under {} (set TMPDIR to move it)", ws.display());
    let store = Store::init(ws).unwrap();
    seed(ws);
    let limits = Limits::default();
    let s0 = store.snapshot(ws, None, &limits, &skip).unwrap();
    let c0 = store.commit(s0.tree, None, "gen 0", true).unwrap();
    // As the lifecycle does after the genesis commit: checkouts read a pack.
    let start = Instant::now();
    let packed = store.pack_objects().unwrap();
    println!(
        "{:<48} {:>16.3} ms  (once, {packed} objects)",
        "pack genesis objects",
        start.elapsed().as_secs_f64() * 1e3
    );

    // Warm-up runs (page cache, allocator) are not counted.
    let (mut times, mut mat, mut snap) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..RUNS + 3 {
        let child = ws.join(format!("runs/worktrees/gen-{i}"));
        let start = Instant::now();
        store.materialize(c0, &child).unwrap();
        let materialized = start.elapsed();
        // New content every run, so a new blob and new trees are written.
        write(
            &child,
            "target/pkg03/mod0003.py",
            format!("print({i})\n").as_bytes(),
        );
        let before_snapshot = start.elapsed();
        let s = store.snapshot(&child, Some(c0), &limits, &skip).unwrap();
        let snapshotted = start.elapsed() - before_snapshot;
        store.commit(s.tree, Some(c0), "child", false).unwrap();
        let elapsed = start.elapsed();
        assert_eq!(s.changes.len(), 1);
        fs::remove_dir_all(&child).unwrap();
        if i >= 3 {
            times.push(elapsed);
            mat.push(materialized);
            snap.push(snapshotted);
        }
    }
    report("candidate worktree + snapshot (1,000 files)", median(times));
    report("  of which: materialize", median(mat));
    report("  of which: snapshot (stat records)", median(snap));
    println!(
        "  files taken from stat records: {} of {} ({} racy or changed)",
        store.stat_cache_hits(),
        (RUNS + 3) * 1003,
        (RUNS + 3) * 1003 - store.stat_cache_hits() as usize
    );

    // The same snapshot with and without the stat records of materialize
    // (without: every file is opened, read and compared or hashed, as in a
    // resumed run's fresh store).
    let child = ws.join("runs/worktrees/repeat");
    store.materialize(c0, &child).unwrap();
    write(&child, "target/pkg03/mod0003.py", b"print('repeat')\n");
    let uncached = Store::open(ws).unwrap();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..RUNS + 3 {
        let start = Instant::now();
        let a = store.snapshot(&child, Some(c0), &limits, &skip).unwrap();
        let t_with = start.elapsed();
        let start = Instant::now();
        let b = uncached.snapshot(&child, Some(c0), &limits, &skip).unwrap();
        let t_without = start.elapsed();
        assert_eq!(a, b);
        if i >= 3 {
            with.push(t_with);
            without.push(t_without);
        }
    }
    fs::remove_dir_all(&child).unwrap();
    report("snapshot of a fork, with stat records", median(with));
    report(
        "snapshot of a fork, without (reads every file)",
        median(without),
    );

    // Cold: a freshly opened store, whose blob cache is empty (every blob is
    // read from the pack and verified, every file hashed).
    let mut cold = Vec::new();
    for i in 0..RUNS {
        let fresh = Store::open(ws).unwrap();
        let child = ws.join(format!("runs/worktrees/cold-{i}"));
        let start = Instant::now();
        fresh.materialize(c0, &child).unwrap();
        write(
            &child,
            "target/pkg03/mod0003.py",
            format!("print(-{i})\n").as_bytes(),
        );
        let s = fresh.snapshot(&child, Some(c0), &limits, &skip).unwrap();
        fresh.commit(s.tree, Some(c0), "child", false).unwrap();
        cold.push(start.elapsed());
        fs::remove_dir_all(&child).unwrap();
    }
    report("  cold (fresh store, empty blob cache)", median(cold));

    let include = vec!["target/**".to_string(), "operators/mutate/**".to_string()];
    let exclude = vec!["target/**/*.lock".to_string(), "target/data/**".to_string()];
    let mut changes: Vec<Change> = (0..20)
        .map(|i| Change {
            path: format!("target/pkg{:02}/mod{i:04}.py", i % 25),
            kind: ChangeKind::Modified,
            entry: EntryKind::File,
        })
        .collect();
    changes.push(Change {
        path: "target/current".into(),
        kind: ChangeKind::Added,
        entry: EntryKind::Symlink {
            target: "pkg01/mod0001.py".into(),
        },
    });
    changes.push(Change {
        path: "target/escape".into(),
        kind: ChangeKind::Added,
        entry: EntryKind::Symlink {
            target: "../evaluator/tests/test.sh".into(),
        },
    });
    let (mut full, mut check_only) = (Vec::new(), Vec::new());
    for _ in 0..RUNS + 3 {
        let start = Instant::now();
        let surface = Surface::new(&include, &exclude).unwrap();
        let built = start.elapsed();
        let v = surface.check(&changes);
        full.push(start.elapsed());
        check_only.push(start.elapsed() - built);
        assert_eq!(v.len(), 1);
    }
    report(
        "surface validation (globs + 22 changes)",
        median(full[3..].to_vec()),
    );
    report("  of which: check only", median(check_only[3..].to_vec()));
}
