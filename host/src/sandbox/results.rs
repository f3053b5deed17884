//! The host's checks on what an operator returned. The guest SDK checks some of the
//! same things for friendlier errors, but only these checks count: a hand-written or
//! hostile component is held to exactly the same contract.

use super::bindings::stage::meta::Description;
use super::bindings::types::*;
use super::contract::stage_name;
use super::io::StageOutput;
use serde_json::{Map, Value};

type Check<T> = Result<T, String>;

/// Largest annotation object a record call may return, in bytes of canonical JSON: an
/// annotation is archived with its generation for good (issue 22: 7 MiB per generation
/// made a 161 MB archive in 22 generations).
pub const MAX_ANNOTATION_BYTES: usize = 64 << 10;
/// Largest single playbook operation (id, text and data of an `add`; id and reason of
/// a `credit`; the id of a `retire`).
pub const MAX_PLAYBOOK_OP_BYTES: usize = 64 << 10;
/// Largest playbook: the entries reflect is handed plus the ones its result adds, and
/// the operations of one reflect result. Every `add` stays in the archive and is handed
/// to every later reflect call, so the whole playbook is bounded, not each call.
pub const MAX_PLAYBOOK_BYTES: usize = 1 << 20;

pub(crate) fn check_description(d: Description, bound: Stage) -> Check<StageOutput> {
    if d.stage != bound {
        return Err(format!(
            "describe() says stage `{}` but the component exports the `{}` world",
            stage_name(d.stage),
            stage_name(bound)
        ));
    }
    let name_ok = !d.name.is_empty()
        && d.name.len() <= 64
        && d.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !name_ok {
        return Err("describe() returned a name that is not 1-64 characters of [a-z0-9_]".into());
    }
    if d.summary.trim().is_empty() || d.summary.contains('\n') {
        return Err("describe() must return a one-line, non-empty summary".into());
    }
    json_object("config-schema", &d.config_schema)?;
    Ok(StageOutput::Description(d))
}

pub(crate) fn check_normalized(r: Result<String, Vec<ConfigViolation>>) -> Check<StageOutput> {
    match r {
        Ok(text) => Ok(StageOutput::NormalizedConfig(Ok(json_object(
            "normalized config",
            &text,
        )?))),
        Err(v) if v.is_empty() => Err("normalize-config failed without naming a violation".into()),
        Err(v) => Ok(StageOutput::NormalizedConfig(Err(v))),
    }
}

/// `max` is the generation's number of children: one id each, or one for all.
pub(crate) fn check_parents(parents: Vec<String>, max: usize) -> Check<StageOutput> {
    if parents.is_empty() {
        return Err("select must return at least one parent id".into());
    }
    if parents.len() > max {
        return Err(format!(
            "select returned {} parent ids; at most {max} are allowed (one per child, or one \
             for all)",
            parents.len()
        ));
    }
    if parents.iter().any(|p| p.trim().is_empty()) {
        return Err("select returned an empty parent id".into());
    }
    Ok(StageOutput::Parents(parents))
}

/// Artifact paths are vetted one by one after the call (`vet_artifacts`): a bad one is
/// refused and reported without taking the valid ones with it.
pub(crate) fn check_evidence(e: Evidence) -> Check<StageOutput> {
    json_object("summary", &e.summary)?;
    Ok(StageOutput::Evidence(e))
}

pub(crate) fn check_proposal(p: Proposal) -> Check<StageOutput> {
    if !(p.usage.usd.is_finite() && p.usage.usd >= 0.0) {
        return Err("usage.usd must be a finite, non-negative number".into());
    }
    for path in &p.changed {
        relative_path("changed", path)?;
    }
    Ok(StageOutput::Proposal(p))
}

pub(crate) fn check_validation(v: Validation) -> Check<StageOutput> {
    Ok(StageOutput::Validation(v))
}

pub(crate) fn check_novelty(n: NoveltyVerdict) -> Check<StageOutput> {
    if !n.novelty.is_finite() {
        return Err("novelty must be a finite number".into());
    }
    Ok(StageOutput::Novelty(n))
}

pub(crate) fn check_gate(g: GateDecision) -> Check<StageOutput> {
    Ok(StageOutput::Gate(g))
}

pub(crate) fn check_annotations(text: String) -> Check<StageOutput> {
    let map = json_object("annotations", &text)?;
    let n = evolve_archive::canonical_bytes(&Value::Object(map.clone())).len();
    if n > MAX_ANNOTATION_BYTES {
        return Err(format!(
            "the annotations are {n} bytes of canonical JSON; the cap is {MAX_ANNOTATION_BYTES}"
        ));
    }
    Ok(StageOutput::Annotations(map))
}

/// Bytes of one playbook operation, as [`MAX_PLAYBOOK_OP_BYTES`] counts them.
fn op_bytes(op: &PlaybookOp) -> usize {
    match op {
        PlaybookOp::Add(e) => entry_bytes(e),
        PlaybookOp::Credit(c) => c.id.len() + c.reason.len() + 8,
        PlaybookOp::Retire(id) => id.len(),
    }
}

fn entry_bytes(e: &PlaybookEntry) -> usize {
    e.id.len() + e.text.len() + e.data.len()
}

/// The playbook a stage is handed must fit [`MAX_PLAYBOOK_BYTES`]. The lifecycle calls
/// this where it assembles the playbook from the archive; the reflect result check
/// (`check_playbook`) keeps a playbook from growing past it in the first place.
pub fn check_playbook_size(entries: &[PlaybookEntry]) -> Check<()> {
    let total: usize = entries.iter().map(entry_bytes).sum();
    if total > MAX_PLAYBOOK_BYTES {
        return Err(format!(
            "the playbook is {total} bytes; the cap is {MAX_PLAYBOOK_BYTES}"
        ));
    }
    Ok(())
}

/// `handed` is the playbook the call received: its entries plus the result's `add`s
/// must fit [`MAX_PLAYBOOK_BYTES`].
pub(crate) fn check_playbook(ops: Vec<PlaybookOp>, handed: &[PlaybookEntry]) -> Check<StageOutput> {
    let mut result_total = 0usize;
    let mut playbook_total: usize = handed.iter().map(entry_bytes).sum();
    for (i, op) in ops.iter().enumerate() {
        let n = op_bytes(op);
        if n > MAX_PLAYBOOK_OP_BYTES {
            return Err(format!(
                "playbook operation {i} is {n} bytes; the cap is {MAX_PLAYBOOK_OP_BYTES}"
            ));
        }
        result_total += n;
        if result_total > MAX_PLAYBOOK_BYTES {
            return Err(format!(
                "the playbook operations are over {MAX_PLAYBOOK_BYTES} bytes (the cap) by \
                 operation {i}"
            ));
        }
        if let PlaybookOp::Add(_) = op {
            playbook_total += n;
            if playbook_total > MAX_PLAYBOOK_BYTES {
                return Err(format!(
                    "the playbook would be {playbook_total} bytes with operation {i}; the cap \
                     is {MAX_PLAYBOOK_BYTES}"
                ));
            }
        }
    }
    for op in &ops {
        match op {
            PlaybookOp::Add(e) => {
                if e.id.trim().is_empty() {
                    return Err("a playbook entry needs a non-empty id".into());
                }
                json_object("playbook entry data", &e.data)?;
            }
            PlaybookOp::Credit(c) if !c.delta.is_finite() => {
                return Err("a playbook credit delta must be finite".into());
            }
            PlaybookOp::Credit(c) if c.id.trim().is_empty() => {
                return Err("a playbook credit needs the id of an entry".into());
            }
            PlaybookOp::Retire(id) if id.trim().is_empty() => {
                return Err("a playbook retire needs the id of an entry".into());
            }
            _ => {}
        }
    }
    Ok(StageOutput::Playbook(ops))
}

/// A revision's recipe must be a JSON object; what it may change is the lifecycle's
/// business (`lifecycle::agent_driver`), checked against the active recipe.
pub(crate) fn check_revision(r: Option<Revision>) -> Check<StageOutput> {
    if let Some(r) = &r {
        json_object("revision recipe", &r.recipe)?;
    }
    Ok(StageOutput::Revision(r))
}

fn json_object(what: &str, text: &str) -> Check<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!("{what} must be a JSON object")),
        Err(e) => Err(format!(
            "{what} is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        )),
    }
}

/// Keep the artifacts that name a regular file under `scratch` (the call's `/scratch`,
/// where artifacts live), and return one line per refused one: a bad path, a symbolic
/// link (never followed), a directory, a missing file. Without a scratch directory
/// every artifact is refused.
pub(crate) fn vet_artifacts(
    scratch: Option<&std::path::Path>,
    artifacts: &mut Vec<String>,
) -> Vec<String> {
    let dir = scratch
        .and_then(|s| cap_std::fs::Dir::open_ambient_dir(s, cap_std::ambient_authority()).ok());
    let mut refused = Vec::new();
    artifacts.retain(|p| {
        let why = match (relative_path("artifact", p), &dir) {
            (Err(e), _) => e,
            (Ok(()), None) => format!(
                "artifact `{}`: no /scratch to read it from",
                crate::display::path(&truncate(p, 80))
            ),
            (Ok(()), Some(dir)) => match dir.symlink_metadata(p) {
                Ok(m) if m.is_file() => return true,
                Ok(m) => format!(
                    "artifact `{}` is a {}, not a regular file (links are not followed)",
                    crate::display::path(&truncate(p, 80)),
                    if m.is_symlink() {
                        "symbolic link"
                    } else if m.is_dir() {
                        "directory"
                    } else {
                        "special file"
                    }
                ),
                Err(e) => format!(
                    "artifact `{}` cannot be read in /scratch: {e}",
                    crate::display::path(&truncate(p, 80))
                ),
            },
        };
        refused.push(why);
        false
    });
    refused
}

/// A relative, normalized path of ordinary segments: no `..`, no absolute path, no
/// empty or `.` segment, no control characters, bounded length.
pub fn relative_path(what: &str, path: &str) -> Check<()> {
    let bad = path.is_empty()
        || path.len() > 4096
        || path.starts_with('/')
        || path.chars().any(|c| c.is_control())
        || path
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..");
    if bad {
        return Err(format!(
            "{what} path `{}` must be a relative path without `..`",
            crate::display::path(&truncate(path, 80))
        ));
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Bytes of text and list items in a result: what the size cap measures.
pub(crate) fn size(out: &StageOutput) -> usize {
    let strs = |v: &[String]| v.iter().map(|s| s.len() + 8).sum::<usize>();
    match out {
        StageOutput::Description(d) => d.name.len() + d.summary.len() + d.config_schema.len(),
        StageOutput::NormalizedConfig(Ok(m)) | StageOutput::Annotations(m) => {
            Value::Object(m.clone()).to_string().len()
        }
        StageOutput::NormalizedConfig(Err(v)) => {
            v.iter().map(|v| v.path.len() + v.message.len()).sum()
        }
        StageOutput::Parents(p) => strs(p),
        StageOutput::Evidence(e) => e.summary.len() + strs(&e.artifacts),
        StageOutput::Proposal(p) => strs(&p.changed) + strs(&p.notes),
        StageOutput::Validation(v) => v.reason.len() + strs(&v.artifacts),
        StageOutput::Novelty(_) => 16,
        StageOutput::Gate(g) => g.reason.len(),
        StageOutput::Playbook(ops) => ops.iter().map(op_bytes).sum(),
        StageOutput::Revision(r) => r.as_ref().map_or(0, |r| r.recipe.len() + r.reason.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_refuse_escapes() {
        for ok in ["a.txt", "dir/b.json", "x/y/z"] {
            assert_eq!(relative_path("artifact", ok), Ok(()));
        }
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a\nb"] {
            assert!(relative_path("artifact", bad).is_err(), "{bad:?} accepted");
        }
    }

    fn add(id: &str, text_len: usize) -> PlaybookOp {
        PlaybookOp::Add(PlaybookEntry {
            id: id.into(),
            text: "t".repeat(text_len),
            data: "{}".into(),
        })
    }

    #[test]
    fn playbook_operations_and_the_whole_playbook_are_capped() {
        assert!(check_playbook(vec![add("a", 100)], &[]).is_ok());
        assert_eq!(
            check_playbook(vec![add("a", 1), add("b", MAX_PLAYBOOK_OP_BYTES)], &[]).unwrap_err(),
            format!(
                "playbook operation 1 is {} bytes; the cap is {MAX_PLAYBOOK_OP_BYTES}",
                MAX_PLAYBOOK_OP_BYTES + 3
            )
        );
        // Each op fits, but the playbook handed in plus the adds does not.
        let handed: Vec<PlaybookEntry> = (0..16)
            .map(|i| PlaybookEntry {
                id: format!("e{i}"),
                text: "t".repeat(MAX_PLAYBOOK_BYTES / 16 - 8),
                data: "{}".into(),
            })
            .collect();
        assert!(check_playbook_size(&handed).is_ok());
        let err = check_playbook(vec![add("z", 100)], &handed).unwrap_err();
        assert!(
            err.starts_with("the playbook would be ") && err.ends_with("the cap is 1048576"),
            "{err}"
        );
        let mut over = handed.clone();
        over[0].text.push_str(&"t".repeat(200));
        assert!(
            check_playbook_size(&over)
                .unwrap_err()
                .ends_with("the cap is 1048576")
        );
        // Many small credits are capped by the total of one result.
        let credits = vec![
            PlaybookOp::Credit(PlaybookCredit {
                id: "a".into(),
                delta: 0.1,
                reason: "r".repeat(100),
            });
            20_000
        ];
        assert!(
            check_playbook(credits, &[])
                .unwrap_err()
                .contains("over 1048576 bytes")
        );
    }

    #[test]
    fn non_finite_and_empty_results_are_refused() {
        assert!(check_parents(vec![], 1).is_err());
        assert!(check_parents(vec![" ".into()], 1).is_err());
        assert!(check_parents(vec!["0".into(); 2], 2).is_ok());
        assert_eq!(
            check_parents(vec!["0".into(); 3], 2).unwrap_err(),
            "select returned 3 parent ids; at most 2 are allowed (one per child, or one for all)"
        );
        assert!(
            check_novelty(NoveltyVerdict {
                novelty: f64::NAN,
                accept: true
            })
            .is_err()
        );
        assert!(check_annotations("[1]".into()).is_err());
        let big = format!("{{\"x\": \"{}\"}}", "a".repeat(MAX_ANNOTATION_BYTES));
        assert!(
            check_annotations(big)
                .unwrap_err()
                .contains("the cap is 65536")
        );
        assert!(check_normalized(Err(vec![])).is_err());
    }
}
