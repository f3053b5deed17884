//! `evolve verify`: recompute everything from the evidence, from a workspace or from an
//! exported bundle (`--bundle`). Both go through [`Evidence`]: the archive and receipts
//! files, the public key, the repository holding the `gen/*` tags, `gen/0`'s evaluator
//! tree and the champion cache. Nothing here needs the private key.

use super::bundle;
use super::{CliResult, print_json};
use crate::display;
use crate::workspace::{Workspace, layout};
use clap::Args;
use evolve_archive::{PublicKey, Report};
use evolve_snapshot::{Oid, Store};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct VerifyArgs {
    /// The workspace (default: the current directory).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Verify an evidence bundle written by `evolve export` instead of a workspace.
    #[arg(long, value_name = "BUNDLE", conflicts_with = "dir")]
    pub bundle: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// What verification reads, wherever it comes from.
pub(crate) struct Evidence<'a> {
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
    pub(crate) fn of_workspace(ws: &'a Workspace) -> Evidence<'a> {
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
    pub(crate) fn audit(&self) -> Report {
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
    pub(crate) fn verify(&self) -> (Report, Vec<String>) {
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

pub(crate) fn read_json(path: &Path) -> Option<Value> {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
}

pub fn verify_cmd(a: VerifyArgs) -> CliResult {
    match &a.bundle {
        Some(dir) => verify_bundle(dir, a.json),
        None => {
            let ws = Workspace::open(&a.dir)?;
            let (report, mut extra) = Evidence::of_workspace(&ws).verify();
            // The recipe digest each generation stamps, and every driver revision's.
            extra.extend(crate::lifecycle::agent_driver::verify_recipes(
                &ws,
                &super::workspace::raw_events(&ws),
            ));
            Ok(print_verdict(&report, &extra, &[], a.json))
        }
    }
}

fn verify_bundle(dir: &Path, json_out: bool) -> CliResult {
    let opened = bundle::Opened::open(dir)?;
    let evidence = opened.evidence();
    let (report, mut extra) = evidence.verify();
    extra.extend(opened.recipe_findings());
    Ok(print_verdict(&report, &extra, &opened.findings, json_out))
}

/// Print the findings and the verdict; exit 1 when anything was found.
fn print_verdict(report: &Report, extra: &[String], bundle: &[String], json_out: bool) -> ExitCode {
    let ok = report.ok() && extra.is_empty() && bundle.is_empty();
    if json_out {
        print_json(&json!({
            "ok": ok, "findings": report.findings, "repository_findings": extra,
            "bundle_findings": bundle, "lines": report.lines, "certified": report.certified,
            "champion": report.champion,
        }));
    } else {
        // A finding quotes what it found (a genid, a path, a field of a damaged line).
        for f in bundle {
            println!("bundle: {}", display::text(f));
        }
        for f in &report.findings {
            println!("{}", display::text(&f.to_string()));
        }
        for f in extra {
            println!("repository: {}", display::text(f));
        }
        println!(
            "verify: {} ({} line(s), {} certified; champion {})",
            if ok { "ok" } else { "FAIL" },
            report.lines,
            report.certified,
            report
                .champion
                .as_ref()
                .map(|c| format!("gen {} {:.4}", display::text(&c.genid), c.score))
                .unwrap_or_else(|| "none".into())
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
