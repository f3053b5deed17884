//! Trial and evaluation results, reward parsing and scoring.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Status of one trial, and the outcome of a whole evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialStatus {
    /// The verifier produced a valid reward.
    BenchmarkComplete,
    /// The candidate's declared agent is unusable (bad manifest, component does not load).
    CandidateInvalid,
    /// The task, the verifier output, the engine or the host failed; not the candidate's fault.
    InfrastructureFailed,
    /// A phase ran past its task.toml limit; see [`TimeoutOwner`].
    Timeout,
}

impl TrialStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TrialStatus::BenchmarkComplete => "benchmark_complete",
            TrialStatus::CandidateInvalid => "candidate_invalid",
            TrialStatus::InfrastructureFailed => "infrastructure_failed",
            TrialStatus::Timeout => "timeout",
        }
    }
}

/// Which phase ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutOwner {
    Agent,
    Verifier,
}

/// A classified reason for a non-complete trial.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialError {
    /// Snake-case class: `reward_missing`, `reward_empty`, `reward_invalid`, `reward_non_finite`,
    /// `agent_timeout`, `verifier_timeout`, `invalid_task`, `digest_mismatch`, `unsupported_task`,
    /// `invalid_agent`, `engine_error`, `cancelled`, `quota_exceeded`, `budget_exhausted` (the
    /// experiment's budget ran out while the agent called its model: not the candidate's
    /// fault, never retried, and the lifecycle stops the run).
    pub kind: String,
    pub message: String,
}

impl TrialError {
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        TrialError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// Which isolation was in force for a trial (reported, never assumed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolation {
    /// `namespace` (own network namespace, no interfaces but lo), `container_none` (Docker
    /// `NetworkMode=none`), `host` (network allowed by the task), `none` (wanted but unavailable).
    pub network: String,
    /// How stray processes are contained: `pid_namespace`, `process_group+proc_scan`, `container`.
    pub processes: String,
    /// What the agent's file system is: `bubblewrap` (a fresh root of read-only system
    /// directories and the trial's own), `wasi_preopens`, `container`, or `unconfined` (the
    /// host's, on the user's explicit opt-in).
    pub filesystem: String,
    /// Who the agent runs as: `dedicated_uid:<n>` (evolve runs as root; a uid of the trial's
    /// own), `user_namespace` (the invoking user, in a user namespace), `container`, or
    /// `host` (unconfined).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user: String,
}

/// Paths of a trial's logs and outputs on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialLogs {
    pub trial_dir: PathBuf,
    /// Copy of `/logs/agent` (oracle.txt / agent.txt, exit-code.txt).
    pub agent_dir: PathBuf,
    /// Copy of `/logs/verifier` (reward.*, test-stdout.txt).
    pub verifier_dir: PathBuf,
    /// The trial's ATIF trajectory (`<trial_dir>/trajectory.json`), when the agent ran under
    /// the model gateway or wrote its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<PathBuf>,
}

/// An earlier attempt of a trial that failed for a reason outside the candidate and was run
/// again (`EvaluationPlan::max_retries`); its directory is kept as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub trial_dir: PathBuf,
    pub status: TrialStatus,
    pub error: Option<TrialError>,
    pub wall_time_sec: f64,
    /// What the attempt spent (it counts toward the evaluation's cost).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::TrialUsage>,
}

impl Attempt {
    pub fn of(t: &TrialResult) -> Attempt {
        Attempt {
            trial_dir: t.logs.trial_dir.clone(),
            status: t.status,
            error: t.error.clone(),
            wall_time_sec: t.wall_time_sec,
            cost_usd: t.cost_usd,
            usage: t.usage.clone(),
        }
    }
}

/// Wall time of a trial's phases, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub agent_sec: f64,
    /// `None` when the verifier did not run (an agent timeout, an exhausted budget).
    pub verifier_sec: Option<f64>,
}

/// The result of one trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialResult {
    pub task: String,
    /// 0-based repetition index.
    pub repetition: u32,
    pub trial_name: String,
    pub engine: String,
    pub status: TrialStatus,
    pub timeout_owner: Option<TimeoutOwner>,
    /// The scalar reward (see [`reward_from_map`]); `None` unless the verifier produced one.
    pub reward: Option<f64>,
    /// Every reward key the verifier wrote (`{"reward": x}` for reward.txt).
    pub rewards: BTreeMap<String, f64>,
    /// What the agent spent on model calls, in USD: what the model gateway metered when the
    /// agent ran under one (`usage.usd`); otherwise what the agent reported, Harbor's
    /// `agent_result.cost_usd` or `$EVOLVE_AGENT_LOGS_DIR/cost.json` (`{"cost_usd": x}`) on
    /// the local and docker engines. Finite, ≥ 0.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    pub error: Option<TrialError>,
    pub agent_exit_code: Option<i32>,
    pub wall_time_sec: f64,
    pub logs: TrialLogs,
    pub isolation: Option<Isolation>,
    /// What the agent spent through the model gateway, metered by the host (absent when
    /// the evaluation had no gateway). When present, `cost_usd` is its `usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::TrialUsage>,
    /// What the agent said it spent, when no gateway metered the trial: Harbor's
    /// `agent_result` on the harbor engine. Self-reported, so never a meter reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_usage: Option<AgentUsage>,
    /// How long the agent and verifier phases took, where the engine times them (local):
    /// the rest of `wall_time_sec` is the engine's own work (staging, the sandbox, copies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<PhaseTimes>,
    /// The earlier attempts of this trial, oldest first, when infrastructure failures made
    /// the engine run it again; this result is the last attempt's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
}

impl TrialResult {
    /// What this trial cost, its earlier attempts included.
    pub fn total_cost_usd(&self) -> f64 {
        let ok = |c: &Option<f64>| c.filter(|c| c.is_finite() && *c >= 0.0).unwrap_or(0.0);
        ok(&self.cost_usd) + self.attempts.iter().map(|a| ok(&a.cost_usd)).sum::<f64>()
    }

    /// Whether the experiment's budget ran out during this trial (or an earlier attempt).
    pub fn budget_exhausted(&self) -> bool {
        let hit = |e: &Option<TrialError>| e.as_ref().is_some_and(|e| e.kind == BUDGET_EXHAUSTED);
        hit(&self.error) || self.attempts.iter().any(|a| hit(&a.error))
    }

    /// A trial that never ran (or failed before a reward) with the given class.
    pub fn failed(
        task: &str,
        repetition: u32,
        engine: &str,
        status: TrialStatus,
        error: TrialError,
    ) -> Self {
        TrialResult {
            task: task.into(),
            repetition,
            trial_name: trial_name(task, repetition),
            engine: engine.into(),
            status,
            timeout_owner: None,
            reward: None,
            rewards: BTreeMap::new(),
            cost_usd: None,
            error: Some(error),
            agent_exit_code: None,
            wall_time_sec: 0.0,
            logs: TrialLogs::default(),
            isolation: None,
            usage: None,
            agent_usage: None,
            phases: None,
            attempts: Vec::new(),
        }
    }
}

/// Token counts and spend an agent reported about itself (Harbor's `agent_result`); every
/// field is what the agent claims, unchecked by any meter.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentUsage {
    /// Always `true`: the figures come from the agent, not from the model gateway.
    pub self_reported: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_cache_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The error kind of a trial during which the experiment's budget ran out.
pub const BUDGET_EXHAUSTED: &str = "budget_exhausted";

/// The cost an agent reported in `<agent logs>/cost.json` (`{"cost_usd": x}`), if it wrote
/// a finite, non-negative one.
pub fn read_agent_cost(agent_logs: &Path) -> Option<f64> {
    // The agent wrote this directory: never follow a link it planted.
    let bytes = crate::beneath::read_regular(agent_logs, "cost.json", 1 << 20)?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("cost_usd")?
        .as_f64()
        .filter(|c| c.is_finite() && *c >= 0.0)
}

/// Deterministic trial name: `<task>__r<repetition>`.
pub fn trial_name(task: &str, repetition: u32) -> String {
    format!("{task}__r{repetition}")
}

const REWARD_FILE_CAP: u64 = 1 << 20;

fn read_capped(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p)?;
    let mut buf = Vec::new();
    f.take(REWARD_FILE_CAP + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > REWARD_FILE_CAP {
        return Err(std::io::Error::other("file larger than 1 MiB"));
    }
    Ok(buf)
}

/// The scalar reward of a reward map: the `reward` key if present; else the only key's value;
/// else the mean of all values (Harbor's default Mean metric over the keys).
pub fn reward_from_map(m: &BTreeMap<String, f64>) -> Option<f64> {
    if let Some(r) = m.get("reward") {
        return Some(*r);
    }
    if m.is_empty() {
        return None;
    }
    Some(m.values().sum::<f64>() / m.len() as f64)
}

/// Parse a verifier's output directory: `reward.json` first (a flat object of finite
/// numbers), else `reward.txt` (one finite float). Returns the reward map.
pub fn parse_reward_dir(dir: &Path) -> Result<BTreeMap<String, f64>, TrialError> {
    let json = dir.join("reward.json");
    let txt = dir.join("reward.txt");
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if is_file(&json) {
        let bytes = read_capped(&json).map_err(|e| {
            TrialError::new("reward_invalid", format!("cannot read reward.json: {e}"))
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(TrialError::new("reward_empty", "reward.json is empty"));
        }
        let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            TrialError::new(
                "reward_invalid",
                format!(
                    "reward.json is not valid JSON ({e}); expected a flat object of finite numbers"
                ),
            )
        })?;
        let obj = v.as_object().ok_or_else(|| {
            TrialError::new(
                "reward_invalid",
                "reward.json must be a JSON object of finite numbers, e.g. {\"reward\": 1.0}",
            )
        })?;
        if obj.is_empty() {
            return Err(TrialError::new(
                "reward_invalid",
                "reward.json is an empty object; expected at least one number",
            ));
        }
        let mut m = BTreeMap::new();
        for (k, val) in obj {
            let n = val.as_f64().filter(|_| val.is_number()).ok_or_else(|| {
                TrialError::new(
                    "reward_invalid",
                    format!("reward.json key {k:?} is {val}, expected a finite number"),
                )
            })?;
            if !n.is_finite() {
                return Err(TrialError::new(
                    "reward_non_finite",
                    format!("reward.json key {k:?} is not finite"),
                ));
            }
            m.insert(k.clone(), n);
        }
        return Ok(m);
    }
    if is_file(&txt) {
        let bytes = read_capped(&txt).map_err(|e| {
            TrialError::new("reward_invalid", format!("cannot read reward.txt: {e}"))
        })?;
        let s = String::from_utf8_lossy(&bytes);
        let t = s.trim();
        if t.is_empty() {
            return Err(TrialError::new(
                "reward_empty",
                "reward.txt is empty; expected one float",
            ));
        }
        let shown: String = t.chars().take(40).collect();
        let r: f64 = t.parse().map_err(|_| {
            TrialError::new(
                "reward_invalid",
                format!("reward.txt holds {shown:?}, expected one float"),
            )
        })?;
        if !r.is_finite() {
            return Err(TrialError::new(
                "reward_non_finite",
                format!("reward.txt holds {shown:?}, a non-finite number"),
            ));
        }
        return Ok(BTreeMap::from([("reward".to_string(), r)]));
    }
    Err(TrialError::new(
        "reward_missing",
        "the verifier wrote neither /logs/verifier/reward.json nor /logs/verifier/reward.txt",
    ))
}

/// Scoring policy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoringPolicy {
    /// The evaluation is `benchmark_complete` iff scoreable/expected ≥ this (in (0, 1]).
    pub coverage_floor: f64,
    /// An agent timeout is a scoreable 0 (the candidate ran out of its budget). Verifier
    /// timeouts are never scoreable.
    pub agent_timeout_is_zero: bool,
}

impl Default for ScoringPolicy {
    fn default() -> Self {
        ScoringPolicy {
            coverage_floor: 1.0,
            agent_timeout_is_zero: true,
        }
    }
}

/// One trial's line in the task vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorTrial {
    pub trial: u32,
    pub status: TrialStatus,
    pub reward: Option<f64>,
    pub timeout_owner: Option<TimeoutOwner>,
    pub error_kind: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VectorTask {
    pub trials: Vec<VectorTrial>,
}

/// Every trial of an evaluation, by task name (sorted) then repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskVector {
    pub schema_version: u32,
    pub tasks: BTreeMap<String, VectorTask>,
}

/// The result of one evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationResult {
    pub engine: String,
    pub agent: String,
    pub tasks: Vec<String>,
    pub repetitions: u32,
    pub expected_trials: u32,
    pub scoreable_trials: u32,
    pub coverage: f64,
    pub policy: ScoringPolicy,
    pub outcome: TrialStatus,
    pub reason: String,
    /// Σ scoreable rewards / expected_trials; `None` unless the outcome is benchmark_complete.
    pub score: Option<f64>,
    pub task_vector: TaskVector,
    pub trials: Vec<TrialResult>,
    pub wall_time_sec: f64,
    /// Σ of the trials' costs (metered by the gateway, else reported), earlier attempts
    /// included.
    #[serde(default)]
    pub cost_usd: f64,
    /// The experiment's budget ran out during at least one trial: the lifecycle stops the
    /// run rather than judge a candidate on trials it could not pay for.
    #[serde(default)]
    pub budget_exhausted: bool,
    /// Model calls metered for the evaluation as a whole rather than for one trial: the
    /// harbor engine serves a job's trials through one gateway listener, so their calls
    /// cannot be told apart. Included in `cost_usd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_usage: Option<crate::gateway::TrialUsage>,
}

impl EvaluationResult {
    /// Add the calls metered for the evaluation as a whole (see [`Self::shared_usage`]).
    pub fn charge_shared(&mut self, usage: Option<crate::gateway::TrialUsage>) {
        if let Some(u) = usage {
            self.cost_usd += u.usd;
            self.shared_usage = Some(u);
        }
    }
}

/// The reward a trial contributes, if it is scoreable under `policy`.
pub fn scoreable_reward(t: &TrialResult, policy: &ScoringPolicy) -> Option<f64> {
    match t.status {
        TrialStatus::BenchmarkComplete => t.reward.filter(|r| r.is_finite()),
        TrialStatus::Timeout
            if t.timeout_owner == Some(TimeoutOwner::Agent) && policy.agent_timeout_is_zero =>
        {
            Some(0.0)
        }
        _ => None,
    }
}

/// Build the task vector of `trials`.
pub fn task_vector(trials: &[TrialResult]) -> TaskVector {
    let mut tasks: BTreeMap<String, VectorTask> = BTreeMap::new();
    let mut sorted: Vec<&TrialResult> = trials.iter().collect();
    sorted.sort_by(|a, b| a.task.cmp(&b.task).then(a.repetition.cmp(&b.repetition)));
    for t in sorted {
        tasks
            .entry(t.task.clone())
            .or_default()
            .trials
            .push(VectorTrial {
                trial: t.repetition,
                status: t.status,
                reward: t.reward,
                timeout_owner: t.timeout_owner,
                error_kind: t.error.as_ref().map(|e| e.kind.clone()),
            });
    }
    TaskVector {
        schema_version: 1,
        tasks,
    }
}

/// What the failed trials said, for an evaluation that has too few scoreable ones: the
/// most common class of error (a full disk, a dead daemon) is the likeliest reason, so it
/// is named with how many trials reported it and the first such trial's message.
fn failure_cause(trials: &[TrialResult]) -> String {
    let errors: Vec<&TrialError> = trials.iter().filter_map(|t| t.error.as_ref()).collect();
    let count = |kind: &str| errors.iter().filter(|e| e.kind == kind).count();
    // The most common class; among equals, the first seen.
    let Some(first) = errors
        .iter()
        .rev()
        .max_by_key(|e| count(&e.kind))
        .and_then(|top| errors.iter().find(|e| e.kind == top.kind))
    else {
        return String::new();
    };
    format!(
        "; {} of {} trial(s) failed with {}, the first: {}",
        count(&first.kind),
        trials.len(),
        first.kind,
        first.message
    )
}

/// Classify an evaluation (RSIHub's rule): candidate_invalid if any trial is; else
/// benchmark_complete if at least one trial is scoreable and coverage ≥ floor; else
/// infrastructure_failed if any trial is, or trials are missing; else timeout.
pub fn summarize(
    engine: &str,
    agent: &str,
    tasks: Vec<String>,
    repetitions: u32,
    trials: Vec<TrialResult>,
    policy: ScoringPolicy,
    wall_time_sec: f64,
) -> EvaluationResult {
    let expected = (tasks.len() as u32).saturating_mul(repetitions);
    let scoreable: Vec<f64> = trials
        .iter()
        .filter_map(|t| scoreable_reward(t, &policy))
        .collect();
    let n = scoreable.len() as u32;
    let coverage = if expected == 0 {
        0.0
    } else {
        n as f64 / expected as f64
    };
    let any = |s: TrialStatus| trials.iter().any(|t| t.status == s);
    let (outcome, reason) = if expected == 0 {
        (
            TrialStatus::InfrastructureFailed,
            "no tasks selected".to_string(),
        )
    } else if any(TrialStatus::CandidateInvalid) {
        (
            TrialStatus::CandidateInvalid,
            "candidate-owned trial failure".to_string(),
        )
    } else if trials.len() as u32 > expected {
        (
            TrialStatus::InfrastructureFailed,
            "unexpected extra trials".to_string(),
        )
    } else if n > 0 && coverage + 1e-12 >= policy.coverage_floor {
        if n == expected {
            (
                TrialStatus::BenchmarkComplete,
                "all expected trials are scoreable".to_string(),
            )
        } else {
            (
                TrialStatus::BenchmarkComplete,
                format!("partial evidence accepted: {n}/{expected} scoreable trials"),
            )
        }
    } else if any(TrialStatus::InfrastructureFailed)
        || (trials.len() as u32) < expected
        || n == 0 && !any(TrialStatus::Timeout)
    {
        (
            TrialStatus::InfrastructureFailed,
            format!(
                "insufficient scoreable trials: {n}/{expected} (floor {}){}",
                policy.coverage_floor,
                failure_cause(&trials)
            ),
        )
    } else {
        (
            TrialStatus::Timeout,
            format!("non-scoreable timeouts: {n}/{expected} scoreable"),
        )
    };
    let score = (outcome == TrialStatus::BenchmarkComplete)
        .then(|| scoreable.iter().sum::<f64>() / expected as f64);
    let cost_usd = trials.iter().map(TrialResult::total_cost_usd).sum();
    let budget_exhausted = trials.iter().any(TrialResult::budget_exhausted);
    EvaluationResult {
        cost_usd,
        budget_exhausted,
        engine: engine.into(),
        agent: agent.into(),
        tasks,
        repetitions,
        expected_trials: expected,
        scoreable_trials: n,
        coverage,
        policy,
        outcome,
        reason,
        score,
        task_vector: task_vector(&trials),
        trials,
        wall_time_sec,
        shared_usage: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, body: &str) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    #[test]
    fn reward_files_are_classified() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        assert_eq!(parse_reward_dir(p).unwrap_err().kind, "reward_missing");
        write(p, "reward.txt", " 0.5\n");
        assert_eq!(parse_reward_dir(p).unwrap()["reward"], 0.5);
        for (body, kind) in [
            ("NaN", "reward_non_finite"),
            ("inf", "reward_non_finite"),
            ("", "reward_empty"),
            ("yes", "reward_invalid"),
        ] {
            write(p, "reward.txt", body);
            assert_eq!(parse_reward_dir(p).unwrap_err().kind, kind, "{body}");
        }
        // reward.json is read first.
        write(p, "reward.json", r#"{"correctness": 1, "style": 0.5}"#);
        let m = parse_reward_dir(p).unwrap();
        assert_eq!(reward_from_map(&m), Some(0.75));
        for (body, kind) in [
            ("{\"reward\": NaN}", "reward_invalid"),
            ("{\"reward\": 1e309}", "reward_invalid"),
            ("{\"reward\": \"1\"}", "reward_invalid"),
            ("{\"reward\": true}", "reward_invalid"),
            ("[1]", "reward_invalid"),
            ("{}", "reward_invalid"),
            ("  ", "reward_empty"),
        ] {
            write(p, "reward.json", body);
            assert_eq!(parse_reward_dir(p).unwrap_err().kind, kind, "{body}");
        }
    }

    fn trial(task: &str, rep: u32, status: TrialStatus, reward: Option<f64>) -> TrialResult {
        let mut t = TrialResult::failed(task, rep, "local", status, TrialError::new("x", "y"));
        t.reward = reward;
        t
    }

    #[test]
    fn score_divides_by_expected_trials() {
        let trials = vec![
            trial("a", 0, TrialStatus::BenchmarkComplete, Some(1.0)),
            trial("a", 1, TrialStatus::BenchmarkComplete, Some(0.0)),
            trial("b", 0, TrialStatus::BenchmarkComplete, Some(1.0)),
            trial("b", 1, TrialStatus::InfrastructureFailed, None),
        ];
        let p = ScoringPolicy {
            coverage_floor: 0.75,
            agent_timeout_is_zero: true,
        };
        let r = summarize(
            "local",
            "oracle",
            vec!["a".into(), "b".into()],
            2,
            trials.clone(),
            p,
            0.0,
        );
        assert_eq!(r.expected_trials, 4);
        assert_eq!(r.scoreable_trials, 3);
        assert_eq!(r.outcome, TrialStatus::BenchmarkComplete);
        assert_eq!(r.score, Some(0.5));
        let r = summarize(
            "local",
            "oracle",
            vec!["a".into(), "b".into()],
            2,
            trials,
            ScoringPolicy::default(),
            0.0,
        );
        assert_eq!(r.outcome, TrialStatus::InfrastructureFailed);
        assert_eq!(r.score, None);
        assert_eq!(
            r.task_vector.tasks["b"].trials[1].status,
            TrialStatus::InfrastructureFailed
        );
    }
}
