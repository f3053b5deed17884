//! The viewer's JSON documents, built from a workspace without writing to it.
//!
//! Everything comes from the same evidence `evolve status`, `log`, `show` and `verify` read:
//! the archive audit ([`evolve_archive::verify`], certified lines only), the `gen/*` tags, the
//! repository's commits, and the per-stage records under `runs/`. Nothing here takes the run
//! lock or opens a file for writing, so it is safe while `evolve run` is appending.

use crate::layout;
use crate::sandbox::{ALL_STAGES, stage_name};
use crate::workspace::Workspace;
use crate::workspace::evidence::{self, Evidence};
use evolve_archive::event::genid_generation;
use evolve_archive::{Evaluation, Event, Report, Row};
use evolve_snapshot::Oid;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The longest log excerpt served per file (its last bytes: the end of a log says most).
pub const MAX_LOG_BYTES: u64 = 64 * 1024;
/// The longest diff served; longer ones end with a `[diff truncated …]` line.
pub const MAX_DIFF_BYTES: usize = 512 * 1024;
/// The largest `result.json` of a stage call read back.
const MAX_RESULT_BYTES: u64 = 1 << 20;

/// A request the data cannot answer: an HTTP status and a message for the user.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub(super) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            message: message.into(),
        }
    }
    fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            message: message.into(),
        }
    }
}

/// What decides whether a cached audit is still current: the archive files' sizes and
/// modification times, the champion cache's, and every `gen/*` tag with its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    files: Vec<Option<(u64, SystemTime)>>,
    tags: Vec<(String, Oid)>,
}

impl Fingerprint {
    pub fn of(ws: &Workspace) -> Fingerprint {
        let stat = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
        };
        Fingerprint {
            files: vec![
                stat(&ws.paths.archive()),
                stat(&ws.paths.receipts()),
                stat(&ws.paths.champion_cache()),
            ],
            tags: ws.store.tags("gen/").unwrap_or_default(),
        }
    }
}

/// One consistent reading of the evidence.
pub struct Audit {
    /// `evolve verify`'s archive audit: findings, certified rows, eligibility, champion.
    pub report: Report,
    /// What `evolve verify` adds from the repository (stamped trees, evaluator trees).
    pub repository_findings: Vec<String>,
    /// The archive's complete lines, parsed (display only: certification is the report's).
    pub events: Vec<Value>,
    pub fingerprint: Fingerprint,
}

/// Read the evidence. A run appending while we read would make the archive and receipts
/// disagree for an instant (a line without its receipt yet); so the reading is repeated
/// until the files did not change while it was taken, and findings are confirmed once
/// after a short pause, by which time a live writer has finished its line.
pub fn audit(ws: &Workspace) -> Audit {
    let mut last = None;
    for attempt in 0..5 {
        let before = Fingerprint::of(ws);
        let audit = audit_once(ws, before.clone());
        let steady = Fingerprint::of(ws) == before;
        if steady && (audit.is_ok() || attempt >= 2) {
            return audit;
        }
        if steady {
            std::thread::sleep(Duration::from_millis(150));
            if Fingerprint::of(ws) == before {
                return audit;
            }
        }
        last = Some(audit);
    }
    last.unwrap_or_else(|| audit_once(ws, Fingerprint::of(ws)))
}

impl Audit {
    /// No archive finding and no repository finding: `evolve verify` would exit 0.
    pub fn is_ok(&self) -> bool {
        self.report.ok() && self.repository_findings.is_empty()
    }

    fn row(&self, genid: &str) -> Option<&Row> {
        self.report.rows.iter().find(|r| r.genid == genid)
    }

    fn eligible(&self, genid: &str) -> bool {
        self.report
            .eligibility
            .iter()
            .any(|e| e.genid == genid && e.eligible)
    }

    fn is_champion(&self, genid: &str) -> bool {
        self.report
            .champion
            .as_ref()
            .is_some_and(|c| c.genid == genid)
    }

    /// The parsed events naming `genid`, in archive order.
    fn events_of<'a>(&'a self, genid: &str) -> impl Iterator<Item = &'a Value> {
        self.events
            .iter()
            .filter(move |e| e.get("genid").and_then(Value::as_str) == Some(genid))
    }

    /// The body of the last event of `kind` naming `genid`.
    fn last_body(&self, genid: &str, kind: &str) -> Option<&Map<String, Value>> {
        self.events_of(genid)
            .filter(|e| e.get("type").and_then(Value::as_str) == Some(kind))
            .last()
            .and_then(|e| e.get("body"))
            .and_then(Value::as_object)
    }
}

/// `evolve verify`'s checks, through the same code: the archive audit, tags the archive
/// does not know, stamped trees and evaluator trees against the repository.
fn audit_once(ws: &Workspace, fingerprint: Fingerprint) -> Audit {
    let (report, repository_findings) = Evidence::of_workspace(ws).verify();
    Audit {
        report,
        repository_findings,
        events: evidence::events_at(&ws.paths.archive())
            .iter()
            .map(Event::to_value)
            .collect(),
        fingerprint,
    }
}

/// The body of the last event of `kind` naming `row`'s generation among the archive's
/// certified lines (a line the audit did not certify for that row is skipped).
pub fn last_certified_body(archive: &Path, row: &Row, kind: &str) -> Option<Map<String, Value>> {
    let bytes = std::fs::read(archive).ok()?;
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes[..end]
        .split(|b| *b == b'\n')
        .zip(1u64..)
        .filter(|(_, line)| !row.uncertified_lines.contains(line))
        .filter_map(|(l, _)| Event::from_line(l).ok())
        .filter(|e| e.genid.as_deref() == Some(row.genid.as_str()) && e.event_type == kind)
        .last()
        .map(|e| e.body)
}

/// How the tree draws a row: `kept` (evaluated, gate kept it), `discarded` (evaluated, gate
/// discarded it), `failed` (its evaluation did not complete), `rejected` (stopped before any
/// evaluation: no proposal, surface, validation, novelty, operator failure, budget) or
/// `pending` (committed or evaluated, not yet gated).
pub fn class_of(row: &Row) -> &'static str {
    match row.display_status().as_str() {
        "pending_gate" | "committed" | "pending" => "pending",
        "benchmark_complete" => match row.verdict.as_deref() {
            Some("keep") => "kept",
            Some(_) => "discarded",
            None => "pending",
        },
        _ if row.evaluation.is_some() => "failed",
        _ => "rejected",
    }
}

/// The score of the row's last complete sealed-anchor evaluation.
fn anchor_score(row: &Row) -> Option<f64> {
    row.anchors
        .iter()
        .rev()
        .find(|a| a.outcome() == Some("benchmark_complete"))
        .and_then(Evaluation::score)
}

fn changed_paths(audit: &Audit, genid: &str) -> usize {
    audit
        .last_body(genid, "generation")
        .and_then(|b| b.get("changes"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

/// `GET /api/status`: the status bar.
pub fn status(ws: &Workspace, audit: &Audit) -> Value {
    let rows = &audit.report.rows;
    let mut by_status = BTreeMap::<String, u32>::new();
    let mut by_class = BTreeMap::<&str, u32>::new();
    for r in rows {
        *by_status.entry(r.display_status()).or_default() += 1;
        *by_class.entry(class_of(r)).or_default() += 1;
    }
    let spent: f64 = rows.iter().map(|r| r.cost_usd).sum();
    let champion = audit.report.champion.as_ref().map(|c| {
        let row = audit.row(&c.genid);
        json!({"genid": c.genid, "score": c.score, "sealed_anchor": row.and_then(anchor_score)})
    });
    let genesis = audit
        .row("0")
        .map(|r| json!({"score": r.score(), "sealed_anchor": anchor_score(r)}));
    let recipe = &ws.recipe;
    let operators: Map<String, Value> = recipe
        .operators
        .iter()
        .map(|(stage, b)| (stage.clone(), json!(b.operator)))
        .collect();
    json!({
        "experiment": ws.experiment_id,
        "workspace": ws.root(),
        "recipe": {
            "name": recipe.experiment.name,
            "max_generations": recipe.experiment.max_generations,
            "children_per_gen": recipe.experiment.children_per_gen,
            "engine": ws.engine.engine,
            "primary_split": ws.engine.primary_split,
            "surface": {"include": recipe.surface.include, "exclude": recipe.surface.exclude},
            "operators": operators,
        },
        "generations": rows.iter().filter_map(|r| genid_generation(&r.genid)).max().unwrap_or(0),
        "rows": rows.len(),
        "by_status": by_status,
        "by_class": by_class,
        "champion": champion,
        "genesis": genesis,
        "spent_usd": spent,
        "budget_usd": recipe.experiment.budget_usd,
        "integrity": integrity(audit),
        "in_progress": in_progress(ws),
    })
}

/// The verdict of `evolve verify` and everything it found.
fn integrity(audit: &Audit) -> Value {
    let r = &audit.report;
    json!({
        "verdict": if audit.is_ok() { "ok" } else { "FAIL" },
        "ok": audit.is_ok(),
        "lines": r.lines,
        "certified": r.certified,
        "findings": r.findings.iter().map(|f| json!({
            "source": f.source, "line": f.line, "kind": f.kind, "message": f.message, "text": f.to_string(),
        })).collect::<Vec<_>>(),
        "repository_findings": audit.repository_findings,
    })
}

/// Children being built right now (their worktrees exist): a run is in progress, or an
/// interrupted one left them for `evolve repair`.
fn in_progress(ws: &Workspace) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ws.paths.worktrees())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("gen-")
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// `GET /api/generations`: one entry per archived generation, in archive order.
pub fn generations(audit: &Audit) -> Value {
    let list: Vec<Value> = audit
        .report
        .rows
        .iter()
        .map(|r| {
            json!({
                "genid": r.genid,
                "generation": genid_generation(&r.genid),
                "parent": r.parent,
                "status": r.display_status(),
                "class": class_of(r),
                "score": r.score(),
                "verdict": r.verdict,
                "eligible": audit.eligible(&r.genid),
                "champion": audit.is_champion(&r.genid),
                "sealed_anchor": anchor_score(r),
                "failure_stage": r.failure_stage,
                "changed_paths": changed_paths(audit, &r.genid),
            })
        })
        .collect();
    Value::Array(list)
}

/// The row of `genid`, or a 404 naming it: ids are only ever looked up, never used as paths
/// before they are known to be archived.
pub(super) fn known_row<'a>(audit: &'a Audit, genid: &str) -> Result<&'a Row, ApiError> {
    audit.row(genid).ok_or_else(|| {
        ApiError::not_found(format!(
            "generation `{}` is not in the archive; GET /api/generations lists them",
            genid.chars().take(80).collect::<String>()
        ))
    })
}

/// `GET /api/generations/<id>`: everything about one generation.
pub fn generation(ws: &Workspace, audit: &Audit, genid: &str) -> Result<Value, ApiError> {
    let row = known_row(audit, genid)?;
    let reasons: Vec<String> = audit
        .report
        .eligibility
        .iter()
        .find(|e| e.genid == genid)
        .map(|e| e.reasons.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let events: Vec<Value> = audit.events_of(genid).cloned().collect();
    let generation_body = audit.last_body(genid, "generation");
    let proposal = commit_of(ws, row).is_none().then(|| {
        let body = last_certified_body(&ws.paths.archive(), row, "status");
        ws.proposal(genid, body.as_ref())
    });
    let proposal = proposal.flatten().map(|p| {
        json!({
            "ref": format!("refs/evolve/{}", layout::proposed_ref(genid)),
            "commit": p.commit.to_string(), "tree": p.tree.to_string(),
            "certified": p.matches_archive(),
        })
    });
    Ok(json!({
        "genid": row.genid,
        "generation": genid_generation(&row.genid),
        "parent": row.parent,
        "status": row.display_status(),
        "class": class_of(row),
        "score": row.score(),
        "verdict": row.verdict,
        "gate_reason": row.gate_reason,
        "reason": row.reason,
        "failure_stage": row.failure_stage,
        "champion": audit.is_champion(genid),
        "eligible": reasons.is_empty(),
        "ineligible_because": reasons,
        "commit": commit_of(ws, row).map(|c| c.to_string()),
        "proposal": proposal,
        "tag": ws.tag_commit(genid),
        "children": row.children,
        "cost_usd": row.cost_usd,
        "annotations": row.annotations,
        "changes": generation_body.and_then(|b| b.get("changes")).cloned().unwrap_or(json!([])),
        "notes": generation_body.and_then(|b| b.get("notes")).cloned().unwrap_or(json!([])),
        "usage": usage(generation_body),
        "evaluation": row.evaluation.as_ref().map(|e| evaluation_json(ws, &row.genid, e)),
        "anchors": row.anchors.iter().map(|e| evaluation_json(ws, &row.genid, e)).collect::<Vec<_>>(),
        "operators": operators(ws, audit, row),
        "events": events,
    }))
}

/// What the generation's stage calls spent: metered by the host, and as the operator claimed.
fn usage(body: Option<&Map<String, Value>>) -> Value {
    json!({
        "metered_cost_usd": body.and_then(|b| b.get("cost_usd")).cloned().unwrap_or(Value::Null),
        "claimed": body.and_then(|b| b.get("usage_claimed")).cloned().unwrap_or(Value::Null),
    })
}

/// One evaluation with its per-task trial table; each trial says whether its directory
/// holds a trajectory (`trajectory.rs` serves it).
fn evaluation_json(ws: &Workspace, genid: &str, ev: &Evaluation) -> Value {
    let stamp = &ev.stamp;
    let trials: Vec<Value> = stamp
        .get("task_vector")
        .and_then(|v| v.get("tasks"))
        .and_then(Value::as_object)
        .map(|tasks| {
            tasks
                .iter()
                .flat_map(|(task, t)| {
                    let list = t.get("trials").and_then(Value::as_array).cloned();
                    list.unwrap_or_default().into_iter().map(move |trial| {
                        let rep = trial.get("trial").and_then(Value::as_u64);
                        let trajectory = rep.and_then(|r| u32::try_from(r).ok()).is_some_and(|r| {
                            super::trajectory::has_trajectory(ws, genid, ev, task, r)
                        });
                        json!({
                            "trajectory": trajectory,
                            "task": task,
                            "trial": trial.get("trial"),
                            "status": trial.get("status"),
                            "reward": trial.get("reward"),
                            "timeout_owner": trial.get("timeout_owner"),
                            "error_kind": trial.get("error_kind"),
                        })
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let field = |k: &str| stamp.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "line": ev.line,
        "purpose": ev.purpose(),
        "outcome": ev.outcome(),
        "score": ev.score(),
        "attempt": field("attempt"),
        "expected_trials": field("expected_trials"),
        "scoreable_trials": field("scoreable_trials"),
        "cost_usd": ev.cost_usd(),
        "timings": field("timings"),
        "candidate_commit": ev.candidate_commit(),
        "reason": ev.reason,
        "problems": ev.problems,
        "trials": trials,
    })
}

/// The certified commit of a row: its generation event's, else its evaluation's; gen/0's
/// commit for the genesis row.
fn commit_of(ws: &Workspace, row: &Row) -> Option<Oid> {
    if row.genid == "0" {
        return Some(ws.genesis);
    }
    let text = row.commit.as_deref().or_else(|| {
        row.evaluation
            .as_ref()
            .and_then(Evaluation::candidate_commit)
    })?;
    Oid::from_str(text).ok()
}

/// Per bound stage: the operator the recipe names, the digest gen/0 froze, and for this
/// generation's call the digests that ran (archived with the generation event when the
/// lifecycle records them, else read from the call's `result.json`), its outcome and logs.
fn operators(ws: &Workspace, audit: &Audit, row: &Row) -> Vec<Value> {
    let frozen = frozen_manifest(ws);
    let archived = audit
        .events_of(&row.genid)
        .filter_map(|e| e.get("body")?.get("operators")?.as_object())
        .last();
    ALL_STAGES
        .iter()
        .map(|s| stage_name(*s))
        .filter_map(|stage| {
            let binding = ws.recipe.operators.get(stage);
            let dir = stage_dir(ws, &row.genid, stage);
            if binding.is_none() && dir.is_none() {
                return None;
            }
            let result = dir
                .as_deref()
                .and_then(|d| read_json(&d.join("result.json")));
            let identity = archived.and_then(|a| a.get(stage));
            let pick = |k: &str| {
                identity
                    .and_then(|i| i.get(k))
                    .or_else(|| result.as_ref().and_then(|r| r.get(k)))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            let source = match (identity, &result) {
                (Some(_), _) => "archive",
                (None, Some(_)) => "run_dir",
                (None, None) => "none",
            };
            Some(json!({
                "stage": stage,
                "operator": binding.map(|b| b.operator.clone()),
                "config": binding.map(|b| Value::Object(b.config.clone())),
                "frozen_sha256": frozen.get(stage).and_then(|c| c.get("sha256")).cloned(),
                "component_sha256": pick("component_sha256"),
                "script_path": pick("script_path"),
                "script_sha256": pick("script_sha256"),
                "identity_from": source,
                "called": result.is_some(),
                "elapsed_ms": result.as_ref().and_then(|r| r.get("elapsed_ms")).cloned(),
                "error": result.as_ref().and_then(|r| r.get("error")).cloned(),
                "logs": dir.as_deref().map(stage_logs),
                "trajectory": dir.as_deref().is_some_and(super::trajectory::stage_has_trajectory),
            }))
        })
        .collect()
}

/// `operators/manifest.json` of gen/0: stage → {operator, sha256, bytes, source}.
fn frozen_manifest(ws: &Workspace) -> Map<String, Value> {
    ws.store
        .read_blob(ws.genesis, layout::COMPONENTS_MANIFEST, 1 << 20)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("components")?.as_object().cloned())
        .unwrap_or_default()
}

/// The run directory of `stage` for `genid`. Select runs once per generation, so a child
/// `3-1` finds it under `gen-3`.
fn stage_dir(ws: &Workspace, genid: &str, stage: &str) -> Option<std::path::PathBuf> {
    let own = ws.paths.run_dir(genid).join(stage);
    if is_real_dir(&own) {
        return Some(own);
    }
    let generation = genid_generation(genid)?.to_string();
    let shared = ws.paths.run_dir(&generation).join(stage);
    (stage == "select" && is_real_dir(&shared)).then_some(shared)
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn stage_logs(dir: &Path) -> Value {
    json!({
        "stdout": tail(&dir.join("operator.stdout.log")),
        "stderr": tail(&dir.join("operator.stderr.log")),
        "model": tail(&dir.join("model").join(crate::model::LOG_FILE)),
    })
}

/// Open a regular file for reading, never through a symlink.
fn open_regular(path: &Path) -> Option<std::fs::File> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    std::fs::File::open(path).ok()
}

fn read_json(path: &Path) -> Option<Value> {
    let mut bytes = Vec::new();
    open_regular(path)?
        .take(MAX_RESULT_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The last [`MAX_LOG_BYTES`] of a log, with how much came before; `null` when absent.
fn tail(path: &Path) -> Value {
    let Some(mut file) = open_regular(path) else {
        return Value::Null;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let skipped = len.saturating_sub(MAX_LOG_BYTES);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(skipped)).is_err()
        || file.take(MAX_LOG_BYTES).read_to_end(&mut bytes).is_err()
    {
        return Value::Null;
    }
    json!({"text": String::from_utf8_lossy(&bytes), "bytes": len, "skipped_bytes": skipped})
}

/// `GET /api/generations/<id>/diff`: the generation's tree against its parent's.
pub fn diff(ws: &Workspace, audit: &Audit, genid: &str) -> Result<Value, ApiError> {
    let row = known_row(audit, genid)?;
    let Some(to) = commit_of(ws, row) else {
        return proposed_diff(ws, audit, row);
    };
    let Some(parent) = row.parent.as_deref() else {
        return Ok(no_diff(
            genid,
            None,
            "gen 0 is the seed: it has no parent to diff against",
        ));
    };
    let from = audit
        .row(parent)
        .and_then(|p| commit_of(ws, p))
        .ok_or_else(|| {
            ApiError::internal(format!(
                "the parent gen {parent} of gen {genid} has no certified commit"
            ))
        })?;
    diff_between(ws, (parent, from), (genid, to))
}

/// A generation stopped before its commit: the tree it proposed (kept on
/// `refs/evolve/proposed/<id>` when it was rejected after its snapshot) against its
/// parent's, with the stop's status and reason.
fn proposed_diff(ws: &Workspace, audit: &Audit, row: &Row) -> Result<Value, ApiError> {
    let genid = row.genid.as_str();
    let stopped = json!({
        "stopped": true, "status": row.display_status(),
        "failure_stage": row.failure_stage, "reason": row.reason,
    });
    let with_stop = |mut v: Value| {
        if let (Some(v), Some(s)) = (v.as_object_mut(), stopped.as_object()) {
            v.extend(s.clone());
        }
        v
    };
    let body = last_certified_body(&ws.paths.archive(), row, "status");
    let parent = row.parent.as_deref();
    let from = parent
        .and_then(|p| audit.row(p))
        .and_then(|p| commit_of(ws, p));
    let (Some(p), Some(parent), Some(from)) = (ws.proposal(genid, body.as_ref()), parent, from)
    else {
        return Ok(with_stop(no_diff(
            genid,
            parent,
            "this generation stopped before its tree was committed and kept no proposed tree, so there is nothing to diff",
        )));
    };
    if p.archived_tree.is_some() && !p.matches_archive() {
        return Ok(with_stop(no_diff(
            genid,
            Some(parent),
            &format!(
                "refs/evolve/proposed/{genid} names tree {}, not the tree {} the archived stop recorded: it was moved after the run",
                p.tree,
                p.archived_tree.as_deref().unwrap_or("-")
            ),
        )));
    }
    let mut v = with_stop(diff_between(ws, (parent, from), (genid, p.commit))?);
    v["proposed"] = json!(true);
    v["certified"] = json!(p.matches_archive());
    v["ref"] = json!(format!("refs/evolve/{}", layout::proposed_ref(genid)));
    Ok(v)
}

/// `GET /api/champion/diff`: the champion's tree against gen/0's (everything the run kept).
pub fn champion_diff(ws: &Workspace, audit: &Audit) -> Result<Value, ApiError> {
    let Some(champion) = &audit.report.champion else {
        return Ok(no_diff("-", Some("0"), "there is no champion yet"));
    };
    let row = known_row(audit, &champion.genid)?;
    let to = commit_of(ws, row).ok_or_else(|| {
        ApiError::internal(format!("the champion gen {} has no commit", row.genid))
    })?;
    diff_between(ws, ("0", ws.genesis), (&row.genid, to))
}

fn no_diff(genid: &str, parent: Option<&str>, why: &str) -> Value {
    json!({"from": parent, "to": genid, "available": false, "why": why, "changes": [], "text": ""})
}

fn diff_between(ws: &Workspace, from: (&str, Oid), to: (&str, Oid)) -> Result<Value, ApiError> {
    let git = |e: evolve_snapshot::Error| ApiError::internal(format!("diff: {e}"));
    let changes = ws.store.diff(from.1, to.1).map_err(git)?;
    let from_tree = ws.store.tree_of(from.1).map_err(git)?;
    let to_tree = ws.store.tree_of(to.1).map_err(git)?;
    let text = ws
        .store
        .unified_diff(from_tree, to_tree, &|_| true, MAX_DIFF_BYTES)
        .map_err(git)?;
    let changes: Vec<Value> = changes
        .iter()
        .map(|c| json!({"path": c.path, "change": format!("{:?}", c.kind).to_lowercase()}))
        .collect();
    Ok(json!({
        "from": from.0, "to": to.0,
        "from_commit": from.1.to_string(), "to_commit": to.1.to_string(),
        "available": true, "changes": changes, "text": text,
        "truncated": text.ends_with(" bytes]\n") && text.contains("\n[diff truncated after "),
    }))
}

/// `GET /api/generations/<genid>/evaluations/<line>/trials/<task>/<trial>`: the trial
/// looked up among the archived rows, then shown with its trajectory (`trajectory.rs`).
pub fn trial(
    ws: &Workspace,
    audit: &Audit,
    genid: &str,
    line: &str,
    task: &str,
    trial: &str,
) -> Result<Value, ApiError> {
    let row = known_row(audit, genid)?;
    let ev = evaluation_at(row, line)?;
    let stamped = stamped_trial(ev, task, trial)?;
    Ok(super::trajectory::trial(ws, row, ev, task, stamped))
}

/// `GET /api/generations/<genid>/stages/<stage>/trajectory`: the trajectory the stage's
/// operator left in its scratch directory (`mutate/coder`'s conversation), bounded.
pub fn stage_trajectory(
    ws: &Workspace,
    audit: &Audit,
    genid: &str,
    stage: &str,
) -> Result<Value, ApiError> {
    let row = known_row(audit, genid)?;
    let Some(stage) = ALL_STAGES
        .iter()
        .map(|s| stage_name(*s))
        .find(|s| *s == stage)
    else {
        return Err(ApiError::not_found(format!(
            "`{}` is not a stage; the stages are {}",
            clipped(stage),
            ALL_STAGES
                .iter()
                .map(|s| stage_name(*s))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let dir = stage_dir(ws, &row.genid, stage);
    Ok(super::trajectory::stage(&row.genid, stage, dir.as_deref()))
}

/// The certified evaluation of `row` (its primary one or a sealed anchor) at archive
/// line `line`.
fn evaluation_at<'a>(row: &'a Row, line: &str) -> Result<&'a Evaluation, ApiError> {
    let wanted: Option<u64> = line.parse().ok();
    row.evaluation
        .iter()
        .chain(&row.anchors)
        .find(|e| Some(e.line) == wanted)
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "gen {} has no certified evaluation at archive line `{}`; GET /api/generations/{} lists them",
                row.genid,
                clipped(line),
                row.genid
            ))
        })
}

fn clipped(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The stamped record of `task`'s trial `trial` in `ev`'s task vector.
fn stamped_trial<'a>(ev: &'a Evaluation, task: &str, trial: &str) -> Result<&'a Value, ApiError> {
    let wanted: Option<u64> = trial.parse().ok();
    ev.stamp
        .get("task_vector")
        .and_then(|v| v.get("tasks"))
        .and_then(|t| t.get(task))
        .and_then(|t| t.get("trials"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| {
            t.get("trial")
                .and_then(Value::as_u64)
                .is_some_and(|n| Some(n) == wanted)
        })
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "the evaluation at archive line {} has no trial `{}` of task `{}`",
                ev.line,
                clipped(trial),
                clipped(task)
            ))
        })
}
