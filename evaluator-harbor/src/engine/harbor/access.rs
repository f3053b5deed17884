//! How a harbor job's agent reaches its model ([`open`]), one of two paths:
//!
//! * **gateway** (a local Docker environment): one TCP listener for the whole job, bound on
//!   the host side of Docker's default bridge (`docker network inspect bridge`, e.g.
//!   172.17.0.1), which every container on this daemon can route to, Compose project
//!   networks included. The evaluation's [`ModelGateway`] serves it with a token; the agent
//!   gets `OPENAI_BASE_URL`, `OPENAI_API_BASE` and `OPENAI_API_KEY`, and every call is
//!   metered by the host.
//! * **agent_env** (a cloud environment, which cannot reach this machine): the recipe's
//!   `evaluator.agent_env` variables go to the agent as they are. The agent holds the key,
//!   and what it spent is what Harbor reports back.
//!
//! Values never reach a command line or a file: the flags say `--ae NAME=${NAME}`, and
//! Harbor resolves each template from its own process environment when it builds the agent
//! (`harbor/utils/env.py`, `resolve_env_vars`), after writing the templates, not the values,
//! into the job's and trials' config.json. The values travel in [`JobModelAccess::env`].

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::sync::Arc;

use super::job_agent::{JobModelAccess, ModelPath};
use super::options::HarborOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::gateway::{ModelGateway, TrialAccess, TrialModelLog, TrialSettings};

/// The job's gateway listener; [`JobGateway::close`] once the job has finished.
pub struct JobGateway {
    gateway: Arc<dyn ModelGateway>,
    access: TrialAccess,
    /// The address the listener is bound on (the bridge's host side).
    pub host: IpAddr,
}

impl std::fmt::Debug for JobGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret.
        f.debug_struct("JobGateway")
            .field("host", &self.host)
            .field("port", &self.access.port)
            .finish()
    }
}

impl JobGateway {
    /// The port the listener is bound to.
    pub fn port(&self) -> u16 {
        self.access.port
    }

    /// Stop serving the job's listener and return everything its agents did through it.
    pub async fn close(self) -> TrialModelLog {
        self.gateway.close(&self.access).await
    }
}

/// The model half of the job's command line, and the gateway to close after the job.
/// Must be called inside a tokio runtime when the evaluation has a gateway.
pub async fn open(
    settings: &TrialSettings,
    options: &HarborOptions,
    job: &str,
) -> Result<(JobModelAccess, Option<JobGateway>)> {
    let mut out = JobModelAccess::default();
    let mut gateway = None;
    let mut gateway_names: Vec<String> = Vec::new();
    if let Some(gw) = &settings.gateway {
        if options.is_local_docker() {
            let host = bridge_host().await?;
            let listener = TcpListener::bind((host, 0)).map_err(|e| {
                Error::infra(format!(
                    "cannot listen for the model gateway on {host}, the host side of Docker's bridge: {e}"
                ))
                .hint("the harbor engine's docker environment needs the Docker daemon on this machine (not DOCKER_HOST elsewhere), so that its containers can reach the gateway")
            })?;
            let access = gw.open(job, listener).map_err(|e| {
                Error::infra(format!("cannot open the model gateway for job {job}: {e}"))
            })?;
            for (k, v) in access.env_at(&host.to_string()) {
                gateway_names.push(k.clone());
                out.args
                    .extend(["--ae".to_string(), format!("{k}=${{{k}}}")]);
                out.env.push((k, v));
            }
            out.path = ModelPath::Gateway;
            gateway = Some(JobGateway {
                gateway: gw.clone(),
                access,
                host,
            });
        } else if !settings.agent_env.iter().any(|(k, _)| names_a_key(k)) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "the model gateway cannot be reached from Harbor's {:?} environment, and evaluator.agent_env passes no API key to the agent",
                    options.environment()
                ),
            )
            .at("evaluator.agent_env")
            .hint("name the host variables that hold the provider's endpoint and key in evaluator.agent_env (for example OPENAI_API_KEY, OPENAI_BASE_URL), or use evaluator.harbor.environment = docker to go through the gateway"));
        }
    }
    for (k, v) in &settings.agent_env {
        if !is_env_name(k) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("evaluator.agent_env names {k:?}, which is not an environment variable name (letters, digits and `_`, not starting with a digit)"),
            )
            .at("evaluator.agent_env"));
        }
        // The gateway's variables are not the recipe's to override (as on the other engines).
        if gateway_names.contains(k) {
            continue;
        }
        out.args
            .extend(["--ae".to_string(), format!("{k}=${{{k}}}")]);
        out.env.push((k.clone(), v.clone()));
        if out.path == ModelPath::None {
            out.path = ModelPath::AgentEnv;
        }
    }
    Ok((out, gateway))
}

/// Harbor's own test for a secret variable name (`is_sensitive_env_key`), minus AUTH.
fn names_a_key(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL"]
        .iter()
        .any(|w| n.contains(w))
}

fn is_env_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The host side of Docker's default bridge: its IPAM `Gateway`, or, when the daemon does
/// not report one (it does not always), the first address of its subnet, which is where
/// dockerd puts `docker0`.
pub async fn bridge_host() -> Result<IpAddr> {
    let out = tokio::process::Command::new("docker")
        .args([
            "network",
            "inspect",
            "bridge",
            "--format",
            "{{json .IPAM.Config}}",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| Error::infra(format!("cannot run `docker network inspect bridge`: {e}")))?;
    if !out.status.success() {
        return Err(Error::infra(format!(
            "`docker network inspect bridge` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .hint("the model gateway is served on the host side of Docker's default bridge network"));
    }
    parse_bridge_host(&out.stdout).ok_or_else(|| {
        Error::infra("Docker's default bridge network reports no IPv4 gateway or subnet")
            .hint("the model gateway is served on the host side of Docker's default bridge network")
    })
}

fn parse_bridge_host(json: &[u8]) -> Option<IpAddr> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let configs = v.as_array()?;
    for c in configs {
        if let Some(ip) = c["Gateway"]
            .as_str()
            .and_then(|g| g.parse::<Ipv4Addr>().ok())
        {
            return Some(IpAddr::V4(ip));
        }
    }
    for c in configs {
        let Some((net, len)) = c["Subnet"].as_str().and_then(|s| s.split_once('/')) else {
            continue;
        };
        let (Ok(net), Ok(len)) = (net.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
            continue;
        };
        if len < 31 {
            return Some(IpAddr::V4(Ipv4Addr::from(u32::from(net) + 1)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_host_is_its_gateway_or_the_subnets_first_address() {
        assert_eq!(
            parse_bridge_host(br#"[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.9"}]"#),
            Some("172.17.0.9".parse().unwrap())
        );
        assert_eq!(
            parse_bridge_host(br#"[{"Subnet":"fd00::/64"},{"Subnet":"172.18.0.0/16"}]"#),
            Some("172.18.0.1".parse().unwrap())
        );
        assert_eq!(parse_bridge_host(b"[]"), None);
        assert_eq!(parse_bridge_host(b"null"), None);
    }

    #[tokio::test]
    async fn no_model_passes_nothing_and_agent_env_passes_templates() {
        let (a, g) = open(&TrialSettings::default(), &HarborOptions::default(), "j")
            .await
            .unwrap();
        assert_eq!(a, JobModelAccess::default());
        assert!(g.is_none());
        let settings = TrialSettings {
            agent_env: vec![("MY_API_KEY".into(), "sk-secret".into())],
            ..TrialSettings::default()
        };
        let cloud = HarborOptions {
            environment: Some("daytona".into()),
            ..HarborOptions::default()
        };
        let (a, _) = open(&settings, &cloud, "j").await.unwrap();
        assert_eq!(a.path, ModelPath::AgentEnv);
        assert_eq!(a.args, ["--ae", "MY_API_KEY=${MY_API_KEY}"]);
        assert_eq!(a.env, [("MY_API_KEY".into(), "sk-secret".into())]);
        assert!(!a.args.concat().contains("sk-secret"));
        let bad = TrialSettings {
            agent_env: vec![("1X".into(), "v".into())],
            ..TrialSettings::default()
        };
        let e = open(&bad, &cloud, "j").await.unwrap_err();
        assert_eq!(e.location.as_deref(), Some("evaluator.agent_env"));
    }
}
