//! The evaluation protocol as a workspace froze it (`evaluator/engine.json`): the tasks
//! each evaluation of the primary split runs (all of them, a sample chosen at init, or a
//! sample drawn per generation), the identity of that selection, the trial settings every
//! evaluation shares (host variables read at the moment it runs, multipliers), and the
//! check `evolve verify` makes that every certified evaluation ran the members the
//! protocol gives it.

use super::{EngineConfig, Result, Workspace, WorkspaceError, err};
use crate::recipe::Recipe;
use crate::recipe::protocol::{EVALUATION_SPLITS, MAX_MULTIPLIER, MAX_RETRIES};
use evaluator_harbor::gateway::TrialSettings;
use evaluator_harbor::split::{FrozenTaskSet, SplitName};
use evolve_archive::{Event, Report};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How a `tasks_per_round` sample of the primary split is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// One sample, chosen at init and recorded in `engine.json`.
    Static,
    /// A sample per generation, the same for every candidate of it.
    GenerationShuffle,
}

/// `evaluator.tasks_per_round` and how its sample is drawn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSample {
    pub tasks_per_round: u32,
    pub sampling: Sampling,
    /// The static sample (sorted by name); absent for `generation_shuffle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
}

/// `tasks_per_round` of the `members` (sorted by name), ordered by
/// `sha256("{seed}\0{round}\0{name}")` (hex) and taken from the front: RSIHub's per-round
/// order. `round` is the generation number for `generation_shuffle`, `static` for the
/// sample chosen at init.
pub fn sample(members: &[String], tasks_per_round: usize, seed: u64, round: &str) -> Vec<String> {
    let mut keyed: Vec<(String, &String)> = members
        .iter()
        .map(|name| {
            let key = evolve_archive::sha256_hex(format!("{seed}\0{round}\0{name}").as_bytes());
            (key, name)
        })
        .collect();
    keyed.sort();
    let mut chosen: Vec<String> = keyed
        .into_iter()
        .take(tasks_per_round)
        .map(|(_, n)| n.clone())
        .collect();
    chosen.sort();
    chosen
}

/// The members one evaluation runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub members: Vec<String>,
    /// The members are a sample of the split (recorded in the evaluation's body), not the
    /// whole of it.
    pub sampled: bool,
}

impl EngineConfig {
    /// The evaluation protocol's fields of `engine.json`, from the recipe. The static sample
    /// needs the frozen task set: [`EngineConfig::freeze_sample`] fills it in.
    pub(super) fn protocol_from(&mut self, r: &Recipe) {
        let e = &r.evaluator;
        self.primary_split = e.evaluation_split.clone();
        self.agent_timeout_is_zero = e.agent_timeout_is_zero;
        self.task_sample = e.tasks_per_round.map(|n| TaskSample {
            tasks_per_round: n,
            sampling: match e.task_sampling.as_str() {
                "generation_shuffle" => Sampling::GenerationShuffle,
                _ => Sampling::Static,
            },
            members: None,
        });
        self.max_retries = e.max_retries;
        self.agent_timeout_multiplier = e.agent_timeout_multiplier;
        self.verifier_timeout_multiplier = e.verifier_timeout_multiplier;
        self.agent_env = e.agent_env.clone();
        self.verifier_env = e.verifier_env.clone();
        // `init` refuses a malformed block before it gets here (`model::check_init_model`).
        let block = e.model.clone().unwrap_or(Value::Null);
        self.agent_model = crate::model::GatewayConfig::from_recipe(&block)
            .ok()
            .flatten()
            .map(|c| c.policy());
        // Likewise the harbor block (`recipe::harbor`); `init` checks it again
        // (`EngineConfig::check_harbor`) before freezing.
        self.harbor = super::harbor::HarborContract::from_recipe(r).ok().flatten();
    }

    /// Choose the static sample from the frozen task set (seeded by the split seed), and
    /// refuse a `tasks_per_round` larger than the primary split.
    pub fn freeze_sample(&mut self, task_set: &FrozenTaskSet) -> Result<()> {
        let split = self.split();
        let Some(s) = self.task_sample.as_mut() else {
            return Ok(());
        };
        let all = task_set.split.members(split);
        if s.tasks_per_round as usize > all.len() {
            return Err(err(format!(
                "evaluator.tasks_per_round is {}, but the {} split has {} task(s)",
                s.tasks_per_round,
                split.as_str(),
                all.len()
            ))
            .hint("lower evaluator.tasks_per_round, or raise the split's ratio"));
        }
        if s.sampling == Sampling::Static {
            s.members = Some(sample(
                all,
                s.tasks_per_round as usize,
                task_set.seed,
                "static",
            ));
        }
        Ok(())
    }

    /// The primary split (checked when the workspace opened).
    pub fn split(&self) -> SplitName {
        super::split_named(&self.primary_split).unwrap_or(SplitName::Gate)
    }

    /// The protocol fields read back from `engine.json` must be ones `init` could write.
    pub(super) fn check_protocol(&self, task_set: &FrozenTaskSet) -> Result<()> {
        let bad = |what: String| err(format!("{}: {what}", crate::layout::ENGINE_FILE));
        if !EVALUATION_SPLITS.contains(&self.primary_split.as_str()) {
            return Err(bad(format!(
                "primary_split `{}` must be train or gate",
                self.primary_split
            )));
        }
        if self.max_retries > MAX_RETRIES {
            return Err(bad(format!("max_retries must be at most {MAX_RETRIES}")));
        }
        for m in [
            self.agent_timeout_multiplier,
            self.verifier_timeout_multiplier,
        ] {
            if !(m > 0.0 && m <= MAX_MULTIPLIER) {
                return Err(bad(format!(
                    "a timeout multiplier must be in (0, {MAX_MULTIPLIER}]"
                )));
            }
        }
        let Some(s) = &self.task_sample else {
            return Ok(());
        };
        let all = task_set.split.members(self.split());
        let fits = s.tasks_per_round >= 1 && s.tasks_per_round as usize <= all.len();
        let members_ok = match (s.sampling, &s.members) {
            (Sampling::Static, Some(m)) => {
                m.len() == s.tasks_per_round as usize && m.iter().all(|t| all.contains(t))
            }
            (Sampling::GenerationShuffle, None) => true,
            _ => false,
        };
        if fits && members_ok {
            Ok(())
        } else {
            Err(bad(format!(
                "task_sample does not fit the {} split of the frozen task set",
                self.split().as_str()
            )))
        }
    }

    /// The members an evaluation of `split` in `generation` runs: a sample of the primary
    /// split when the protocol samples it, else the whole split (the sealed split always).
    pub fn selection(
        &self,
        task_set: &FrozenTaskSet,
        split: SplitName,
        generation: u64,
    ) -> Selection {
        let all = task_set.split.members(split);
        let whole = || Selection {
            members: all.to_vec(),
            sampled: false,
        };
        let Some(s) = self.task_sample.as_ref().filter(|_| split == self.split()) else {
            return whole();
        };
        let members = match (&s.members, s.sampling) {
            (Some(m), _) => m.clone(),
            (None, _) => sample(
                all,
                s.tasks_per_round as usize,
                task_set.seed,
                &generation.to_string(),
            ),
        };
        Selection {
            members,
            sampled: true,
        }
    }

    /// The archive's `task_set_hash` of an evaluation of `split`: what is the same for
    /// every evaluation of the experiment that can be compared (the fixed identity), so
    /// never a generation's own sample. The whole split: the task-set digest, split,
    /// members and repetitions (`selection_digest`, as always); a static sample: the same
    /// over its members; `generation_shuffle`: the whole split's, with the sampling rule.
    pub fn task_set_hash(&self, task_set: &FrozenTaskSet, split: SplitName) -> Result<String> {
        let digest = |v: Value| {
            evaluator_harbor::digest::canonical_digest(&v).map_err(|e| err(e.to_string()))
        };
        let base = |members: &[String]| {
            json!({
                "task_set_digest": task_set.task_set_digest,
                "split": split.as_str(),
                "members": members,
                "repetitions": task_set.repetitions,
            })
        };
        match self.task_sample.as_ref().filter(|_| split == self.split()) {
            None => task_set
                .selection_digest(split)
                .map_err(|e| err(e.to_string())),
            Some(TaskSample {
                members: Some(m), ..
            }) => digest(base(m)),
            Some(s) => {
                let mut v = base(task_set.split.members(split));
                v["sample"] = json!({"tasks_per_round": s.tasks_per_round, "sampling": s.sampling});
                digest(v)
            }
        }
    }

    /// The settings every trial of an evaluation shares: the passed variables with their
    /// values, read from the host now (and never written anywhere), and the multipliers.
    /// Every unset variable is named at once.
    pub fn trial_settings(&self) -> Result<TrialSettings> {
        let mut missing = Vec::new();
        let mut read = |names: &[String], key: &str| -> Vec<(String, String)> {
            let mut found = Vec::new();
            for name in names {
                match std::env::var(name) {
                    Ok(value) => found.push((name.clone(), value)),
                    Err(std::env::VarError::NotPresent) => {
                        missing.push(format!("`{name}` (evaluator.{key})"));
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        missing.push(format!(
                            "`{name}` (evaluator.{key}; its value is not UTF-8)"
                        ));
                    }
                }
            }
            found
        };
        let agent_env = read(&self.agent_env, "agent_env");
        let verifier_env = read(&self.verifier_env, "verifier_env");
        if !missing.is_empty() {
            return Err(unset(&missing));
        }
        Ok(TrialSettings {
            agent_env,
            verifier_env,
            agent_timeout_multiplier: self.agent_timeout_multiplier,
            verifier_timeout_multiplier: self.verifier_timeout_multiplier,
            ..TrialSettings::default()
        })
    }
}

fn unset(missing: &[String]) -> WorkspaceError {
    err(format!(
        "the recipe passes host variables to its trials that are not set here: {}",
        missing.join(", ")
    ))
    .hint("set them in the environment of `evolve run`; their values reach the trials and are never stored")
}

impl Workspace {
    /// Every certified evaluation of the primary split must have run the members the
    /// protocol gives its generation, and say so: `members` in its body (when the split
    /// is sampled) and the tasks of its task vector. `events` are the archive's lines.
    pub fn verify_members(&self, report: &Report, events: &[Event]) -> Vec<String> {
        let by_seq: std::collections::BTreeMap<u64, &Event> =
            events.iter().map(|e| (e.seq, e)).collect();
        let mut out = Vec::new();
        for row in &report.rows {
            for ev in row.evaluation.iter().chain(&row.other_evaluations) {
                if !matches!(ev.purpose(), Some("genesis" | "candidate")) {
                    continue;
                }
                let Some(generation) = ev.stamp.get("generation").and_then(Value::as_u64) else {
                    continue;
                };
                let want = self
                    .engine
                    .selection(&self.task_set, self.engine.split(), generation);
                let body = by_seq.get(&ev.seq).map(|e| &e.body);
                let recorded = body.and_then(|b| b.get("members"));
                let expected = want.sampled.then(|| json!(want.members));
                if recorded != expected.as_ref() {
                    out.push(format!(
                        "gen {}: archive line {} records members {} but the protocol gives generation {generation} {}",
                        row.genid,
                        ev.line,
                        recorded.map_or("(none)".into(), Value::to_string),
                        expected.map_or("(none: the whole split)".into(), |v| v.to_string()),
                    ));
                    continue;
                }
                let ran: Vec<&str> = ev
                    .stamp
                    .get("task_vector")
                    .and_then(|v| v.get("tasks"))
                    .and_then(Value::as_object)
                    .map(|t| t.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let mut want_sorted: Vec<&str> = want.members.iter().map(String::as_str).collect();
                want_sorted.sort_unstable();
                if ran != want_sorted {
                    out.push(format!(
                        "gen {}: archive line {} scores tasks {ran:?}, not the {} the protocol gives generation {generation}",
                        row.genid,
                        ev.line,
                        want_sorted.len()
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i:02}")).collect()
    }

    #[test]
    fn a_sample_is_deterministic_sorted_and_seeded_by_round() {
        let all = names(20);
        let a = sample(&all, 5, 0, "3");
        assert_eq!(a, sample(&all, 5, 0, "3"));
        assert_eq!(a.len(), 5);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(a.iter().all(|t| all.contains(t)));
        // Another generation, or another seed, draws another sample (for these names).
        assert_ne!(a, sample(&all, 5, 0, "4"));
        assert_ne!(a, sample(&all, 5, 1, "3"));
        assert_eq!(sample(&all, 20, 0, "static"), all);
    }
}
