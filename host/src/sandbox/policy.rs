//! What one call is granted (directories) and allowed (memory, time, output).

use super::bindings::types::Stage;
use super::worlds::{self, Dir};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The directories an operator call sees, as WASI preopens. Built only through
/// [`Grants::for_stage`], which reads them from the one table of the contract's rules
/// (`worlds.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    pub(crate) preopens: Vec<Preopen>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preopen {
    pub host: PathBuf,
    pub guest: &'static str,
    pub writable: bool,
}

/// Where a stage's candidate and per-call directories are.
#[derive(Debug, Clone)]
pub struct GrantRequest<'a> {
    /// The checkout the stage runs on (its `target/` and `operators/` are granted).
    pub checkout: &'a Path,
    /// Whether the recipe's surface includes `operators/**`.
    pub operators_in_surface: bool,
    /// A fresh, empty directory for this call only.
    pub scratch: &'a Path,
    /// Analyze's or mutate's feedback bundle, when one was assembled.
    pub feedback: Option<&'a Path>,
}

impl GrantRequest<'_> {
    /// The host directory behind `dir` for this call, if this call has one.
    fn host_dir(&self, dir: Dir) -> Option<PathBuf> {
        match dir {
            Dir::Target => Some(self.checkout.join("target")),
            Dir::Operators => self
                .operators_in_surface
                .then(|| self.checkout.join("operators")),
            Dir::Scratch => Some(self.scratch.to_path_buf()),
            Dir::Feedback => self.feedback.map(Path::to_path_buf),
        }
    }
}

impl Grants {
    /// The contract's grants for `stage`: its world's row of [`WORLDS`](super::worlds::WORLDS)
    /// (`/target` and `/operators` read-write for mutate only, none for the driver,
    /// `/scratch` read-write, `/feedback` for analyze and mutate only), of which `/operators` only
    /// when the surface includes it and `/feedback` only when one was assembled.
    /// Nothing else.
    pub fn for_stage(stage: Stage, req: &GrantRequest<'_>) -> Grants {
        let preopens = worlds::of(stage)
            .grants
            .iter()
            .filter_map(|grant| {
                Some(Preopen {
                    host: req.host_dir(grant.dir)?,
                    guest: grant.dir.guest(),
                    writable: grant.writable,
                })
            })
            .collect();
        Grants { preopens }
    }

    /// Only a scratch directory: for `describe` and `normalize-config`, which must not
    /// depend on any candidate.
    pub fn scratch_only(scratch: &Path) -> Grants {
        Grants {
            preopens: vec![Preopen {
                host: scratch.to_path_buf(),
                guest: Dir::Scratch.guest(),
                writable: true,
            }],
        }
    }

    /// (guest path, host path) of every writable grant: what the disk quota watches.
    pub(crate) fn writable(&self) -> Vec<(String, PathBuf)> {
        self.preopens
            .iter()
            .filter(|p| p.writable)
            .map(|p| (p.guest.to_string(), p.host.clone()))
            .collect()
    }

    /// The host directory granted as `guest`, if it is granted.
    pub(crate) fn host_dir(&self, guest: &str) -> Option<&Path> {
        self.preopens
            .iter()
            .find(|p| p.guest == guest)
            .map(|p| p.host.as_path())
    }

    /// (guest path, host path, writable) for documentation and logs.
    pub fn describe(&self) -> Vec<(String, PathBuf, bool)> {
        self.preopens
            .iter()
            .map(|p| (p.guest.to_string(), p.host.clone(), p.writable))
            .collect()
    }
}

/// Resource limits of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Total linear memory across the component's memories.
    pub memory_bytes: usize,
    /// Wall-clock deadline, enforced both inside wasm (epochs) and around host calls.
    pub timeout: Duration,
    /// Optional instruction budget (wasmtime fuel).
    pub fuel: Option<u64>,
    /// Bytes kept of stdout and of stderr each; the rest is dropped and counted.
    pub log_bytes: usize,
    /// Largest result the host accepts, in bytes of strings and list items.
    pub result_bytes: usize,
    /// Disk quota of each writable grant: the bytes (apparent file sizes) and the
    /// entries one call may add to it (see `quota.rs`).
    pub disk_bytes: u64,
    pub disk_files: u64,
    /// Most ids a select may return: one per child, or one for all. The lifecycle sets
    /// it to the generation's number of children; the default is the most children a
    /// recipe allows (`experiment.children_per_gen` ≤ 64).
    pub max_parents: usize,
}

/// The default disk quota of a writable grant, per call.
pub const DEFAULT_DISK_MIB: u64 = 256;
pub const DEFAULT_DISK_FILES: u64 = 10_000;
/// The most children a generation can have (`experiment.children_per_gen`'s maximum).
pub const MAX_CHILDREN_PER_GEN: usize = 64;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 256 << 20,
            timeout: Duration::from_secs(600),
            fuel: None,
            log_bytes: 256 << 10,
            result_bytes: 8 << 20,
            disk_bytes: DEFAULT_DISK_MIB << 20,
            disk_files: DEFAULT_DISK_FILES,
            max_parents: MAX_CHILDREN_PER_GEN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(ops: bool, feedback: Option<&'a Path>) -> GrantRequest<'a> {
        GrantRequest {
            checkout: Path::new("/w/c"),
            operators_in_surface: ops,
            scratch: Path::new("/w/s"),
            feedback,
        }
    }

    #[test]
    fn only_mutate_writes_the_candidate() {
        let fb = Path::new("/w/fb");
        let m = Grants::for_stage(Stage::Mutate, &req(true, Some(fb))).describe();
        assert_eq!(
            m,
            vec![
                ("/target".into(), "/w/c/target".into(), true),
                ("/operators".into(), "/w/c/operators".into(), true),
                ("/scratch".into(), "/w/s".into(), true),
                ("/feedback".into(), "/w/fb".into(), false),
            ]
        );
        let v = Grants::for_stage(Stage::Validate, &req(false, Some(fb))).describe();
        assert_eq!(
            v,
            vec![
                ("/target".into(), "/w/c/target".into(), false),
                ("/scratch".into(), "/w/s".into(), true),
            ]
        );
    }

    #[test]
    fn analyze_reads_its_feedback_and_writes_only_scratch() {
        let fb = Path::new("/w/afb");
        let a = Grants::for_stage(Stage::Analyze, &req(false, Some(fb))).describe();
        assert_eq!(
            a,
            vec![
                ("/target".into(), "/w/c/target".into(), false),
                ("/scratch".into(), "/w/s".into(), true),
                ("/feedback".into(), "/w/afb".into(), false),
            ]
        );
        // No bundle assembled (a bare or sample call): no `/feedback` at all.
        let bare = Grants::for_stage(Stage::Analyze, &req(false, None)).describe();
        assert!(bare.iter().all(|(guest, _, _)| guest != "/feedback"));
    }

    #[test]
    fn the_driver_sees_no_candidate_tree() {
        let d = Grants::for_stage(Stage::Driver, &req(true, Some(Path::new("/w/fb"))));
        assert_eq!(d.describe(), vec![("/scratch".into(), "/w/s".into(), true)]);
    }
}
