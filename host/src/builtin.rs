//! The operator library and the built-in seeds, embedded in the binary by `build.rs`.

use evaluator_harbor::engine::local::FrameworkCode;
use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A library operator's component.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedOperator {
    pub stage: &'static str,
    pub name: &'static str,
    pub bytes: &'static [u8],
    /// SHA-256 of `bytes` and their git blob id, computed by `build.rs` (hashing a
    /// megabyte of components was a tenth of an `evolve init`).
    pub sha256: [u8; 32],
    pub blob_id: [u8; 20],
}

include!(concat!(env!("OUT_DIR"), "/embedded_operators.rs"));

/// Find a library operator by `stage/name`.
pub fn find(stage: &str, name: &str) -> Option<&'static EmbeddedOperator> {
    EMBEDDED
        .iter()
        .find(|op| op.stage == stage && op.name == name)
}

/// Directory of the test components built alongside the library (for tests and benchmarks).
pub const TEST_COMPONENTS_DIR: &str = env!("EVOLVE_TEST_COMPONENTS_DIR");

/// One file of a built-in seed: a relative `/`-separated path and its contents.
#[derive(Debug, Clone, Copy)]
pub struct SeedFile {
    pub path: &'static str,
    pub bytes: &'static [u8],
    /// Written with mode 0755 when set, 0644 otherwise.
    pub executable: bool,
}

/// A built-in seed: an evolvable target (the initial `target/` tree) and a Harbor task
/// set, embedded from `seeds/<name>/` by `build.rs` (see `docs/seeds.md`).
#[derive(Debug, Clone, Copy)]
pub struct Seed {
    pub name: &'static str,
    pub summary: &'static str,
    /// The files of `target/`, sorted by path.
    pub target: &'static [SeedFile],
    /// The files of the task set, `<task>/<path>`, sorted by path.
    pub tasks: &'static [SeedFile],
}

include!(concat!(env!("OUT_DIR"), "/embedded_seeds.rs"));

/// Find a built-in seed by name.
pub fn seed(name: &str) -> Option<&'static Seed> {
    SEEDS.iter().find(|s| s.name == name)
}

impl Seed {
    /// Write the initial target tree into `dir` (created if missing): `dir/<path>` for
    /// every target file, replacing files that exist.
    pub fn write_target(&self, dir: &Path) -> io::Result<()> {
        write_files(dir, self.target.iter().map(SeedFile::parts))
    }

    /// Write the task set into `dir` (created if missing): `dir/<task>/...`.
    pub fn write_tasks(&self, dir: &Path) -> io::Result<()> {
        write_files(dir, self.tasks.iter().map(SeedFile::parts))
    }

    /// The task names (the first path component of the task files), sorted.
    pub fn task_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .tasks
            .iter()
            .filter_map(|f| f.path.split_once('/').map(|(task, _)| task))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl SeedFile {
    /// `(path, executable, bytes)`, as [`write_files`] takes them.
    fn parts(&self) -> (&str, bool, &[u8]) {
        (self.path, self.executable, self.bytes)
    }
}

/// The agent components and tasks of every built-in seed, as the local engine recognises
/// them: a trial made only of these runs no code a candidate can change, so it may run
/// where bubblewrap is missing (`evaluator_harbor::engine::local::FrameworkCode`).
pub fn framework_code() -> Arc<FrameworkCode> {
    static CODE: OnceLock<Arc<FrameworkCode>> = OnceLock::new();
    CODE.get_or_init(|| {
        let mut code = FrameworkCode::default();
        for seed in SEEDS {
            code.agent_components.extend(
                seed.target
                    .iter()
                    .filter(|f| f.path.ends_with(".wasm"))
                    .map(|f| evaluator_harbor::digest::sha256_prefixed(f.bytes)),
            );
            for task in seed.task_names() {
                let prefix = format!("{task}/");
                let files = seed.tasks.iter().filter_map(|f| {
                    let rel = f.path.strip_prefix(&prefix)?;
                    Some((rel, f.executable, f.bytes))
                });
                if let Ok(digest) = evaluator_harbor::digest::files_digest(files) {
                    code.tasks.insert(digest);
                }
            }
        }
        Arc::new(code)
    })
    .clone()
}

/// Whether a recipe's trials can be made only of built-in code: its target is a built-in
/// seed and its task set a built-in one. (Each trial is still checked byte for byte: a
/// candidate that changed its agent component is refused without bubblewrap.)
pub fn recipe_ships_its_trials(target_seed: Option<&str>, dataset: &str) -> bool {
    target_seed.is_some_and(|s| seed(s).is_some())
        && seed(dataset).is_some_and(|s| !s.tasks.is_empty())
}

/// Write `(path, executable, bytes)` files under `dir` (parents created), mode 0755 or
/// 0644 whatever the umask, replacing files that exist.
pub(crate) fn write_files<'a>(
    dir: &Path,
    files: impl IntoIterator<Item = (&'a str, bool, &'a [u8])>,
) -> io::Result<()> {
    for (rel, executable, bytes) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = if executable { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::EMBEDDED;

    #[test]
    fn build_time_digests_match_the_embedded_bytes() {
        assert!(!EMBEDDED.is_empty());
        for op in EMBEDDED {
            let at = format!("{}/{}", op.stage, op.name);
            let sha256: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(op.bytes).into();
            assert_eq!(op.sha256, sha256, "{at}");
            let id = git2::Oid::hash_object(git2::ObjectType::Blob, op.bytes).unwrap();
            assert_eq!(op.blob_id, id.as_bytes(), "{at}");
        }
    }
}
