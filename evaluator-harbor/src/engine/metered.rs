//! The engines' common handling of the model gateway around a trial's agent phase: opening
//! it on the listener the engine made (see [`super::reach`]), always closing it, and
//! recording what it metered: `usage` and `cost_usd` in the result, every exchange in
//! `<trial_dir>/gateway.jsonl`, the trajectory, and the `budget_exhausted` classification.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::error::Error;
use crate::gateway::{ModelGateway, TrialAccess, TrialModelLog};
use crate::result::{BUDGET_EXHAUSTED, TrialError, TrialResult, TrialStatus};

/// Each exchange the gateway logged for a trial, one JSON object a line.
pub const GATEWAY_LOG_FILE: &str = "gateway.jsonl";

/// A trial's open gateway. Closed by [`close`](Self::close) on every path the engine
/// takes; if the trial's future is dropped first (Ctrl-C, a caller's deadline), `Drop`
/// closes it on the runtime, so its server never outlives the trial.
pub struct GatewaySession {
    gateway: Arc<dyn ModelGateway>,
    access: Option<TrialAccess>,
}

impl GatewaySession {
    /// Serve `listener` for trial `name`.
    pub fn open(
        gateway: &Arc<dyn ModelGateway>,
        name: &str,
        listener: std::net::TcpListener,
    ) -> Result<GatewaySession, Error> {
        let access = gateway.open(name, listener).map_err(|e| {
            Error::infra(format!(
                "the model gateway cannot serve trial {name:?}: {e}"
            ))
        })?;
        Ok(GatewaySession {
            gateway: gateway.clone(),
            access: Some(access),
        })
    }

    /// `OPENAI_BASE_URL`, `OPENAI_API_BASE` and `OPENAI_API_KEY` for the agent.
    pub fn env(&self) -> Vec<(String, String)> {
        self.access
            .as_ref()
            .map(TrialAccess::env)
            .unwrap_or_default()
    }

    /// Stop serving and return what the gateway saw.
    pub async fn close(mut self) -> TrialModelLog {
        match self.access.take() {
            Some(a) => self.gateway.close(&a).await,
            None => TrialModelLog::default(),
        }
    }
}

impl Drop for GatewaySession {
    fn drop(&mut self) {
        let Some(access) = self.access.take() else {
            return;
        };
        let gateway = self.gateway.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = gateway.close(&access).await;
            });
        }
    }
}

/// Where a trial's host-side records go, and what names it.
#[derive(Debug, Clone, Copy)]
pub struct Records<'a> {
    /// The trial's own directory (never writable by the agent).
    pub trial_dir: &'a Path,
    /// The host folder of the agent's `/logs/agent`.
    pub agent_logs: &'a Path,
    /// The attempt's name (its directory's name): the trajectory's session id.
    pub session: &'a str,
    /// The agent under test: names the trajectory when the agent's own file does not.
    pub agent: &'a crate::agent::AgentSpec,
    pub instruction: &'a str,
}

/// The name a trial attempt is known by to the gateway and in its trajectory.
pub fn attempt_name(trial_dir: &Path, fallback: &str) -> String {
    trial_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| fallback.to_string())
}

/// The agent's name in a trajectory its own file does not name.
fn agent_name(agent: &crate::agent::AgentSpec) -> String {
    use crate::agent::{AgentEntry, AgentSpec};
    match agent {
        AgentSpec::Oracle => "oracle".into(),
        AgentSpec::Target(m) => match &m.entry {
            AgentEntry::Command(argv) => argv
                .first()
                .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                .unwrap_or_else(|| "agent".into()),
            AgentEntry::Component { path, .. } => path.clone(),
            AgentEntry::Harbor { agent, .. } => agent.flag_value(),
        },
    }
}

/// End a trial whose phases are over, the same way on every engine: an error from the phases
/// (`phases`) becomes the trial's status and error (see [`super::classify_error`]), the wall
/// time is measured from `started`, and then [`conclude`] records what the agent spent and
/// did, so budget exhaustion overrides whatever the phases decided.
pub fn finish(
    mut result: TrialResult,
    phases: Result<(), Error>,
    started: Instant,
    rec: Records<'_>,
    metered: Option<&TrialModelLog>,
) -> TrialResult {
    if let Err(e) = phases {
        let (status, err) = super::classify_error(&e);
        result.status = status;
        result.error = Some(err);
    }
    result.wall_time_sec = started.elapsed().as_secs_f64();
    conclude(&mut result, rec, metered);
    result
}

/// Record what the agent spent and did, once its phases are over: `cost_usd` (metered, else
/// the agent's `cost.json`), `usage`, `gateway.jsonl`, the trajectory, and, when the budget
/// ran out, the trial's classification as `budget_exhausted`, whatever its reward.
fn conclude(result: &mut TrialResult, rec: Records<'_>, metered: Option<&TrialModelLog>) {
    match metered {
        Some(log) => {
            result.cost_usd = Some(log.usage.usd).filter(|c| c.is_finite() && *c >= 0.0);
            result.usage = Some(log.usage.clone());
            write_exchanges(rec.trial_dir, log);
        }
        None => result.cost_usd = crate::result::read_agent_cost(rec.agent_logs),
    }
    let built = crate::trajectory::build::build(crate::trajectory::build::Sources {
        session_id: rec.session,
        agent_name: &agent_name(rec.agent),
        log: metered,
        agent_logs: rec.agent_logs,
        instruction: rec.instruction,
    });
    if let Some(t) = built {
        result.logs.trajectory = crate::trajectory::build::write(rec.trial_dir, &t).ok();
    }
    if let Some(log) = metered.filter(|l| l.budget_exhausted) {
        result.status = TrialStatus::InfrastructureFailed;
        result.timeout_owner = None;
        result.error = Some(TrialError::new(
            BUDGET_EXHAUSTED,
            format!(
                "the experiment's budget ran out while the agent was working: the model gateway refused {} of its {} model call(s) with 429; this is not a failure of the candidate, and the trial is not scored",
                log.usage.refused_by_budget, log.usage.calls
            ),
        ));
    }
}

/// `log`'s exchanges as `dir/gateway.jsonl`, one JSON line each.
pub(crate) fn write_exchanges(dir: &Path, log: &TrialModelLog) {
    let mut out = Vec::new();
    for ex in &log.exchanges {
        if let Ok(line) = serde_json::to_vec(ex) {
            out.extend(line);
            out.push(b'\n');
        }
    }
    let _ = std::fs::write(dir.join(GATEWAY_LOG_FILE), out);
}

/// A trial's phase timeouts: the task's, times the evaluation's multipliers (which also
/// scale the CPU-time backstop, derived from these).
#[derive(Debug, Clone)]
pub struct Timeouts {
    pub agent: Option<std::time::Duration>,
    pub verifier: Option<std::time::Duration>,
    agent_multiplier: f64,
    verifier_multiplier: f64,
}

impl Timeouts {
    pub fn of(
        task: &crate::task::Task,
        s: &crate::gateway::TrialSettings,
    ) -> Result<Timeouts, Error> {
        let c = &task.config;
        Ok(Timeouts {
            agent: scaled(
                c.agent_timeout(),
                s.agent_timeout_multiplier,
                "agent_timeout_multiplier",
            )?,
            verifier: scaled(
                Some(c.verifier_timeout()),
                s.verifier_timeout_multiplier,
                "verifier_timeout_multiplier",
            )?,
            agent_multiplier: s.agent_timeout_multiplier,
            verifier_multiplier: s.verifier_timeout_multiplier,
        })
    }

    /// The agent's limit, for messages: `[agent].timeout_sec = 5 s` or, scaled, `[agent].timeout_sec
    /// = 5 s × agent_timeout_multiplier 2 = 10 s`.
    pub fn agent_text(&self, task: &crate::task::Task) -> String {
        let base = task.config.agent.timeout_sec.unwrap_or(0.0);
        describe(
            "[agent].timeout_sec",
            base,
            "agent_timeout_multiplier",
            self.agent_multiplier,
        )
    }

    pub fn verifier_text(&self, task: &crate::task::Task) -> String {
        let base = task.config.verifier.timeout_sec;
        describe(
            "[verifier].timeout_sec",
            base,
            "verifier_timeout_multiplier",
            self.verifier_multiplier,
        )
    }
}

fn describe(field: &str, base: f64, knob: &str, multiplier: f64) -> String {
    if multiplier == 1.0 {
        format!("{field} = {base} s")
    } else {
        format!(
            "{field} = {base} s × {knob} {multiplier} = {} s",
            base * multiplier
        )
    }
}

/// A phase's timeout: the task's, times the evaluation's multiplier.
fn scaled(
    base: Option<std::time::Duration>,
    multiplier: f64,
    what: &str,
) -> Result<Option<std::time::Duration>, Error> {
    if !(multiplier.is_finite() && multiplier > 0.0) {
        return Err(Error::new(
            crate::error::ErrorKind::Usage,
            format!("{what} must be a finite number > 0, got {multiplier}"),
        ));
    }
    base.map(|d| {
        std::time::Duration::try_from_secs_f64(d.as_secs_f64() * multiplier).map_err(|_| {
            Error::new(
                crate::error::ErrorKind::Usage,
                format!(
                    "{what} = {multiplier} makes a timeout of {} s, too long to represent",
                    d.as_secs_f64() * multiplier
                ),
            )
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentSpec;
    use crate::gateway::TrialUsage;
    use crate::result::TimeoutOwner;

    /// A trial whose verifier passed, as an engine holds it before [`finish`].
    fn passed() -> TrialResult {
        let mut r = TrialResult::failed(
            "t",
            0,
            "local",
            TrialStatus::BenchmarkComplete,
            TrialError::new("unused", ""),
        );
        r.error = None;
        r.reward = Some(1.0);
        r
    }

    fn records<'a>(dir: &'a Path, agent: &'a AgentSpec) -> Records<'a> {
        Records {
            trial_dir: dir,
            agent_logs: dir,
            session: "t__r0",
            agent,
            instruction: "do it",
        }
    }

    fn a_while_ago() -> Instant {
        Instant::now() - std::time::Duration::from_millis(50)
    }

    #[test]
    fn a_phase_error_becomes_the_trials_class_and_the_wall_time_is_measured() {
        let d = tempfile::tempdir().unwrap();
        let agent = AgentSpec::Oracle;
        let bad = Error::new(crate::error::ErrorKind::InvalidAgent, "no such command");
        let r = finish(
            passed(),
            Err(bad),
            a_while_ago(),
            records(d.path(), &agent),
            None,
        );
        assert_eq!(r.status, TrialStatus::CandidateInvalid);
        let err = r.error.expect("the phase's error is kept");
        assert_eq!(err.kind, "invalid_agent");
        assert!(err.message.contains("no such command"), "{}", err.message);
        assert!(r.wall_time_sec >= 0.05, "wall time {}", r.wall_time_sec);
        assert!(
            !d.path().join(GATEWAY_LOG_FILE).exists(),
            "nothing was metered"
        );
    }

    #[test]
    fn phases_that_succeed_leave_the_verdict_alone() {
        let d = tempfile::tempdir().unwrap();
        let agent = AgentSpec::Oracle;
        let r = finish(
            passed(),
            Ok(()),
            a_while_ago(),
            records(d.path(), &agent),
            None,
        );
        assert_eq!(r.status, TrialStatus::BenchmarkComplete);
        assert_eq!(r.error, None);
        assert_eq!(r.reward, Some(1.0));
    }

    /// Budget exhaustion is decided after the phases' error, so it wins over it.
    #[test]
    fn an_exhausted_budget_overrides_the_phases_verdict() {
        let d = tempfile::tempdir().unwrap();
        let agent = AgentSpec::Oracle;
        let mut timed_out = passed();
        timed_out.status = TrialStatus::Timeout;
        timed_out.timeout_owner = Some(TimeoutOwner::Agent);
        let log = TrialModelLog {
            usage: TrialUsage {
                calls: 3,
                refused_by_budget: 1,
                usd: 0.25,
                ..TrialUsage::default()
            },
            exchanges: Vec::new(),
            budget_exhausted: true,
        };
        let r = finish(
            timed_out,
            Err(Error::infra("the verifier could not start")),
            a_while_ago(),
            records(d.path(), &agent),
            Some(&log),
        );
        assert_eq!(r.status, TrialStatus::InfrastructureFailed);
        assert_eq!(r.timeout_owner, None);
        assert_eq!(
            r.error.as_ref().map(|e| e.kind.as_str()),
            Some(BUDGET_EXHAUSTED)
        );
        assert_eq!(r.cost_usd, Some(0.25));
        assert_eq!(r.usage.map(|u| u.calls), Some(3));
        assert!(d.path().join(GATEWAY_LOG_FILE).exists());
    }
}
