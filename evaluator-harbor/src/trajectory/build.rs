//! Building a trial's trajectory from the gateway's log, merged with the agent's own.
//!
//! The gateway saw every request and answer, so its account of the model calls (messages,
//! tool calls, tokens, cost) is complete and metered; an agent's own ATIF file can add what
//! only the agent knows (the commands it ran and what they printed). [`build`] combines them:
//!
//! - **From the gateway** ([`from_exchanges`]): the first request's messages become system
//!   and user steps; each answered exchange becomes one agent step (its message, reasoning,
//!   tool calls, and metrics `{prompt_tokens, completion_tokens, cost_usd}`); what a later
//!   request adds after its last assistant message (tool results, new user messages) becomes
//!   the previous agent step's observation, or user steps. A refused or failed request is
//!   listed under `extra.unanswered_requests`; its messages are skipped when a later request
//!   (its retry) carries them.
//! - **Merged with the agent's file** ([`merge`]): the agent's steps are the timeline; each of
//!   its agent steps that matches a metered call (a shared tool-call id, the same message, or
//!   else position, when the counts agree) takes the gateway's metrics, with the agent's own
//!   claim kept under `extra.agent_reported_metrics`. Metered calls the agent's file does not
//!   show are appended, marked `extra.from_gateway_log`. `final_metrics` are the host's; the
//!   agent's claimed totals stay under `extra.agent_reported_final_metrics`.
//!
//! The agent's file is evolved code's output: it is read without following a link and capped
//! in size, and a malformed one is named in `notes`, never fatal.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::{
    AGENT_TRAJECTORY_FILE, AgentInfo, FinalMetrics, Metrics, Observation, ObservationResult,
    SCHEMA_VERSION, Source, Step, ToolCall, Trajectory,
};
use crate::beneath::{Beneath, NotRegular};
use crate::gateway::{Exchange, TrialModelLog};

/// Largest agent-written trajectory read.
pub const AGENT_TRAJECTORY_CAP: u64 = 16 << 20;

/// What a trajectory is built from.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The trial (attempt) the trajectory is of.
    pub session_id: &'a str,
    /// Names the agent when its own file does not.
    pub agent_name: &'a str,
    /// The gateway's log, when the agent ran under one.
    pub log: Option<&'a TrialModelLog>,
    /// The host folder of the agent's `/logs/agent`.
    pub agent_logs: &'a Path,
    /// The task's instruction: the one user message every agent got, shown when nothing
    /// else is (an agent that never called its model).
    pub instruction: &'a str,
}

/// What the agent left at `/logs/agent/trajectory.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentFile {
    Absent,
    Valid(Box<Trajectory>),
    /// Why it cannot be used.
    Invalid(String),
}

/// The trajectory of a trial, or `None` when there is nothing to show (no gateway and no
/// agent-written file).
pub fn build(src: Sources<'_>) -> Option<Trajectory> {
    let own = read_agent(src.agent_logs);
    if src.log.is_none() && own == AgentFile::Absent {
        return None;
    }
    let metered = src
        .log
        .map(|log| from_exchanges(src.session_id, src.agent_name, log));
    let mut t = match (metered, own) {
        (Some(m), AgentFile::Valid(a)) => merge(m, *a),
        (Some(mut m), AgentFile::Invalid(why)) => {
            add_note(&mut m, &unused(&why));
            m
        }
        (Some(m), AgentFile::Absent) => m,
        (None, AgentFile::Valid(a)) => unmetered(src.session_id, *a),
        (None, AgentFile::Invalid(why)) => {
            let mut t = skeleton(src.session_id, src.agent_name);
            add_note(&mut t, &unused(&why));
            t
        }
        (None, AgentFile::Absent) => return None,
    };
    if t.steps.is_empty() {
        // ATIF needs a step; the instruction is what the agent was given.
        t.steps
            .push(plain_step(Source::User, src.instruction.to_string(), None));
    }
    renumber(&mut t);
    if let Some(fm) = t.final_metrics.as_mut() {
        fm.total_steps = Some(t.steps.len() as u64);
    }
    Some(t)
}

/// Write `t` to `trial_dir`'s trajectory file (the host's folder, never the agent's).
pub fn write(trial_dir: &Path, t: &Trajectory) -> std::io::Result<PathBuf> {
    let path = super::path(trial_dir);
    let json = serde_json::to_vec_pretty(t).map_err(std::io::Error::other)?;
    std::fs::write(&path, json)?;
    Ok(path)
}

fn unused(why: &str) -> String {
    format!("the agent's /logs/agent/{AGENT_TRAJECTORY_FILE} was not used: {why}")
}

fn add_note(t: &mut Trajectory, note: &str) {
    t.notes = Some(match t.notes.take() {
        Some(n) if !n.is_empty() => format!("{n}\n{note}"),
        _ => note.to_string(),
    });
}

fn skeleton(session_id: &str, agent_name: &str) -> Trajectory {
    Trajectory {
        schema_version: SCHEMA_VERSION.into(),
        session_id: session_id.into(),
        agent: AgentInfo {
            name: agent_name.into(),
            version: "unknown".into(),
            model_name: None,
            extra: Map::new(),
        },
        steps: Vec::new(),
        notes: None,
        final_metrics: None,
        extra: Map::new(),
    }
}

fn plain_step(source: Source, message: String, timestamp: Option<&str>) -> Step {
    Step {
        step_id: 0,
        timestamp: timestamp.map(str::to_string),
        source,
        model_name: None,
        message,
        reasoning_content: None,
        tool_calls: Vec::new(),
        observation: None,
        metrics: None,
        extra: Map::new(),
    }
}

fn renumber(t: &mut Trajectory) {
    for (i, s) in t.steps.iter_mut().enumerate() {
        s.step_id = i as u64 + 1;
    }
}

/// The text of an OpenAI message `content`: a string, or the text parts of an array.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// An OpenAI `tool_calls` array as ATIF tool calls. Arguments are a JSON string there; one
/// that is not a JSON object is kept whole under `_raw`.
fn tool_calls_of(v: Option<&Value>, prefix: &str) -> Vec<ToolCall> {
    let Some(calls) = v.and_then(Value::as_array) else {
        return Vec::new();
    };
    calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let f = c.get("function");
            let raw = f.and_then(|f| f.get("arguments"));
            let arguments = match raw {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({ "_raw": s }),
                },
                Some(v @ Value::Object(_)) => v.clone(),
                Some(Value::Null) | None => json!({}),
                Some(other) => json!({ "_raw": other }),
            };
            ToolCall {
                tool_call_id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{prefix}-{k}")),
                function_name: f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                arguments,
            }
        })
        .collect()
}

/// Where the messages a request adds begin: after its last assistant message (what came
/// before, the agent already sent), or at the start of a first or fresh conversation.
fn new_messages_from(messages: &[Value], first: bool) -> usize {
    if first {
        return 0;
    }
    messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .map_or(0, |i| i + 1)
}

/// Add one request message to `steps`.
fn push_message(steps: &mut Vec<Step>, m: &Value, ts: &str) {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("");
    let text = text_of(m.get("content").unwrap_or(&Value::Null));
    match role {
        "system" | "developer" => steps.push(plain_step(Source::System, text, Some(ts))),
        "tool" | "function" => {
            let call = m.get("tool_call_id").and_then(Value::as_str);
            if let Some(prev) = steps.last_mut().filter(|s| s.source == Source::Agent) {
                let known = call.filter(|id| prev.tool_calls.iter().any(|c| c.tool_call_id == *id));
                prev.observation
                    .get_or_insert_with(Observation::default)
                    .results
                    .push(ObservationResult {
                        source_call_id: known.map(str::to_string),
                        content: Value::String(text),
                    });
            } else {
                // A tool result with no agent step before it: keep it, as the user's.
                let mut s = plain_step(Source::User, text, Some(ts));
                s.extra.insert("role".into(), role.into());
                if let Some(id) = call {
                    s.extra.insert("tool_call_id".into(), id.into());
                }
                steps.push(s);
            }
        }
        "assistant" => {
            // History the agent put in its request (few-shot turns, a resumed session):
            // not an answer the gateway gave, so it carries no metrics.
            let mut s = plain_step(Source::Agent, text, Some(ts));
            s.tool_calls = tool_calls_of(m.get("tool_calls"), &format!("request-{}", steps.len()));
            s.extra.insert("from_request".into(), true.into());
            steps.push(s);
        }
        "user" => steps.push(plain_step(Source::User, text, Some(ts))),
        other => {
            let mut s = plain_step(Source::User, text, Some(ts));
            s.extra.insert("role".into(), other.into());
            steps.push(s);
        }
    }
}

fn answer_step(ex: &Exchange, answer: &Value, index: usize) -> Step {
    let mut s = plain_step(
        Source::Agent,
        text_of(answer.get("content").unwrap_or(&Value::Null)),
        Some(&ex.ts),
    );
    s.model_name = Some(ex.model.clone());
    s.reasoning_content = ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| answer.get(*k).and_then(Value::as_str))
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    s.tool_calls = tool_calls_of(answer.get("tool_calls"), &format!("call-{index}"));
    let mut extra = Map::new();
    extra.insert("latency_ms".into(), ex.latency_ms.into());
    s.metrics = Some(Metrics {
        prompt_tokens: Some(ex.prompt_tokens),
        completion_tokens: Some(ex.completion_tokens),
        cached_tokens: None,
        cost_usd: Some(ex.usd),
        extra,
    });
    if ex.outcome != "ok" {
        s.extra.insert("outcome".into(), ex.outcome.clone().into());
    }
    s
}

/// The trajectory of the gateway's log alone.
pub fn from_exchanges(session_id: &str, agent_name: &str, log: &TrialModelLog) -> Trajectory {
    let mut t = skeleton(session_id, agent_name);
    t.agent.model_name = log.exchanges.first().map(|e| e.model.clone());
    let mut unanswered = Vec::new();
    let n = log.exchanges.len();
    for (i, ex) in log.exchanges.iter().enumerate() {
        let empty = Vec::new();
        let messages = ex.messages.as_array().unwrap_or(&empty);
        // A request left unanswered is usually retried with the same messages.
        let retried = ex.answer.is_none() && i + 1 < n;
        if !retried {
            for m in &messages[new_messages_from(messages, i == 0)..] {
                push_message(&mut t.steps, m, &ex.ts);
            }
        }
        match &ex.answer {
            Some(a) => t.steps.push(answer_step(ex, a, i)),
            None => unanswered.push(json!({
                "ts": ex.ts,
                "model": ex.model,
                "outcome": ex.outcome,
                "error": ex.error,
                "usd": ex.usd,
            })),
        }
    }
    if !unanswered.is_empty() {
        t.extra
            .insert("unanswered_requests".into(), Value::Array(unanswered));
    }
    let u = &log.usage;
    let mut extra = Map::new();
    extra.insert("metered_by".into(), "evolve model gateway".into());
    extra.insert("calls".into(), u.calls.into());
    extra.insert("refused_by_budget".into(), u.refused_by_budget.into());
    if log.budget_exhausted {
        extra.insert("budget_exhausted".into(), true.into());
    }
    t.final_metrics = Some(FinalMetrics {
        total_prompt_tokens: Some(u.prompt_tokens),
        total_completion_tokens: Some(u.completion_tokens),
        total_cached_tokens: None,
        total_cost_usd: Some(u.usd),
        total_steps: Some(t.steps.len() as u64),
        extra,
    });
    t
}

/// The agent's own trajectory when no gateway metered it: kept as it is, marked unmetered.
fn unmetered(session_id: &str, mut a: Trajectory) -> Trajectory {
    if a.session_id != session_id {
        a.extra
            .insert("agent_session_id".into(), a.session_id.clone().into());
        a.session_id = session_id.into();
    }
    a.schema_version = SCHEMA_VERSION.into();
    a.extra.insert("metered".into(), false.into());
    a
}

/// The agent step of `metered` that `step` (from the agent's file) stands for.
fn matching(step: &Step, metered: &[Step], used: &[bool]) -> Option<usize> {
    let free = |j: &usize| !used[*j];
    let ids: Vec<&str> = step
        .tool_calls
        .iter()
        .map(|c| c.tool_call_id.as_str())
        .collect();
    (0..metered.len())
        .filter(free)
        .find(|&j| {
            metered[j]
                .tool_calls
                .iter()
                .any(|c| ids.contains(&c.tool_call_id.as_str()))
        })
        .or_else(|| {
            let msg = step.message.trim();
            (!msg.is_empty())
                .then(|| {
                    (0..metered.len())
                        .filter(free)
                        .find(|&j| metered[j].message.trim() == msg)
                })
                .flatten()
        })
}

/// Give `step` the metered numbers of `m`, keeping what the agent claimed under `extra`.
fn take_metrics(step: &mut Step, m: &Step) {
    if let Some(own) = step.metrics.take()
        && let Ok(v) = serde_json::to_value(own)
    {
        step.extra.insert("agent_reported_metrics".into(), v);
    }
    step.metrics = m.metrics.clone();
    if let (Some(own), Some(theirs)) = (&step.model_name, &m.model_name)
        && own != theirs
    {
        step.extra
            .insert("agent_reported_model_name".into(), own.clone().into());
    }
    step.model_name = m.model_name.clone().or(step.model_name.take());
    if step.message.is_empty() {
        step.message = m.message.clone();
    }
    if step.reasoning_content.is_none() {
        step.reasoning_content = m.reasoning_content.clone();
    }
    step.extra.insert("metered".into(), true.into());
}

/// The agent's trajectory with the gateway's metered numbers (see the module's doc).
pub fn merge(metered: Trajectory, agent: Trajectory) -> Trajectory {
    let calls: Vec<Step> = metered
        .steps
        .iter()
        .filter(|s| s.source == Source::Agent && s.metrics.is_some())
        .cloned()
        .collect();
    let mut used = vec![false; calls.len()];
    let mut out = agent;
    let mut unmatched = Vec::new();
    for (i, step) in out.steps.iter_mut().enumerate() {
        if step.source != Source::Agent {
            continue;
        }
        match matching(step, &calls, &used) {
            Some(j) => {
                used[j] = true;
                take_metrics(step, &calls[j]);
            }
            None => unmatched.push(i),
        }
    }
    // Without ids or equal messages, position decides, but only when it is unambiguous.
    let free: Vec<usize> = (0..calls.len()).filter(|j| !used[*j]).collect();
    if !unmatched.is_empty() && unmatched.len() == free.len() {
        for (&i, &j) in unmatched.iter().zip(&free) {
            used[j] = true;
            take_metrics(&mut out.steps[i], &calls[j]);
        }
    }
    let missing: Vec<Step> = calls
        .into_iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(mut s, _)| {
            s.extra.insert("from_gateway_log".into(), true.into());
            s
        })
        .collect();
    if !missing.is_empty() {
        let note = format!(
            "{} metered model call(s) the agent's own trajectory does not show were added from the gateway's log",
            missing.len()
        );
        out.steps.extend(missing);
        add_note(&mut out, &note);
    }
    if out.session_id != metered.session_id {
        out.extra
            .insert("agent_session_id".into(), out.session_id.clone().into());
        out.session_id = metered.session_id.clone();
    }
    if let Some(claimed) = out.final_metrics.take()
        && let Ok(v) = serde_json::to_value(claimed)
    {
        out.extra.insert("agent_reported_final_metrics".into(), v);
    }
    out.final_metrics = metered.final_metrics;
    if out.agent.model_name.is_none() {
        out.agent.model_name = metered.agent.model_name;
    }
    for (k, v) in metered.extra {
        out.extra.entry(k).or_insert(v);
    }
    if let Some(n) = metered.notes {
        add_note(&mut out, &n);
    }
    out.schema_version = SCHEMA_VERSION.into();
    out
}

/// Read and check the agent's own trajectory in `agent_logs` (never following a link).
pub fn read_agent(agent_logs: &Path) -> AgentFile {
    let file = agent_logs.join(AGENT_TRAJECTORY_FILE);
    if std::fs::symlink_metadata(&file).is_err() {
        return AgentFile::Absent;
    }
    let bytes = match Beneath::open(agent_logs).map_err(|_| NotRegular::Refused) {
        Ok(dir) => dir.read(AGENT_TRAJECTORY_FILE, AGENT_TRAJECTORY_CAP),
        Err(e) => Err(e),
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(NotRegular::Refused) => {
            return AgentFile::Invalid(
                "it is not a regular file (links are never followed)".into(),
            );
        }
        Err(NotRegular::TooLarge) => {
            return AgentFile::Invalid(format!(
                "it is larger than {} MiB",
                AGENT_TRAJECTORY_CAP >> 20
            ));
        }
        Err(NotRegular::Io(e)) => return AgentFile::Invalid(format!("cannot read it: {e}")),
    };
    match parse_agent(&bytes) {
        Ok(t) => AgentFile::Valid(Box::new(t)),
        Err(why) => AgentFile::Invalid(why),
    }
}

/// Parse and check ATIF text an agent wrote.
pub fn parse_agent(bytes: &[u8]) -> Result<Trajectory, String> {
    let mut v: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON ({e})"))?;
    normalize(&mut v)?;
    let t: Trajectory = serde_json::from_value(v).map_err(|e| format!("it is not ATIF ({e})"))?;
    validate(&t)?;
    Ok(t)
}

const TRAJECTORY_KEYS: &[&str] = &[
    "schema_version",
    "session_id",
    "agent",
    "steps",
    "notes",
    "final_metrics",
    "extra",
];
const AGENT_KEYS: &[&str] = &["name", "version", "model_name", "extra"];
const STEP_KEYS: &[&str] = &[
    "step_id",
    "timestamp",
    "source",
    "model_name",
    "message",
    "reasoning_content",
    "tool_calls",
    "observation",
    "metrics",
    "extra",
];
const METRICS_KEYS: &[&str] = &[
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cost_usd",
    "extra",
];
const FINAL_KEYS: &[&str] = &[
    "total_prompt_tokens",
    "total_completion_tokens",
    "total_cached_tokens",
    "total_cost_usd",
    "total_steps",
    "extra",
];

/// Move the fields of `obj` that ATIF v1.4 does not name into its `extra` (fields of later
/// versions, a harness's own), so nothing the agent wrote is lost.
fn absorb(obj: &mut Map<String, Value>, known: &[&str]) -> Result<(), String> {
    // Writers such as Harbor's emit `null` for absent optional fields (`"tool_calls": null`).
    obj.retain(|_, v| !v.is_null());
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let mut extra = match obj.remove("extra") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("an `extra` field is not an object".into()),
    };
    for k in unknown {
        if let Some(v) = obj.remove(&k) {
            // A name `extra` already holds keeps the value written there.
            extra.entry(k).or_insert(v);
        }
    }
    obj.insert("extra".into(), Value::Object(extra));
    Ok(())
}

/// Bring an agent's ATIF text to the v1.4 types: unknown fields into `extra`, a message
/// given as content parts (v1.6) into its text (the parts kept under `extra`).
fn normalize(v: &mut Value) -> Result<(), String> {
    let Value::Object(top) = v else {
        return Err("it is not a JSON object".into());
    };
    absorb(top, TRAJECTORY_KEYS)?;
    if let Some(Value::Object(agent)) = top.get_mut("agent") {
        absorb(agent, AGENT_KEYS)?;
    }
    if let Some(Value::Object(fm)) = top.get_mut("final_metrics") {
        absorb(fm, FINAL_KEYS)?;
    }
    let Some(Value::Array(steps)) = top.get_mut("steps") else {
        return Err("it has no `steps` array".into());
    };
    for step in steps {
        let Value::Object(s) = step else {
            return Err("a step is not an object".into());
        };
        if let Some(parts @ Value::Array(_)) = s.get("message").cloned() {
            s.insert("message".into(), Value::String(text_of(&parts)));
            s.insert("message_parts".into(), parts);
        }
        absorb(s, STEP_KEYS)?;
        if let Some(Value::Object(m)) = s.get_mut("metrics") {
            absorb(m, METRICS_KEYS)?;
        }
    }
    Ok(())
}

/// ATIF's rules this project relies on: a known version, steps numbered from 1, agent-only
/// fields only on agent steps, tool-call arguments that are objects, observations that name
/// a tool call of their own step, and sane numbers.
pub fn validate(t: &Trajectory) -> Result<(), String> {
    if !t.schema_version.starts_with("ATIF-v1.") {
        return Err(format!(
            "schema_version is {:?}, expected ATIF-v1.x",
            t.schema_version
        ));
    }
    if t.steps.is_empty() {
        return Err("it has no steps".into());
    }
    for (i, s) in t.steps.iter().enumerate() {
        let at = format!("step {}", i + 1);
        if s.step_id != i as u64 + 1 {
            return Err(format!(
                "{at} has step_id {}; step ids count from 1 in order",
                s.step_id
            ));
        }
        if s.source != Source::Agent
            && (s.model_name.is_some()
                || s.reasoning_content.is_some()
                || !s.tool_calls.is_empty()
                || s.metrics.is_some())
        {
            return Err(format!(
                "{at} is not an agent step but has model_name, reasoning_content, tool_calls or metrics"
            ));
        }
        if let Some(c) = s.tool_calls.iter().find(|c| !c.arguments.is_object()) {
            return Err(format!(
                "{at}: tool call {:?} has arguments that are not an object",
                c.tool_call_id
            ));
        }
        if let Some(obs) = &s.observation {
            for r in &obs.results {
                if let Some(id) = &r.source_call_id
                    && !s.tool_calls.iter().any(|c| &c.tool_call_id == id)
                {
                    return Err(format!(
                        "{at}: an observation names tool call {id:?}, which the step does not make"
                    ));
                }
            }
        }
        if let Some(c) = s.metrics.as_ref().and_then(|m| m.cost_usd)
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(format!("{at}: cost_usd {c} is not a finite number ≥ 0"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::TrialUsage;

    fn exchange(messages: Value, answer: Option<Value>, usd: f64) -> Exchange {
        Exchange {
            ts: "2026-01-01T00:00:00Z".into(),
            model: "m".into(),
            messages,
            tools: None,
            outcome: if answer.is_some() { "ok" } else { "failed" }.into(),
            answer,
            error: None,
            prompt_tokens: 10,
            completion_tokens: 5,
            usd,
            latency_ms: 3,
        }
    }

    fn two_turns() -> TrialModelLog {
        let sys = json!({"role": "system", "content": "be brief"});
        let user = json!({"role": "user", "content": [{"type": "text", "text": "write 42"}]});
        let call = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{\"cmd\":\"echo 42\"}"}}
        ]});
        let result = json!({"role": "tool", "tool_call_id": "c1", "content": "42\n"});
        TrialModelLog {
            usage: TrialUsage {
                calls: 3,
                prompt_tokens: 30,
                completion_tokens: 15,
                usd: 0.3,
                ..Default::default()
            },
            exchanges: vec![
                exchange(json!([sys, user]), Some(call.clone()), 0.1),
                exchange(json!([sys, user, call, result]), None, 0.1),
                exchange(
                    json!([sys, user, call, result]),
                    Some(
                        json!({"role": "assistant", "content": "done", "reasoning_content": "ok"}),
                    ),
                    0.1,
                ),
            ],
            budget_exhausted: false,
        }
    }

    #[test]
    fn the_gateway_log_becomes_steps_with_observations_and_metrics() {
        let t = from_exchanges("s", "a", &two_turns());
        let kinds: Vec<Source> = t.steps.iter().map(|s| s.source).collect();
        assert_eq!(
            kinds,
            [Source::System, Source::User, Source::Agent, Source::Agent]
        );
        assert_eq!(t.steps[1].message, "write 42");
        let call = &t.steps[2];
        assert_eq!(call.tool_calls[0].function_name, "sh");
        assert_eq!(call.tool_calls[0].arguments, json!({"cmd": "echo 42"}));
        let obs = &call.observation.as_ref().unwrap().results[0];
        assert_eq!(obs.source_call_id.as_deref(), Some("c1"));
        assert_eq!(obs.content, json!("42\n"));
        assert_eq!(call.metrics.as_ref().unwrap().cost_usd, Some(0.1));
        assert_eq!(t.steps[3].reasoning_content.as_deref(), Some("ok"));
        // The failed middle request is listed; its messages came again with the retry.
        assert_eq!(t.extra["unanswered_requests"].as_array().unwrap().len(), 1);
        let fm = t.final_metrics.as_ref().unwrap();
        assert_eq!(
            (fm.total_prompt_tokens, fm.total_cost_usd),
            (Some(30), Some(0.3))
        );
        let mut t = t;
        renumber(&mut t);
        validate(&t).unwrap();
    }

    #[test]
    fn the_agents_file_keeps_its_commands_and_takes_the_metered_numbers() {
        let own = json!({
            "schema_version": "ATIF-v1.6",
            "session_id": "agent-own",
            "agent": {"name": "py", "version": "1"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "write 42"},
                {"step_id": 2, "source": "agent", "message": "", "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "sh", "arguments": {"cmd": "echo 42"}}],
                 "observation": {"results": [{"source_call_id": "c1", "content": "42"}]},
                 "metrics": {"prompt_tokens": 1, "cost_usd": 0.0}, "llm_call_count": 1},
                {"step_id": 3, "source": "agent", "message": "done"}
            ],
            "final_metrics": {"total_cost_usd": 0.0}
        });
        let a = parse_agent(own.to_string().as_bytes()).unwrap();
        assert_eq!(a.steps[1].extra["llm_call_count"], json!(1));
        let m = merge(from_exchanges("trial", "a", &two_turns()), a);
        assert_eq!(m.session_id, "trial");
        assert_eq!(m.steps.len(), 3, "every metered call matched: {m:#?}");
        let call = &m.steps[1];
        assert_eq!(call.metrics.as_ref().unwrap().prompt_tokens, Some(10));
        assert_eq!(
            call.extra["agent_reported_metrics"]["prompt_tokens"],
            json!(1)
        );
        assert_eq!(m.steps[2].metrics.as_ref().unwrap().cost_usd, Some(0.1));
        assert_eq!(m.final_metrics.as_ref().unwrap().total_cost_usd, Some(0.3));
        assert_eq!(
            m.extra["agent_reported_final_metrics"]["total_cost_usd"],
            json!(0.0)
        );
        validate(&m).unwrap();
    }

    #[test]
    fn malformed_agent_files_are_named_never_used() {
        for (body, why) in [
            ("not json", "not JSON"),
            ("[]", "not a JSON object"),
            (
                r#"{"schema_version":"v9","session_id":"s","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"user","message":"x"}]}"#,
                "ATIF-v1.x",
            ),
            (
                r#"{"schema_version":"ATIF-v1.4","session_id":"s","agent":{"name":"a","version":"1"},"steps":[{"step_id":2,"source":"user","message":"x"}]}"#,
                "count from 1",
            ),
            (
                r#"{"schema_version":"ATIF-v1.4","session_id":"s","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"user","message":"x","metrics":{}}]}"#,
                "not an agent step",
            ),
            (
                r#"{"schema_version":"ATIF-v1.4","session_id":"s","agent":{"name":"a","version":"1"},"steps":[{"step_id":1,"source":"robot","message":"x"}]}"#,
                "not ATIF",
            ),
        ] {
            let e = parse_agent(body.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{body}: {e}");
        }
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.path().join(AGENT_TRAJECTORY_FILE)).unwrap();
        match read_agent(d.path()) {
            AgentFile::Invalid(why) => assert!(why.contains("links are never followed"), "{why}"),
            other => panic!("{other:?}"),
        }
        let t = build(Sources {
            session_id: "s",
            agent_name: "a",
            log: None,
            agent_logs: d.path(),
            instruction: "do it",
        })
        .unwrap();
        assert!(t.notes.as_deref().unwrap().contains("was not used"));
        assert_eq!(t.steps[0].message, "do it");
        validate(&t).unwrap();
        let empty = tempfile::tempdir().unwrap();
        assert!(
            build(Sources {
                agent_logs: empty.path(),
                ..Sources {
                    session_id: "s",
                    agent_name: "a",
                    log: None,
                    agent_logs: d.path(),
                    instruction: "",
                }
            })
            .is_none()
        );
    }
}
