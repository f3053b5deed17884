//! The invariants every trial ends with: the workspace is in a valid, attributable
//! state, `evolve verify` agrees with what the scenario expects, and the champion is
//! reproducible from the evidence (its certified commit, evaluated again on a fresh
//! checkout, scores what the archive says).

use super::lab::{Lab, Trial, Verified, events, verify};
use crate::lifecycle::evaluate::{EvalError, EvalRequest, Evaluated, evaluate};
use crate::workspace::Workspace;
use serde_json::Value;

/// `evolve verify` passes.
pub fn verify_clean(lab: &Lab, t: &Trial) -> Result<Verified, String> {
    let v = verify(lab, t)?;
    if !v.ok {
        return Err(format!("`evolve verify` failed: {:?}", v.kinds));
    }
    Ok(v)
}

/// `evolve verify` fails (exit 1) with at least one finding of the expected kinds.
pub fn verify_finds(lab: &Lab, t: &Trial, expected: &[&str]) -> Result<Verified, String> {
    let v = verify(lab, t)?;
    if v.ok || !v.kinds.iter().any(|k| expected.contains(&k.as_str())) {
        return Err(format!(
            "`evolve verify` should report one of {expected:?}; it reported {:?}",
            v.kinds
        ));
    }
    Ok(v)
}

/// `evolve log ws --json`: one row per generation (certified lines only).
pub fn log(lab: &Lab, t: &Trial) -> Result<Vec<Value>, String> {
    let out = lab.run_ok(&t.dir, &["log", "ws", "--json"])?;
    match serde_json::from_str(&out.stdout) {
        Ok(Value::Array(rows)) => Ok(rows),
        _ => Err(format!(
            "`evolve log --json` printed no rows: {}",
            out.tail()
        )),
    }
}

pub fn row<'a>(log: &'a [Value], genid: &str) -> Result<&'a Value, String> {
    log.iter()
        .find(|r| r["genid"] == genid)
        .ok_or_else(|| format!("`evolve log` has no row {genid}"))
}

/// Every row has a status, and every row but generation zero names its parent.
pub fn attributable(log: &[Value]) -> Result<(), String> {
    for r in log {
        let genid = r["genid"].as_str().unwrap_or("?");
        if !r["status"].is_string() {
            return Err(format!("row {genid} has no status"));
        }
        if genid != "0" && !r["parent"].is_string() {
            return Err(format!("row {genid} names no parent"));
        }
    }
    Ok(())
}

/// The reason of the last `status` event of `genid` (the early stop), if any.
pub fn stop_reason(t: &Trial, genid: &str) -> Result<Option<(String, String)>, String> {
    Ok(events(&t.ws)?
        .iter()
        .rfind(|e| e["type"] == "status" && e["genid"] == genid)
        .map(|e| {
            (
                e["body"]["status"].as_str().unwrap_or("").to_string(),
                format!(
                    "{} {}",
                    e["body"]["failure_stage"].as_str().unwrap_or(""),
                    e["body"]["reason"].as_str().unwrap_or("")
                ),
            )
        }))
}

/// Generation `genid` stopped with `status`, its reason mentioning every `needles`
/// entry; it is not an eligible parent.
pub fn stopped(
    lab: &Lab,
    t: &Trial,
    genid: &str,
    status: &str,
    needles: &[&str],
) -> Result<String, String> {
    let (got, reason) =
        stop_reason(t, genid)?.ok_or_else(|| format!("gen {genid} has no status event"))?;
    if got != status {
        return Err(format!(
            "gen {genid} stopped as {got} ({reason}), expected {status}"
        ));
    }
    if let Some(n) = needles.iter().find(|n| !reason.contains(**n)) {
        return Err(format!(
            "gen {genid}'s reason does not mention {n:?}: {reason}"
        ));
    }
    let log = log(lab, t)?;
    if row(&log, genid)?["eligible"] != false {
        return Err(format!("gen {genid} ({status}) is an eligible parent"));
    }
    Ok(format!("gen {genid}: {status}"))
}

/// No evaluation event names `genid` (the candidate never reached the evaluator).
pub fn never_evaluated(t: &Trial, genid: &str) -> Result<(), String> {
    let evaluated = events(&t.ws)?
        .iter()
        .any(|e| e["type"] == "evaluation" && e["genid"] == genid);
    if evaluated {
        return Err(format!("gen {genid} was evaluated"));
    }
    Ok(())
}

/// The champion's certified commit, evaluated again on a fresh checkout by the frozen
/// engine, scores exactly what the archive certified.
pub fn champion_reproduces(t: &Trial) -> Result<String, String> {
    let ws = Workspace::open(&t.ws).map_err(|e| e.what)?;
    let report = evolve_archive::verify(
        &ws.paths.archive(),
        &ws.paths.receipts(),
        &ws.public_key,
        &|g| ws.tag_commit(g),
        None,
    );
    let champ = report
        .champion
        .ok_or("no champion: not even generation zero is eligible")?;
    let commit = report
        .rows
        .iter()
        .find(|r| r.genid == champ.genid)
        .and_then(|r| r.evaluation.as_ref())
        .and_then(|e| e.candidate_commit())
        .and_then(|c| evolve_snapshot::Oid::from_str(c).ok())
        .ok_or_else(|| format!("champion gen {} has no certified commit", champ.genid))?;
    let genid = format!("selftest-recheck-{}", champ.genid);
    let done = evaluate_outside_the_run(&ws, &genid, None, commit)?.map_err(|e| e.to_string())?;
    match done.score {
        Some(s) if done.outcome == "benchmark_complete" && (s - champ.score).abs() <= 1e-9 => {
            Ok(format!("champion gen {} re-evaluates to {s}", champ.genid))
        }
        other => Err(format!(
            "champion gen {} was certified at {} but re-evaluates to {other:?} ({})",
            champ.genid, champ.score, done.outcome
        )),
    }
}

/// The end state every trial must reach: verify passes, every row is attributable,
/// and the champion re-evaluates to its certified score. Returns the champion.
pub fn settled(lab: &Lab, t: &Trial) -> Result<(String, f64), String> {
    let v = verify_clean(lab, t)?;
    attributable(&log(lab, t)?)?;
    champion_reproduces(t)?;
    v.champion
        .ok_or_else(|| "`evolve verify` names no champion".into())
}

/// The champion is generation `genid`.
pub fn champion_is(champion: &(String, f64), genid: &str) -> Result<(), String> {
    if champion.0 != genid {
        return Err(format!(
            "the champion is gen {} ({}), expected gen {genid}",
            champion.0, champion.1
        ));
    }
    Ok(())
}

/// Evaluate `commit` on the primary split with the workspace's own engine, as generation
/// `genid` (a name no run uses), outside any run: the outer error is the host's, the
/// inner one the evaluation's.
pub fn evaluate_outside_the_run(
    ws: &Workspace,
    genid: &str,
    parent: Option<&str>,
    commit: evolve_snapshot::Oid,
) -> Result<Result<Evaluated, EvalError>, String> {
    let req = EvalRequest {
        genid: genid.into(),
        parent: parent.map(str::to_string),
        commit,
        purpose: "candidate",
        split: ws.primary_split(),
        certified_attempts: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let engine = rt
        .block_on(crate::lifecycle::make_engine(&ws.engine, &ws.recipe))
        .map_err(|e| e.what)?;
    Ok(rt.block_on(evaluate(ws, engine, &req)))
}
