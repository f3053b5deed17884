//! Where things live in a workspace. One place, so the grants and the commands agree; the
//! framework-owned paths no surface may open (the surface's implicit excludes) are defined
//! once in `sdk-rust/framework-paths`, shared with the guest SDK's edit parser.
//!
//! ```text
//! <workspace>/
//!   .git/                     the workspace repository (git2): gen/<id> tags, and
//!                             refs/evolve/proposed/<id> for rejected candidates' trees
//!   .gitignore                ignores .evolve/ and runs/
//!   recipe.yaml               the normalized recipe                      (committed)
//!   target/                   the evolvable target                       (committed)
//!   operators/<stage>.wasm    frozen operator components                 (committed)
//!   operators/manifest.json   their SHA-256 and source identity          (committed)
//!   evaluator/engine.json     the frozen engine configuration            (committed)
//!   evaluator/task-set.json   the frozen task set: splits and digests    (committed)
//!   evaluator/tasks/<name>/   the task snapshot                          (committed)
//!   keys/archive.pub          the experiment's public key                (committed)
//!   .evolve/archive.jsonl     the certified event log                    (host only)
//!   .evolve/receipts.jsonl    one signed receipt per event               (host only)
//!   .evolve/champion.json     the champion cache (compared, never trusted)
//!   .evolve/run.lock          one run at a time
//!   runs/worktrees/gen-<id>/  a child being built (preserved if interrupted)
//!   runs/gen-<id>/<stage>/    per-stage inputs, results, logs, scratch
//!   runs/evaluations/<purpose>/gen-<id>/attempt-<n>/   evaluation checkouts and trials
//! ```

use std::path::{Path, PathBuf};

pub const RECIPE_FILE: &str = "recipe.yaml";
pub const TARGET_DIR: &str = "target";
pub const OPERATORS_DIR: &str = "operators";
pub const COMPONENTS_MANIFEST: &str = "operators/manifest.json";
pub const EVALUATOR_DIR: &str = "evaluator";
pub const ENGINE_FILE: &str = "evaluator/engine.json";
pub const TASK_SET_FILE: &str = "evaluator/task-set.json";
pub const TASKS_DIR: &str = "evaluator/tasks";
pub const PUBLIC_KEY_FILE: &str = "keys/archive.pub";
pub const STATE_DIR: &str = ".evolve";
pub const RUNS_DIR: &str = "runs";
pub const GITIGNORE: &str = ".gitignore";
pub const GITIGNORE_TEXT: &str =
    "# evolve: framework state, never part of a candidate\n/.evolve/\n/runs/\n";

/// Top-level names a snapshot of the workspace (or of a child) never includes.
pub fn skip_top_level(name: &str) -> bool {
    matches!(name, ".git" | STATE_DIR | RUNS_DIR)
}

/// The component file of `stage`, relative to a checkout.
pub fn component_path(stage: &str) -> String {
    format!("{OPERATORS_DIR}/{stage}.wasm")
}

/// The tag naming a generation's certified commit.
pub fn tag_name(genid: &str) -> String {
    format!("gen/{genid}")
}

/// The ref (under `refs/evolve/`, never a tag) keeping a rejected candidate's proposed
/// tree: `refs/evolve/proposed/<genid>`. Nothing selects, evaluates or verifies it.
pub fn proposed_ref(genid: &str) -> String {
    format!("proposed/{genid}")
}

/// Paths of one workspace.
#[derive(Debug, Clone)]
pub struct Paths {
    pub root: PathBuf,
}

impl Paths {
    pub fn new(root: &Path) -> Paths {
        Paths {
            root: root.to_path_buf(),
        }
    }
    pub fn state(&self) -> PathBuf {
        self.root.join(STATE_DIR)
    }
    pub fn archive(&self) -> PathBuf {
        self.state().join(evolve_archive::ARCHIVE_FILE)
    }
    pub fn receipts(&self) -> PathBuf {
        self.state().join(evolve_archive::RECEIPTS_FILE)
    }
    pub fn champion_cache(&self) -> PathBuf {
        self.state().join("champion.json")
    }
    pub fn runs(&self) -> PathBuf {
        self.root.join(RUNS_DIR)
    }
    /// Read-only checkouts shared by select, gate and record (`runs/checkouts/<commit>`).
    pub fn checkouts(&self) -> PathBuf {
        self.runs().join("checkouts")
    }
    pub fn worktrees(&self) -> PathBuf {
        self.runs().join("worktrees")
    }
    pub fn worktree(&self, genid: &str) -> PathBuf {
        self.worktrees().join(format!("gen-{genid}"))
    }
    /// Per-generation run directory (stage inputs, results, logs).
    pub fn run_dir(&self, genid: &str) -> PathBuf {
        self.runs().join(format!("gen-{genid}"))
    }
    pub fn evaluations(&self, purpose: &str, genid: &str) -> PathBuf {
        self.runs()
            .join("evaluations")
            .join(purpose)
            .join(format!("gen-{genid}"))
    }
}
