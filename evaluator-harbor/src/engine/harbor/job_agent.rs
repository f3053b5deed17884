//! What a harbor job is told about its agent and its model: the flags, the `PYTHONPATH`
//! and the process environment of `harbor run`. [`JobAgent`] comes from the candidate's
//! agent (see `agents.rs`), [`JobModelAccess`] from the evaluation's model settings (see
//! `access.rs`); the job runner (`job.rs`) only appends them.

use std::path::PathBuf;

/// The agent half of a `harbor run` command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobAgent {
    /// `-a NAME` or `-a module:Class`, and any `-m` and `--ak key=value` flags.
    pub args: Vec<String>,
    /// Directories put on harbor's `PYTHONPATH`, first first (the candidate's tree for a
    /// class agent, the shipped adapter's directory for a command agent).
    pub pythonpath: Vec<PathBuf>,
    /// Variables set in harbor's own process. A secret is never a flag: flags say
    /// `--ae NAME=${NAME}` and Harbor resolves the template from this environment, so the
    /// value reaches neither the command line nor Harbor's config.json.
    pub env: Vec<(String, String)>,
}

impl JobAgent {
    /// Harbor's oracle agent (`-a oracle`): runs the task's `solution/solve.sh`.
    pub fn oracle() -> JobAgent {
        JobAgent {
            args: vec!["-a".into(), "oracle".into()],
            ..JobAgent::default()
        }
    }
}

/// How the job's agent reaches its model; recorded in every trial of the job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ModelPath {
    /// The evaluation has no agent model.
    #[default]
    None,
    /// This machine's model gateway, metered by the host (a local Docker environment).
    Gateway,
    /// Host variables passed with `--ae` (a cloud environment, where the gateway is not
    /// reachable): the agent holds the key, and its spend is what Harbor reports.
    AgentEnv,
}

impl ModelPath {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelPath::None => "none",
            ModelPath::Gateway => "gateway",
            ModelPath::AgentEnv => "agent_env",
        }
    }
}

/// The model half of a `harbor run` command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobModelAccess {
    pub path: ModelPath,
    /// `--ae NAME=${NAME}` flags.
    pub args: Vec<String>,
    /// The values behind those templates, for harbor's process environment only.
    pub env: Vec<(String, String)>,
}
