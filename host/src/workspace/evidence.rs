//! The one evidence reader: what `evolve verify`, `export`, `diff`, `gc` and the viewer read
//! to recompute an experiment, from a workspace or from an exported bundle. [`Evidence`]
//! names the archive and receipts files, the public key, the repository holding the `gen/*`
//! tags, `gen/0`'s evaluator tree and the champion cache; nothing here needs the private
//! key.

use super::Workspace;
use crate::layout;
use evolve_archive::{Event, PublicKey, Report};
use evolve_snapshot::{Oid, Store};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What verification reads, wherever it comes from.
pub struct Evidence<'a> {
    pub archive: PathBuf,
    pub receipts: PathBuf,
    pub public_key: &'a PublicKey,
    /// The repository with the `gen/*` tags and their commits.
    pub store: &'a Store,
    /// `gen/0`'s `evaluator/` tree.
    pub evaluator_tree: Oid,
    pub champion_cache: Option<Value>,
}

impl<'a> Evidence<'a> {
    pub fn of_workspace(ws: &'a Workspace) -> Evidence<'a> {
        Evidence {
            archive: ws.paths.archive(),
            receipts: ws.paths.receipts(),
            public_key: &ws.public_key,
            store: &ws.store,
            evaluator_tree: ws.evaluator_tree,
            champion_cache: read_json(&ws.paths.champion_cache()),
        }
    }

    fn tag_commit(&self, genid: &str) -> Option<String> {
        self.store
            .tag_target(&layout::tag_name(genid))
            .ok()
            .flatten()
            .map(|o| o.to_string())
    }

    /// The archive's own audit: chain, signatures, stamps, eligibility, champion.
    pub fn audit(&self) -> Report {
        evolve_archive::verify(
            &self.archive,
            &self.receipts,
            self.public_key,
            &|g| self.tag_commit(g),
            self.champion_cache.as_ref(),
        )
    }

    /// The full check: the audit, tags the archive does not know, every certified
    /// evaluation's tree against its commit, and every tagged evaluator tree against
    /// `gen/0`'s. Returns the report and the repository findings.
    pub fn verify(&self) -> (Report, Vec<String>) {
        let mut report = self.audit();
        let tagged: Vec<String> = self
            .store
            .tags("gen/")
            .unwrap_or_default()
            .into_iter()
            .map(|(n, _)| n.trim_start_matches("gen/").to_string())
            .collect();
        report
            .findings
            .extend(evolve_archive::untracked_tags(&report.rows, &tagged));
        let mut extra = self.evaluation_trees(&report);
        for g in &tagged {
            if let Some(c) = self.store.tag_target(&layout::tag_name(g)).ok().flatten()
                && let Ok(Some(t)) = self.store.subtree(c, layout::EVALUATOR_DIR)
                && t != self.evaluator_tree
            {
                extra.push(format!(
                    "gen/{g}: evaluator tree {t} differs from gen/0's {}",
                    self.evaluator_tree
                ));
            }
        }
        (report, extra)
    }

    /// Every certified evaluation's stamped tree must be its commit's tree.
    fn evaluation_trees(&self, report: &Report) -> Vec<String> {
        let mut out = Vec::new();
        for row in &report.rows {
            for ev in row
                .evaluation
                .iter()
                .chain(&row.anchors)
                .chain(&row.other_evaluations)
            {
                let (Some(c), Some(t)) = (
                    ev.candidate_commit(),
                    ev.stamp.get("candidate_tree").and_then(Value::as_str),
                ) else {
                    continue;
                };
                match Oid::from_str(c)
                    .ok()
                    .and_then(|o| self.store.tree_of(o).ok())
                {
                    Some(tree) if tree.to_string() == t => {}
                    Some(tree) => out.push(format!(
                        "gen {}: archive line {} stamps tree {t} but commit {c} has tree {tree}",
                        row.genid, ev.line
                    )),
                    None => out.push(format!(
                        "gen {}: archive line {} names commit {c}, which the repository does not have",
                        row.genid, ev.line
                    )),
                }
            }
        }
        out
    }
}

pub fn read_json(path: &Path) -> Option<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
}

/// The workspace's archive events, for display and the recipe audit (certification comes
/// from the archive's own audit, [`Evidence::audit`]).
pub fn events(ws: &Workspace) -> Vec<Event> {
    events_at(&ws.paths.archive())
}

/// The archive file at `path`, each complete line read by the archive's own envelope
/// reader ([`Event::from_line`]). A line it rejects, and a last line still being
/// written, are left out: the audit reports them.
pub fn events_at(path: &Path) -> Vec<Event> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes[..end]
        .split(|b| *b == b'\n')
        .filter_map(|line| Event::from_line(line).ok())
        .collect()
}
