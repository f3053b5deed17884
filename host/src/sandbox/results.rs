//! The host's checks on what an operator returned. The guest SDK checks some of the
//! same things for friendlier errors, but only these checks count: a hand-written or
//! hostile component is held to exactly the same contract.

use super::bindings::stage::meta::Description;
use super::bindings::types::*;
use super::contract::stage_name;
use super::io::StageOutput;
use serde_json::{Map, Value};

type Check<T> = Result<T, String>;

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

pub(crate) fn check_parents(parents: Vec<String>) -> Check<StageOutput> {
    if parents.is_empty() {
        return Err("select must return at least one parent id".into());
    }
    if parents.iter().any(|p| p.trim().is_empty()) {
        return Err("select returned an empty parent id".into());
    }
    Ok(StageOutput::Parents(parents))
}

pub(crate) fn check_evidence(e: Evidence) -> Check<StageOutput> {
    json_object("summary", &e.summary)?;
    artifact_paths(&e.artifacts)?;
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
    artifact_paths(&v.artifacts)?;
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
    Ok(StageOutput::Annotations(json_object("annotations", &text)?))
}

pub(crate) fn check_playbook(ops: Vec<PlaybookOp>) -> Check<StageOutput> {
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

fn artifact_paths(paths: &[String]) -> Check<()> {
    for p in paths {
        relative_path("artifact", p)?;
    }
    Ok(())
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
            "{what} path {:?} must be a relative path without `..`",
            truncate(path, 80)
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
        StageOutput::Playbook(ops) => ops
            .iter()
            .map(|op| match op {
                PlaybookOp::Add(e) => e.id.len() + e.text.len() + e.data.len(),
                PlaybookOp::Credit(c) => c.id.len() + c.reason.len() + 8,
                PlaybookOp::Retire(id) => id.len(),
            })
            .sum(),
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

    #[test]
    fn non_finite_and_empty_results_are_refused() {
        assert!(check_parents(vec![]).is_err());
        assert!(check_parents(vec![" ".into()]).is_err());
        assert!(
            check_novelty(NoveltyVerdict {
                novelty: f64::NAN,
                accept: true
            })
            .is_err()
        );
        assert!(check_annotations("[1]".into()).is_err());
        assert!(check_normalized(Err(vec![])).is_err());
    }
}
