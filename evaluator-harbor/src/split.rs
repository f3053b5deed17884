//! Deterministic train/gate/sealed splits and the frozen task-set manifest.
//!
//! Order: task names sorted by `sha256("{seed}\0{name}")` (hex), ties by name. Sizes: largest
//! remainder — `floor(n × ratio)` each, then the leftover tasks go one by one to the splits
//! with the largest fractional part (ties in the order train, gate, sealed). Slices are taken
//! contiguously from the hash order in the order train, gate, sealed, and each split keeps
//! that hash order (members are recorded in order).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::digest::{canonical_digest, hex, task_digest};
use crate::error::{Error, ErrorKind, Result};

/// The three split names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitName {
    Train,
    Gate,
    Sealed,
}

impl SplitName {
    pub const ALL: [SplitName; 3] = [SplitName::Train, SplitName::Gate, SplitName::Sealed];
    pub fn as_str(self) -> &'static str {
        match self {
            SplitName::Train => "train",
            SplitName::Gate => "gate",
            SplitName::Sealed => "sealed",
        }
    }
}

impl std::str::FromStr for SplitName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "train" => Ok(SplitName::Train),
            "gate" => Ok(SplitName::Gate),
            "sealed" => Ok(SplitName::Sealed),
            _ => Err(
                Error::new(ErrorKind::InvalidSplit, format!("unknown split {s:?}"))
                    .hint("use train, gate or sealed"),
            ),
        }
    }
}

/// Split ratios; each finite and ≥ 0, summing to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SplitRatios {
    pub train: f64,
    pub gate: f64,
    pub sealed: f64,
}

impl SplitRatios {
    fn get(&self, s: SplitName) -> f64 {
        match s {
            SplitName::Train => self.train,
            SplitName::Gate => self.gate,
            SplitName::Sealed => self.sealed,
        }
    }
    pub fn validate(&self) -> Result<()> {
        for s in SplitName::ALL {
            let r = self.get(s);
            if !(r.is_finite() && r >= 0.0) {
                return Err(Error::new(
                    ErrorKind::InvalidSplit,
                    format!(
                        "ratio for {} must be a finite number ≥ 0, got {r}",
                        s.as_str()
                    ),
                ));
            }
        }
        let sum = self.train + self.gate + self.sealed;
        if (sum - 1.0).abs() > 1e-9 {
            return Err(Error::new(
                ErrorKind::InvalidSplit,
                format!("split ratios must sum to 1, got {sum}"),
            ));
        }
        Ok(())
    }
}

/// Split members, each list in seeded hash order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Split {
    pub train: Vec<String>,
    pub gate: Vec<String>,
    pub sealed: Vec<String>,
}

impl Split {
    pub fn members(&self, s: SplitName) -> &[String] {
        match s {
            SplitName::Train => &self.train,
            SplitName::Gate => &self.gate,
            SplitName::Sealed => &self.sealed,
        }
    }
}

/// The hash-order key of a task name under `seed`.
pub fn order_key(seed: u64, name: &str) -> String {
    hex(&Sha256::digest(format!("{seed}\0{name}").as_bytes()))
}

/// Largest-remainder sizes for `n` tasks.
pub fn split_sizes(n: usize, ratios: &SplitRatios) -> Result<[usize; 3]> {
    ratios.validate()?;
    let raw: Vec<f64> = SplitName::ALL
        .iter()
        .map(|s| n as f64 * ratios.get(*s))
        .collect();
    let mut counts: [usize; 3] = [
        raw[0].floor() as usize,
        raw[1].floor() as usize,
        raw[2].floor() as usize,
    ];
    let assigned: usize = counts.iter().sum();
    let mut order = [0usize, 1, 2];
    order.sort_by(|&a, &b| {
        let fa = raw[a] - raw[a].floor();
        let fb = raw[b] - raw[b].floor();
        fb.partial_cmp(&fa)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    for i in 0..n.saturating_sub(assigned) {
        counts[order[i % 3]] += 1;
    }
    Ok(counts)
}

/// Assign task names to splits.
pub fn assign(names: &[String], ratios: &SplitRatios, seed: u64) -> Result<Split> {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err(Error::new(
                ErrorKind::InvalidSplit,
                format!("duplicate task name {n:?}"),
            ));
        }
    }
    let mut ordered: Vec<(String, &String)> =
        names.iter().map(|n| (order_key(seed, n), n)).collect();
    ordered.sort();
    let [a, b, c] = split_sizes(names.len(), ratios)?;
    for (s, count) in SplitName::ALL.iter().zip([a, b, c]) {
        if ratios.get(*s) > 0.0 && count == 0 {
            return Err(Error::new(
                ErrorKind::InvalidSplit,
                format!(
                    "split {} has ratio {} but no tasks ({} tasks in total)",
                    s.as_str(),
                    ratios.get(*s),
                    names.len()
                ),
            )
            .hint("add tasks or set its ratio to 0"));
        }
    }
    let names: Vec<String> = ordered.into_iter().map(|(_, n)| n.clone()).collect();
    Ok(Split {
        train: names[..a].to_vec(),
        gate: names[a..a + b].to_vec(),
        sealed: names[a + b..a + b + c].to_vec(),
    })
}

/// The frozen task set the workspace commits under `evaluator/` at init.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrozenTaskSet {
    /// Always `"evolve.task-set.v1"`.
    pub schema: String,
    pub seed: u64,
    pub ratios: SplitRatios,
    pub repetitions: u32,
    pub split: Split,
    /// Task name → `sha256:` content digest.
    pub task_digests: BTreeMap<String, String>,
    /// `sha256:` over the canonical JSON of {schema, seed, repetitions, split, task_digests}.
    pub task_set_digest: String,
}

pub const TASK_SET_SCHEMA: &str = "evolve.task-set.v1";

/// A task set's regular files held in memory: paths relative to the set's directory,
/// `/`-separated, with the executable bit.
pub struct TaskFiles<'a> {
    /// Where the files were read from (messages name their paths under it).
    pub dir: PathBuf,
    /// The name the set's directory will have: a lone task at its root (`task.toml`
    /// beside the others) is named so, as [`crate::task::discover`] will name it there.
    pub name: &'a str,
    pub files: Vec<(&'a str, bool, &'a [u8])>,
}

impl<'a> TaskFiles<'a> {
    /// Every problem of every task in the set, as `tasks check --engine ENGINE` finds
    /// them in the directory, so that `recipe check` and `init` report them all at once
    /// (directories without `task.toml` are no tasks and are left out, as freezing does).
    pub fn check(&self, engine: crate::cli::EngineKind) -> Vec<Error> {
        let tasks = self.tasks();
        if tasks.is_empty() {
            return vec![
                Error::invalid_task(
                    "no tasks found (expected task.toml here or in immediate subdirectories)",
                )
                .at_path(&self.dir),
            ];
        }
        tasks
            .into_iter()
            .flat_map(|(name, dir, files)| {
                let task = crate::task::InMemory { dir, files };
                crate::task::Task::check_in_memory(name, &task, engine)
            })
            .collect()
    }

    /// The tasks as [`crate::task::discover`] finds them in the directory: the root if
    /// it holds `task.toml`, else each non-hidden top-level directory holding one.
    /// Each with its directory and its files, by task-relative path.
    fn tasks(&self) -> Vec<(&'a str, PathBuf, crate::task::FileMap<'a>)> {
        if self.files.iter().any(|(p, _, _)| *p == "task.toml") {
            let all = self.files.iter().map(|&(p, x, b)| (p, (x, b))).collect();
            return vec![(self.name, self.dir.clone(), all)];
        }
        let mut tasks: BTreeMap<&'a str, crate::task::FileMap<'a>> = BTreeMap::new();
        for &(path, executable, bytes) in &self.files {
            if let Some((top, rest)) = path.split_once('/')
                && !top.starts_with('.')
            {
                tasks
                    .entry(top)
                    .or_default()
                    .insert(rest, (executable, bytes));
            }
        }
        tasks
            .into_iter()
            .filter(|(_, files)| files.contains_key("task.toml"))
            .map(|(name, files)| (name, self.dir.join(name), files))
            .collect()
    }
}

/// The task-set digest over the digests, the split, repetitions and seed.
pub fn task_set_digest(
    task_digests: &BTreeMap<String, String>,
    split: &Split,
    repetitions: u32,
    seed: u64,
) -> Result<String> {
    canonical_digest(&serde_json::json!({
        "schema": TASK_SET_SCHEMA,
        "seed": seed,
        "repetitions": repetitions,
        "split": split,
        "task_digests": task_digests,
    }))
}

impl FrozenTaskSet {
    /// Freeze the tasks found in `dir` (see [`crate::task::discover`]); every task must load.
    pub fn freeze(
        dir: &Path,
        ratios: SplitRatios,
        seed: u64,
        repetitions: u32,
    ) -> Result<FrozenTaskSet> {
        let (tasks, _) = crate::task::discover(dir)?;
        let mut digests = BTreeMap::new();
        for t in &tasks {
            let task = crate::task::Task::load(t)?;
            digests.insert(task.name.clone(), task_digest(t)?);
        }
        Self::from_digests(digests, ratios, seed, repetitions)
    }

    /// What [`FrozenTaskSet::freeze`] gives the directory `set.dir` holding exactly
    /// `set`'s regular files, without that directory having to exist.
    pub fn freeze_files(
        set: &TaskFiles<'_>,
        ratios: SplitRatios,
        seed: u64,
        repetitions: u32,
    ) -> Result<FrozenTaskSet> {
        let mut digests = BTreeMap::new();
        for (name, dir, files) in set.tasks() {
            let task = crate::task::InMemory { dir, files };
            crate::task::Task::load_in_memory(name, &task)?;
            let listed = task.files.iter().map(|(p, (x, b))| (*p, *x, *b));
            digests.insert(name.to_string(), crate::digest::files_digest(listed)?);
        }
        Self::from_digests(digests, ratios, seed, repetitions)
    }

    fn from_digests(
        digests: BTreeMap<String, String>,
        ratios: SplitRatios,
        seed: u64,
        repetitions: u32,
    ) -> Result<FrozenTaskSet> {
        if repetitions == 0 {
            return Err(Error::new(ErrorKind::Usage, "repetitions must be ≥ 1"));
        }
        let names: Vec<String> = digests.keys().cloned().collect();
        let split = assign(&names, &ratios, seed)?;
        let task_set_digest = task_set_digest(&digests, &split, repetitions, seed)?;
        Ok(FrozenTaskSet {
            schema: TASK_SET_SCHEMA.into(),
            seed,
            ratios,
            repetitions,
            split,
            task_digests: digests,
            task_set_digest,
        })
    }

    /// Check internal consistency (after reading a manifest back from JSON).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Error::new(ErrorKind::InvalidSplit, m);
        if self.schema != TASK_SET_SCHEMA {
            return Err(bad(format!("unknown task-set schema {:?}", self.schema)));
        }
        let mut all: Vec<&String> = self
            .split
            .train
            .iter()
            .chain(&self.split.gate)
            .chain(&self.split.sealed)
            .collect();
        all.sort();
        let keys: Vec<&String> = self.task_digests.keys().collect();
        if all != keys {
            return Err(bad(
                "split members and task_digests name different tasks".into()
            ));
        }
        let d = task_set_digest(&self.task_digests, &self.split, self.repetitions, self.seed)?;
        if d != self.task_set_digest {
            return Err(Error::new(
                ErrorKind::DigestMismatch,
                format!(
                    "task-set digest {} does not match its contents ({d})",
                    self.task_set_digest
                ),
            ));
        }
        Ok(())
    }

    /// Digest identifying one evaluation's selection: the task-set digest, split, members and
    /// repetitions (the archive's `task_set_hash`).
    pub fn selection_digest(&self, split: SplitName) -> Result<String> {
        canonical_digest(&serde_json::json!({
            "task_set_digest": self.task_set_digest,
            "split": split.as_str(),
            "members": self.split.members(split),
            "repetitions": self.repetitions,
        }))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<FrozenTaskSet> {
        let f: FrozenTaskSet = serde_json::from_str(text).map_err(|e| {
            Error::new(
                ErrorKind::InvalidSplit,
                format!("malformed task-set manifest: {e}"),
            )
        })?;
        f.validate()?;
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_remainder_sizes() {
        let r = SplitRatios {
            train: 0.6,
            gate: 0.2,
            sealed: 0.2,
        };
        assert_eq!(split_sizes(10, &r).unwrap(), [6, 2, 2]);
        assert_eq!(split_sizes(7, &r).unwrap(), [4, 2, 1]); // 4.2,1.4,1.4: gate wins the tie
        let r = SplitRatios {
            train: 0.5,
            gate: 0.25,
            sealed: 0.25,
        };
        assert_eq!(split_sizes(3, &r).unwrap(), [1, 1, 1]); // 1.5,.75,.75
        assert!(
            split_sizes(
                3,
                &SplitRatios {
                    train: 0.5,
                    gate: 0.5,
                    sealed: 0.5
                }
            )
            .is_err()
        );
    }
}
