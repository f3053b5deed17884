//! Reading a Harbor trial back: its `result.json` (shared/reference/harbor.md §2.5), its
//! `exception_info` classified into this project's statuses (after RSIHub's `_trial_result`,
//! §5.3), its reward files read with this project's own parser, the agent's self-reported
//! usage, and its ATIF trajectory.

use std::path::{Path, PathBuf};

use crate::engine::local::finish_with_reward;
use crate::error::{Error, Result};
use crate::result::{
    AgentUsage, Isolation, TimeoutOwner, TrialError, TrialLogs, TrialResult, TrialStatus,
};

/// One Harbor trial found in a job directory.
#[derive(Debug, Clone)]
pub struct HarborTrial {
    pub task_name: String,
    pub trial_name: String,
    /// `<job>/<trial>/result.json`.
    pub result_json: PathBuf,
}

/// Every `<job>/<trial>/result.json` with string `task_name` and `trial_name` (which skips
/// the job's own result.json and anything else), sorted by task, then trial name.
pub fn trials_in(job_dir: &Path) -> Vec<HarborTrial> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(job_dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path().join("result.json");
        let Some(v) = std::fs::read(&p)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        else {
            continue;
        };
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        if let (Some(task_name), Some(trial_name)) = (s("task_name"), s("trial_name")) {
            out.push(HarborTrial {
                task_name,
                trial_name,
                result_json: p,
            });
        }
    }
    out.sort_by(|a, b| {
        a.task_name
            .cmp(&b.task_name)
            .then(a.trial_name.cmp(&b.trial_name))
    });
    out
}

/// The first trial result.json in `job_dir` (see [`trials_in`]).
pub fn find_trial_result(job_dir: &Path) -> Option<PathBuf> {
    trials_in(job_dir).into_iter().next().map(|t| t.result_json)
}

/// Exceptions of Harbor's sandbox (environment start, image build, agent setup, health
/// checks, compose failures, copying tests or logs): the machinery failed, not the agent,
/// so another attempt may pass (reference §2.7, `sandbox_failed`).
const SANDBOX_FAILED: &[&str] = &[
    "EnvironmentStartTimeoutError",
    "SandboxBuildFailedError",
    "AgentSetupTimeoutError",
    "HealthcheckError",
    "RuntimeError",
    "AddTestsDirError",
    "DownloadVerifierDirError",
];

/// What a verifier prints when it could not fetch its own dependencies (RSIHub's
/// `_trial_result`, step 1): the evaluator's infrastructure failed, whatever the agent did.
fn verifier_dependency_failure(stdout: &str) -> Option<&'static str> {
    if stdout.contains("No solution found when resolving tool dependencies:")
        && (stdout.contains("was not found in the cache")
            || stdout.contains("Packages were unavailable because the network was disabled"))
    {
        return Some("the verifier's uv could not resolve its dependencies offline");
    }
    if stdout.contains("error: Failed to download:") && stdout.contains("Caused by: Request failed")
    {
        return Some("the verifier's uv could not download a dependency");
    }
    let curl_5xx = stdout.lines().any(|l| {
        l.find("curl: (")
            .and_then(|i| l.get(i..))
            .is_some_and(|rest| rest.contains("The requested URL returned error: 5"))
    });
    curl_5xx.then_some("the verifier's curl got a server error (5xx) fetching a dependency")
}

/// The code after `EVOLVE_CANDIDATE_INVALID:` in `msg` (a candidate agent's own verdict that
/// it cannot run), when there is one.
fn candidate_invalid_code(msg: &str) -> Option<String> {
    let i = msg.find("EVOLVE_CANDIDATE_INVALID:")?;
    let rest = msg[i + "EVOLVE_CANDIDATE_INVALID:".len()..].trim_start();
    let code: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "_-.".contains(*c))
        .collect();
    Some(if code.is_empty() {
        "unspecified".into()
    } else {
        code
    })
}

/// The number after "exit code" in a NonZeroAgentExitCodeError message, if it says one.
fn exit_code_in(msg: &str) -> Option<i32> {
    let lower = msg.to_ascii_lowercase();
    let i = lower.find("exit code")?;
    let digits: String = lower[i + "exit code".len()..]
        .trim_start_matches(|c: char| !c.is_ascii_digit() && c != '-')
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

fn non_negative(v: &serde_json::Value, ptr: &str) -> Option<u64> {
    v.pointer(ptr).and_then(|x| x.as_u64())
}

/// Map a Harbor TrialResult file onto this project's classification. The result's logs point
/// into Harbor's trial directory; its `trial_dir` is that directory until the job runner
/// sets evolve's own.
pub fn parse_trial_result(path: &Path, task: &str, repetition: u32) -> Result<TrialResult> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("cannot read", path, e))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::infra(format!("harbor result.json is not JSON: {e}")).at_path(path))?;
    let trial_dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut r = TrialResult::failed(
        task,
        repetition,
        "harbor",
        TrialStatus::InfrastructureFailed,
        TrialError::new("engine_error", ""),
    );
    r.error = None;
    let trajectory = trial_dir.join("agent").join("trajectory.json");
    r.logs = TrialLogs {
        agent_dir: trial_dir.join("agent"),
        verifier_dir: trial_dir.join("verifier"),
        trajectory: trajectory.is_file().then_some(trajectory),
        trial_dir,
    };
    r.isolation = Some(Isolation {
        network: "harbor".into(),
        processes: "harbor".into(),
        filesystem: "harbor".into(),
        user: "harbor".into(),
    });
    r.agent_exit_code = match std::fs::read_to_string(r.logs.agent_dir.join("exit-code.txt")) {
        Ok(code) => code.trim().parse().ok(),
        Err(_) => Some(0),
    };
    r.cost_usd = v
        .pointer("/agent_result/cost_usd")
        .and_then(|x| x.as_f64())
        .filter(|c| c.is_finite() && *c >= 0.0);
    let usage = AgentUsage {
        self_reported: true,
        n_input_tokens: non_negative(&v, "/agent_result/n_input_tokens"),
        n_cache_tokens: non_negative(&v, "/agent_result/n_cache_tokens"),
        n_output_tokens: non_negative(&v, "/agent_result/n_output_tokens"),
        cost_usd: r.cost_usd,
    };
    if usage.n_input_tokens.is_some() || usage.n_output_tokens.is_some() || usage.cost_usd.is_some()
    {
        r.agent_usage = Some(usage);
    }
    let exc_type = v
        .pointer("/exception_info/exception_type")
        .and_then(|x| x.as_str())
        .unwrap_or("");
    let full_msg = v
        .pointer("/exception_info/exception_message")
        .and_then(|x| x.as_str())
        .unwrap_or("");
    let exc_msg = full_msg.lines().next().unwrap_or("").to_string();
    let described = format!("{exc_type}: {exc_msg}");

    // The verifier could not fetch its dependencies: no reward it gave can be trusted, and
    // nothing the agent did caused it (unless it scored, which proves the verifier ran).
    let stdout =
        std::fs::read_to_string(r.logs.verifier_dir.join("test-stdout.txt")).unwrap_or_default();
    if let Some(why) = verifier_dependency_failure(&stdout) {
        let scored = v
            .pointer("/verifier_result/rewards/reward")
            .and_then(|x| x.as_f64())
            .is_some_and(|x| x > 0.0);
        if !scored {
            r.error = Some(TrialError::new(
                "verifier_dependency_failed",
                format!(
                    "{why} (see {})",
                    r.logs.verifier_dir.join("test-stdout.txt").display()
                ),
            ));
            return Ok(r);
        }
    }
    // A candidate agent's own verdict that it cannot run outranks what Harbor made of the
    // failure (a timeout stays a timeout: the deadline decided first).
    if !matches!(exc_type, "" | "AgentTimeoutError" | "VerifierTimeoutError")
        && let Some(code) = candidate_invalid_code(full_msg)
    {
        r.status = TrialStatus::CandidateInvalid;
        r.error = Some(TrialError::new(
            "candidate_invalid",
            format!("the candidate agent declared itself invalid ({code}): {described}"),
        ));
        return Ok(r);
    }
    match exc_type {
        // The agent ran out of time: Harbor still runs the verifier, but a reward earned after
        // the deadline is never used (the local and docker engines give none either).
        "AgentTimeoutError" => {
            r.status = TrialStatus::Timeout;
            r.timeout_owner = Some(TimeoutOwner::Agent);
            r.error = Some(TrialError::new("agent_timeout", exc_msg));
        }
        "VerifierTimeoutError" => {
            r.status = TrialStatus::Timeout;
            r.timeout_owner = Some(TimeoutOwner::Verifier);
            r.error = Some(TrialError::new("verifier_timeout", exc_msg));
        }
        // The verifier finished (or the agent merely exited non-zero, which the verifier
        // judges like any other outcome): its reward files decide, read by this project's own
        // parser (the same caps and error kinds as the local and docker engines), not
        // Harbor's parse of them (Harbor reads any size and reports non-finite values as
        // parse errors).
        ""
        | "RewardFileNotFoundError"
        | "RewardFileEmptyError"
        | "VerifierOutputParseError"
        | "NonZeroAgentExitCodeError" => {
            if exc_type == "NonZeroAgentExitCodeError" && r.agent_exit_code == Some(0) {
                r.agent_exit_code = exit_code_in(full_msg).or(Some(1));
            }
            let harbor_rewards = v
                .pointer("/verifier_result/rewards")
                .and_then(|x| x.as_object())
                .is_some_and(|o| !o.is_empty());
            let verifier_dir = r.logs.verifier_dir.clone();
            finish_with_reward(&mut r, &verifier_dir);
            if harbor_rewards
                && let Some(e) = r.error.as_mut().filter(|e| e.kind == "reward_missing")
            {
                e.message = format!(
                    "harbor reported rewards but left no reward.json or reward.txt in {}",
                    verifier_dir.display()
                );
            }
        }
        t if SANDBOX_FAILED.contains(&t) => {
            r.error = Some(TrialError::new(
                "sandbox_failed",
                format!("harbor's environment failed: {described}"),
            ));
        }
        "CancelledError" => {
            r.error = Some(TrialError::new(
                "cancelled",
                format!("harbor cancelled the trial: {described}"),
            ));
        }
        _ => {
            r.error = Some(TrialError::new("engine_error", described));
        }
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_invalid_codes_and_exit_codes_are_read_from_messages() {
        assert_eq!(
            candidate_invalid_code("boom EVOLVE_CANDIDATE_INVALID: missing_dep (uv)").as_deref(),
            Some("missing_dep")
        );
        assert_eq!(
            candidate_invalid_code("EVOLVE_CANDIDATE_INVALID:").as_deref(),
            Some("unspecified")
        );
        assert_eq!(candidate_invalid_code("ordinary failure"), None);
        assert_eq!(
            exit_code_in("Agent command failed with exit code 3"),
            Some(3)
        );
        assert_eq!(exit_code_in("failed (exit code: 127)"), Some(127));
        assert_eq!(exit_code_in("no code here"), None);
    }

    #[test]
    fn verifier_dependency_failures_are_recognised() {
        assert!(
            verifier_dependency_failure(
                "x\nNo solution found when resolving tool dependencies:\n pytest was not found in the cache\n"
            )
            .is_some()
        );
        assert!(
            verifier_dependency_failure("curl: (22) The requested URL returned error: 503\n")
                .is_some()
        );
        assert!(
            verifier_dependency_failure("curl: (22) The requested URL returned error: 404\n")
                .is_none()
        );
        assert!(verifier_dependency_failure("all tests passed").is_none());
    }
}
