//! `evaluator.harbor`: how the harbor engine drives `harbor run`.
//!
//! The host parses the recipe's block into [`HarborOptions`], freezes it at init (it is part
//! of the evaluation contract), and hands it to [`super::HarborEngine::discover`]. Every
//! field maps onto one `harbor run` flag ([`HarborOptions::FLAGS`]), so that an error can
//! name the flag a user would look up in Harbor's own documentation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The settings of the harbor engine that a recipe may change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarborOptions {
    /// Harbor's environment (`-e`): `docker` (the default), `daytona`, `modal`, `e2b`,
    /// `runloop`, ... or a `module:Class` import path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// `--ek key=value`, one per entry.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment_kwargs: BTreeMap<String, String>,
    /// `-n`: trials of one job run at once (default: the evaluation's concurrency).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_concurrent: Option<u32>,
    /// `-r`: how often Harbor reruns a failed trial (default: the evaluation protocol's
    /// `max_retries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// `--timeout-multiplier`: every phase's timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_multiplier: Option<f64>,
    /// `--agent-setup-timeout-multiplier`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_setup_timeout_multiplier: Option<f64>,
    /// `--environment-build-timeout-multiplier`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_build_timeout_multiplier: Option<f64>,
    /// `-m`: the model a built-in Harbor agent (`terminus-2`, `mini-swe-agent`, ...) uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `--ak key=value`, one per entry, for a built-in or class agent.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_kwargs: BTreeMap<String, String>,
    /// Passed to `harbor run` verbatim, after every flag above.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

/// One problem with a [`HarborOptions`]: the field, the `harbor run` flag it maps onto, and
/// what was expected (never the value itself, which may be a secret in a kwarg).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionProblem {
    pub field: &'static str,
    pub flag: &'static str,
    pub message: String,
}

impl HarborOptions {
    /// Each field and the `harbor run` flag it becomes.
    pub const FLAGS: &'static [(&'static str, &'static str)] = &[
        ("environment", "-e/--env"),
        ("environment_kwargs", "--ek/--environment-kwarg"),
        ("n_concurrent", "-n/--n-concurrent"),
        ("max_retries", "-r/--max-retries"),
        ("timeout_multiplier", "--timeout-multiplier"),
        (
            "agent_setup_timeout_multiplier",
            "--agent-setup-timeout-multiplier",
        ),
        (
            "environment_build_timeout_multiplier",
            "--environment-build-timeout-multiplier",
        ),
        ("model", "-m/--model"),
        ("agent_kwargs", "--ak/--agent-kwarg"),
        ("extra_args", "(passed verbatim)"),
    ];

    /// The flag `field` maps onto.
    pub fn flag_of(field: &str) -> &'static str {
        Self::FLAGS
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, flag)| *flag)
            .unwrap_or("?")
    }

    /// The environment `harbor run -e` is given.
    pub fn environment(&self) -> &str {
        self.environment.as_deref().unwrap_or("docker")
    }

    /// Whether trials run on this machine's Docker daemon, where the agent can reach the
    /// model gateway; every other environment runs elsewhere (a cloud sandbox).
    pub fn is_local_docker(&self) -> bool {
        self.environment() == "docker"
    }

    /// Every problem, sorted by field; empty when the options can be passed to Harbor.
    pub fn problems(&self) -> Vec<OptionProblem> {
        let mut out = Vec::new();
        let mut bad = |field: &'static str, message: String| {
            out.push(OptionProblem {
                field,
                flag: Self::flag_of(field),
                message,
            })
        };
        if let Some(env) = &self.environment {
            let ok = !env.is_empty()
                && env
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
            if !ok {
                bad(
                    "environment",
                    "must be a Harbor environment name (docker, daytona, modal, e2b, runloop, ...) or a module:Class import path".into(),
                );
            }
        }
        for (field, map) in [
            ("agent_kwargs", &self.agent_kwargs),
            ("environment_kwargs", &self.environment_kwargs),
        ] {
            if map.keys().any(|k| !is_kwarg_key(k)) {
                bad(
                    field,
                    "keys must be identifiers (letters, digits, `_`, `.`), each passed as key=value".into(),
                );
            }
        }
        if self.n_concurrent == Some(0) {
            bad("n_concurrent", "must be at least 1".into());
        }
        for (field, m) in [
            ("timeout_multiplier", self.timeout_multiplier),
            (
                "agent_setup_timeout_multiplier",
                self.agent_setup_timeout_multiplier,
            ),
            (
                "environment_build_timeout_multiplier",
                self.environment_build_timeout_multiplier,
            ),
        ] {
            if m.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
                bad(field, "must be a finite number greater than 0".into());
            }
        }
        if self.model.as_ref().is_some_and(|m| m.trim().is_empty()) {
            bad(
                "model",
                "must name a model (for example openai/gpt-4o-mini)".into(),
            );
        }
        if let Some(a) = self.extra_args.iter().find(|a| owned_flag(a).is_some()) {
            let owner = owned_flag(a).unwrap_or("");
            bad(
                "extra_args",
                format!(
                    "must not pass {owner}: the harbor engine sets it (for the task set, the agent, the job or the output)"
                ),
            );
        }
        out.sort_by(|a, b| a.field.cmp(b.field));
        out
    }
}

fn is_kwarg_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// The flags the engine owns, which `extra_args` may not pass: which tasks run, which agent
/// runs them, and where results go are the evaluation contract's, not the recipe's extras.
fn owned_flag(arg: &str) -> Option<&'static str> {
    const OWNED: &[&str] = &[
        "-p",
        "--path",
        "-d",
        "--dataset",
        "-t",
        "--task",
        "-a",
        "--agent",
        "-i",
        "--include-task-name",
        "-x",
        "--exclude-task-name",
        "-l",
        "--n-tasks",
        "-o",
        "--jobs-dir",
        "--job-name",
        "-k",
        "--n-attempts",
        "-c",
        "--config",
        "--disable-verification",
        "--verifier",
        "--ae",
        "--agent-env",
        "--ve",
        "--verifier-env",
        "--env-file",
        "-e",
        "--env",
    ];
    let name = arg.split('=').next().unwrap_or(arg);
    OWNED.iter().find(|o| **o == name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_the_flag_and_never_the_value() {
        let mut o = HarborOptions {
            environment: Some("dock er".into()),
            n_concurrent: Some(0),
            timeout_multiplier: Some(f64::NAN),
            extra_args: vec!["--agent=oracle".into()],
            ..HarborOptions::default()
        };
        o.agent_kwargs.insert("bad key".into(), "sk-secret".into());
        let p = o.problems();
        let fields: Vec<_> = p.iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "agent_kwargs",
                "environment",
                "extra_args",
                "n_concurrent",
                "timeout_multiplier"
            ]
        );
        assert!(p.iter().all(|p| !p.message.contains("sk-secret")));
        assert_eq!(p[2].flag, "(passed verbatim)");
        assert!(p[2].message.contains("--agent"), "{:?}", p[2]);
        assert_eq!(p[3].flag, "-n/--n-concurrent");
        assert!(HarborOptions::default().problems().is_empty());
    }
}
