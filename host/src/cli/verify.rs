//! `evolve verify`: recompute everything from the evidence, from a workspace or from an
//! exported bundle (`--bundle`). Both go through the one evidence reader,
//! [`Evidence`](crate::workspace::evidence::Evidence). Nothing here needs the private key.

use super::bundle;
use crate::command::{CliResult, print_json};
use crate::display;
use crate::workspace::Workspace;
use crate::workspace::evidence::{self, Evidence};
use clap::Args;
use evolve_archive::Report;
use serde_json::json;
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

pub fn verify_cmd(a: VerifyArgs) -> CliResult {
    match &a.bundle {
        Some(dir) => verify_bundle(dir, a.json),
        None => {
            let ws = Workspace::open(&a.dir)?;
            let (report, mut extra) = Evidence::of_workspace(&ws).verify();
            let events = evidence::events(&ws);
            // The recipe digest each generation stamps, and every driver revision's.
            extra.extend(crate::lifecycle::agent_driver::verify_recipes(&ws, &events));
            // The tasks each evaluation ran, against the frozen protocol's.
            extra.extend(ws.verify_members(&report, &events));
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
