//! The `docker` engine: the Docker Engine API via bollard, against the local daemon or
//! `DOCKER_HOST`.
//!
//! Per trial: build the task image from `environment/` with the classic builder (resolves
//! `FROM` from the local store first, no forced pull; tagged by the content digest of `environment/`)
//! or use `[environment].docker_image`; create a container (`sh -c "sleep infinity"`, image
//! entrypoint kept, `init`, network `none` unless the task allows the network, NanoCpus and
//! Memory from the task); copy files in and out with tar archives; run the agent, then the
//! verifier, each as its own process group inside the container with the task's timeout; on a timeout
//! the process group is killed and the trial ends, so the container, and everything in it, is
//! removed. The container is removed on every path: success, error, timeout, and when the trial
//! future is dropped (Ctrl-C), through a drop guard that removes it from a helper thread.
//!
//! Under the model gateway, a command agent's gateway listener is bound on `127.0.0.1`
//! inside the container's own network namespace (still `none`, so that address is all it
//! can reach), joined through `/proc/<pid>/ns/net` of the container's first process; this
//! needs evolve to run as root on the Docker host.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::local::{finish_with_reward, resolve_template};
use super::metered::{self, GatewaySession, Records, Timeouts};
use super::reach;
use super::{BoxFuture, Engine, TrialRequest, classify_error, failed_trial};
use crate::agent::{AgentEntry, AgentSpec, Program};
use crate::error::{Error, ErrorKind, Result};
use crate::result::{Isolation, TimeoutOwner, TrialError, TrialLogs, TrialResult, TrialStatus};

/// Label put on every container this engine creates (value: the trial name).
pub const TRIAL_LABEL: &str = "dev.evolve.trial";
/// Label naming the process that created the container (see [`Owner`]).
pub const OWNER_LABEL: &str = "dev.evolve.owner";
/// Cap on what one copy-out may extract.
const COPY_OUT_CAP: u64 = 256 << 20;

/// The Docker engine.
pub struct DockerEngine {
    docker: Docker,
    build_locks: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Tags built by this engine instance (each is built once per process; the builder's
    /// cache makes that cheap and picks up a changed base image).
    built: std::sync::Mutex<std::collections::HashSet<String>>,
}

fn docker_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::infra(format!("docker: {what}: {e}"))
}

/// Shell-quote one word for `bash -c`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl DockerEngine {
    /// Connect to `DOCKER_HOST` or the local socket and check the daemon answers.
    pub async fn connect() -> Result<DockerEngine> {
        let docker = Docker::connect_with_defaults().map_err(|e| {
            docker_err("cannot connect", e).hint("start the Docker daemon or set DOCKER_HOST")
        })?;
        match tokio::time::timeout(Duration::from_secs(10), docker.ping()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(docker_err("daemon does not answer", e)
                    .hint("is the Docker daemon running? (`docker info`)"));
            }
            Err(_) => return Err(docker_err("daemon does not answer", "timed out after 10 s")),
        }
        reap_orphans(&docker).await;
        Ok(DockerEngine {
            docker,
            build_locks: Default::default(),
            built: Default::default(),
        })
    }

    /// The underlying client (used by tests and tooling).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    async fn ensure_image(&self, req: &TrialRequest) -> Result<String> {
        let task = &req.task;
        if let Some(img) = &task.config.environment.docker_image {
            if self.docker.inspect_image(img).await.is_ok() {
                return Ok(img.clone());
            }
            return Err(Error::infra(format!(
                "image {img:?} ([environment].docker_image) is not present on the Docker host"
            ))
            .hint("pull or load it first (`docker pull`/`docker load`); this engine does not pull named images"));
        }
        let env_dir = task.dir.join("environment");
        if !env_dir.join("Dockerfile").is_file() {
            return Err(Error::invalid_task(
                "environment/ has no Dockerfile and no [environment].docker_image is set",
            )
            .at_path(&env_dir));
        }
        if ["docker-compose.yaml", "docker-compose.yml"]
            .iter()
            .any(|f| env_dir.join(f).exists())
        {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "environment/docker-compose.yaml (sidecars) is not supported by the docker engine",
            )
            .hint("use --engine harbor"));
        }
        let digest = crate::digest::task_digest(&env_dir)?;
        let tag = format!("evolve-hb__{}:latest", &digest["sha256:".len()..][..32]);
        let lock = self
            .build_locks
            .lock()
            .await
            .entry(tag.clone())
            .or_default()
            .clone();
        let _g = lock.lock().await;
        if self.built.lock().is_ok_and(|b| b.contains(&tag)) {
            return Ok(tag);
        }
        let tar = tar_dir(&env_dir)?;
        let opts = BuildImageOptionsBuilder::new()
            .dockerfile("Dockerfile")
            .t(&tag)
            .rm(true)
            .forcerm(true)
            .build();
        let mut log = String::new();
        let build = async {
            let mut s = self
                .docker
                .build_image(opts, None, Some(bollard::body_full(tar.into())));
            while let Some(item) = s.next().await {
                let info = item.map_err(|e| docker_err("image build failed", e))?;
                if let Some(s) = info.stream {
                    log.push_str(&s);
                }
                if let Some(d) = info.error_detail {
                    return Err(Error::infra(format!(
                        "docker: image build failed: {}",
                        d.message.unwrap_or_default()
                    )));
                }
            }
            Ok(())
        };
        let limit = Duration::from_secs_f64(task.config.environment.build_timeout_sec);
        let res = tokio::time::timeout(limit, build).await;
        let _ = std::fs::write(req.trial_dir.join("build.log"), &log);
        match res {
            Err(_) => Err(Error::infra(format!(
                "docker: image build ran past [environment].build_timeout_sec = {} s",
                task.config.environment.build_timeout_sec
            ))),
            Ok(Err(e)) => Err(e.at_path(&env_dir)),
            Ok(Ok(())) => {
                if let Ok(mut b) = self.built.lock() {
                    b.insert(tag.clone());
                }
                Ok(tag)
            }
        }
    }

    /// Run `cmd` with `bash -c` (its own process group); on timeout kill the group.
    /// Returns (exit code, timed out).
    async fn exec(
        &self,
        id: &str,
        cmd: &str,
        user: Option<&str>,
        env: &[String],
        timeout: Option<Duration>,
    ) -> Result<(Option<i64>, bool)> {
        let tag = format!("{:x}", rand_u64());
        let pidfile = format!("/tmp/.evolve-exec-{tag}.pid");
        // A `docker exec` process is already its own session and process-group leader
        // (pid = pgid = sid), so its pid names the group to kill on timeout.
        let wrapped = format!("echo $$ > {pidfile}; exec bash -c {}", sh_quote(cmd));
        let opts = CreateExecOptions {
            cmd: Some(vec!["bash".to_string(), "-c".to_string(), wrapped]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            env: Some(env.to_vec()),
            user: user.map(str::to_string),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(id, opts)
            .await
            .map_err(|e| docker_err("exec create failed", e))?;
        let run = async {
            match self
                .docker
                .start_exec(
                    &created.id,
                    Some(StartExecOptions {
                        detach: false,
                        tty: false,
                        output_capacity: Some(1 << 16),
                    }),
                )
                .await
            {
                Ok(StartExecResults::Attached { mut output, .. }) => {
                    while output.next().await.is_some() {}
                }
                Ok(StartExecResults::Detached) => {}
                Err(e) => return Err(docker_err("exec start failed", e)),
            }
            for _ in 0..200 {
                let i = self
                    .docker
                    .inspect_exec(&created.id)
                    .await
                    .map_err(|e| docker_err("exec inspect failed", e))?;
                if i.running != Some(true)
                    && let Some(code) = i.exit_code
                {
                    return Ok(Some(code));
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Ok(None)
        };
        let out = match timeout {
            Some(t) => tokio::time::timeout(t, run).await.ok(),
            None => Some(run.await),
        };
        match out {
            Some(r) => Ok((r?, false)),
            None => {
                // Really stop it: kill the session's process group from a second exec.
                let kill = format!("kill -KILL -- -$(cat {pidfile}) 2>/dev/null; true");
                let _ = Box::pin(self.exec_simple(id, &kill)).await;
                Ok((None, true))
            }
        }
    }

    async fn exec_simple(&self, id: &str, cmd: &str) -> Result<i64> {
        let opts = CreateExecOptions {
            cmd: Some(vec!["bash".to_string(), "-c".to_string(), cmd.to_string()]),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            user: Some("root".to_string()),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(id, opts)
            .await
            .map_err(|e| docker_err("exec create failed", e))?;
        if let Ok(StartExecResults::Attached { mut output, .. }) =
            self.docker.start_exec(&created.id, None).await
        {
            while output.next().await.is_some() {}
        }
        for _ in 0..200 {
            let i = self
                .docker
                .inspect_exec(&created.id)
                .await
                .map_err(|e| docker_err("exec inspect failed", e))?;
            if i.running != Some(true)
                && let Some(code) = i.exit_code
            {
                return Ok(code);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        Err(Error::infra(format!(
            "docker: exec {cmd:?} did not report an exit code"
        )))
    }

    async fn root(&self, id: &str, cmd: &str) -> Result<()> {
        let code = self.exec_simple(id, cmd).await?;
        if code != 0 {
            return Err(Error::infra(format!(
                "docker: `{cmd}` exited with {code} in the container"
            )));
        }
        Ok(())
    }

    async fn upload(&self, id: &str, src: &Path, dest: &str) -> Result<()> {
        self.root(id, &format!("mkdir -p {}", sh_quote(dest)))
            .await?;
        let tar = tar_dir(src)?;
        let opts = UploadToContainerOptionsBuilder::new().path(dest).build();
        self.docker
            .upload_to_container(id, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(|e| docker_err(&format!("copy into {dest} failed"), e))
    }

    async fn download(&self, id: &str, src: &str, dest: &Path) -> Result<Vec<String>> {
        let opts = DownloadFromContainerOptionsBuilder::new().path(src).build();
        let mut s = self.docker.download_from_container(id, Some(opts));
        let mut buf = Vec::new();
        while let Some(chunk) = s.next().await {
            let c = chunk.map_err(|e| docker_err(&format!("copy out of {src} failed"), e))?;
            buf.extend_from_slice(&c);
            if buf.len() as u64 > COPY_OUT_CAP {
                return Err(Error::infra(format!(
                    "docker: {src} is larger than {COPY_OUT_CAP} bytes"
                )));
            }
        }
        extract_safely(&buf, dest)
    }

    async fn create(&self, req: &TrialRequest, image: &str) -> Result<ContainerGuard> {
        let task = &req.task;
        let env_cfg = &task.config.environment;
        let mut env = Vec::new();
        for (k, v) in &env_cfg.env {
            let r = resolve_template(v)
                .map_err(|m| Error::invalid_task(format!("[environment].env.{k}: {m}")))?;
            env.push(format!("{k}={r}"));
        }
        let host_config = HostConfig {
            network_mode: Some(if task.config.network_allowed() {
                "bridge".into()
            } else {
                "none".into()
            }),
            nano_cpus: env_cfg.cpus.map(|c| (c * 1e9) as i64),
            memory: env_cfg.memory_mb.map(|m| (m as i64) * 1024 * 1024),
            init: Some(true),
            ..Default::default()
        };
        let name = format!(
            "evolve-{}-{:x}",
            sanitize(&crate::result::trial_name(&task.name, req.repetition)),
            rand_u64()
        );
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: Some(vec!["sh".into(), "-c".into(), "sleep infinity".into()]),
            env: Some(env),
            working_dir: env_cfg.workdir.clone(),
            labels: Some(HashMap::from([
                (
                    TRIAL_LABEL.to_string(),
                    crate::result::trial_name(&task.name, req.repetition),
                ),
                (OWNER_LABEL.to_string(), Owner::current().label()),
            ])),
            host_config: Some(host_config),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| docker_err("cannot create the container", e))?;
        let guard = ContainerGuard {
            docker: self.docker.clone(),
            id: created.id.clone(),
            armed: true,
        };
        self.docker
            .start_container(&created.id, None)
            .await
            .map_err(|e| docker_err("cannot start the container", e))?;
        Ok(guard)
    }

    async fn trial(
        &self,
        req: &TrialRequest,
        guard_slot: &mut Option<ContainerGuard>,
    ) -> Result<TrialResult> {
        let task = &req.task;
        let started = Instant::now();
        if task.config.environment.gpus.is_some_and(|g| g > 0) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "GPU tasks are not supported by the docker engine",
            ));
        }
        let timeouts = Timeouts::of(task, &req.settings)?;
        let gated = req.settings.gateway.is_some()
            && matches!(req.agent.as_ref(), AgentSpec::Target(m) if matches!(m.entry, AgentEntry::Command(_)));
        if gated && !super::contain::running_as_root() {
            return Err(Error::infra(format!(
                "this trial's agent reaches its model through the gateway, which the docker engine serves inside the container's own network namespace, and evolve runs as uid {}, not root, so it cannot enter it",
                rustix::process::geteuid().as_raw()
            ))
            .hint("run evolve as root on the Docker host"));
        }
        let image = self.ensure_image(req).await?;
        let guard = self.create(req, &image).await?;
        let id = guard.id.clone();
        *guard_slot = Some(guard);
        let agent_dir = req.trial_dir.join("agent");
        let verifier_dir = req.trial_dir.join("verifier");
        for d in [&agent_dir, &verifier_dir] {
            std::fs::create_dir_all(d).map_err(|e| Error::io("cannot create", d, e))?;
        }
        let mut result = TrialResult {
            task: task.name.clone(),
            repetition: req.repetition,
            trial_name: crate::result::trial_name(&task.name, req.repetition),
            engine: "docker".into(),
            status: TrialStatus::InfrastructureFailed,
            timeout_owner: None,
            reward: None,
            rewards: Default::default(),
            cost_usd: None,
            error: None,
            agent_exit_code: None,
            usage: None,
            agent_usage: None,
            phases: None,
            attempts: Vec::new(),
            wall_time_sec: 0.0,
            logs: TrialLogs {
                trial_dir: req.trial_dir.clone(),
                agent_dir: agent_dir.clone(),
                verifier_dir: verifier_dir.clone(),
                trajectory: None,
            },
            isolation: Some(Isolation {
                network: if task.config.network_allowed() {
                    "host".into()
                } else {
                    "container_none".into()
                },
                processes: "container".into(),
                filesystem: "container".into(),
                user: "container".into(),
            }),
        };
        let session_name = metered::attempt_name(&req.trial_dir, &result.trial_name);
        // Wait until the container answers, then prepare /logs.
        let mut ready = false;
        for _ in 0..100 {
            if self.exec_simple(&id, "true").await.is_ok_and(|c| c == 0) {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !ready {
            return Err(Error::infra(
                "docker: the container did not become ready (does the image have bash?)",
            ));
        }
        self.root(&id, "mkdir -p /logs/verifier /logs/agent /logs/artifacts && chmod 777 /logs/verifier /logs/agent /logs/artifacts").await?;

        // ---- agent
        let (cmd, mut env) = match req.agent.as_ref() {
            AgentSpec::Oracle => {
                if !task.has_solution() {
                    return Err(Error::invalid_task(format!(
                        "task {:?} has no solution/solve.sh; the oracle agent needs it",
                        task.name
                    )));
                }
                self.upload(&id, &task.dir.join("solution"), "/solution")
                    .await?;
                self.root(&id, "chmod +x /solution/solve.sh").await?;
                let mut env = vec!["DEBIAN_FRONTEND=noninteractive".to_string()];
                for (k, v) in &task.config.solution.env {
                    let r = resolve_template(v)
                        .map_err(|m| Error::invalid_task(format!("[solution].env.{k}: {m}")))?;
                    env.push(format!("{k}={r}"));
                }
                (
                    "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1".to_string(),
                    env,
                )
            }
            AgentSpec::Target(m) => match &m.entry {
                AgentEntry::Command(argv) => {
                    self.upload(&id, &m.dir, "/installed-agent").await?;
                    let instr = req.trial_dir.join("instruction.md");
                    std::fs::write(&instr, &task.instruction)
                        .map_err(|e| Error::io("cannot write", &instr, e))?;
                    let tmp = req.trial_dir.join("instruction");
                    std::fs::create_dir_all(&tmp)
                        .map_err(|e| Error::io("cannot create", &tmp, e))?;
                    std::fs::copy(&instr, tmp.join("instruction.md"))
                        .map_err(|e| Error::io("cannot copy", &instr, e))?;
                    self.upload(&id, &tmp, "/installed-agent/.evolve").await?;
                    let words: Vec<String> = argv
                        .iter()
                        .enumerate()
                        .map(|(i, a)| {
                            let a = if i == 0
                                && let Some(Program::Shipped(rel)) = m.entry.program()
                            {
                                format!("/installed-agent/{rel}")
                            } else {
                                a.clone()
                            };
                            sh_quote(&a)
                        })
                        .collect();
                    let mut env: Vec<String> =
                        m.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    env.push("EVOLVE_AGENT_DIR=/installed-agent".into());
                    env.push("EVOLVE_APP_DIR=/app".into());
                    env.push("EVOLVE_AGENT_LOGS_DIR=/logs/agent".into());
                    if task.instruction.len() <= 100_000 {
                        env.push(format!("EVOLVE_INSTRUCTION={}", task.instruction));
                    }
                    (
                        format!(
                            "({}) < /installed-agent/.evolve/instruction.md > /logs/agent/agent.txt 2>&1",
                            words.join(" ")
                        ),
                        env,
                    )
                }
                AgentEntry::Harbor { .. } => return Err(crate::agent::harbor_only()),
                AgentEntry::Component { .. } => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        "WASI component agents run on the local engine only",
                    )
                    .hint("use --engine local"));
                }
            },
        };
        env.extend(
            req.settings
                .agent_env
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        let session = match &req.settings.gateway {
            Some(gw) if gated => {
                let listener = self.gateway_listener(&id).await?;
                let s = GatewaySession::open(gw, &session_name, listener)?;
                env.extend(s.env().into_iter().map(|(k, v)| format!("{k}={v}")));
                Some(s)
            }
            _ => None,
        };
        env.retain(|e| !e.is_empty());
        let ran = self.exec(&id, &cmd, None, &env, timeouts.agent).await;
        let _ = self.download(&id, "/logs/agent", &agent_dir).await;
        // The agent's process group is gone; whatever it left behind in the container can no
        // longer reach the gateway once this returns.
        let metered = match session {
            Some(s) => Some(s.close().await),
            None => None,
        };
        if metered.is_some()
            && let Some(iso) = result.isolation.as_mut()
        {
            iso.network = if task.config.network_allowed() {
                "host"
            } else {
                "container_none:gateway_only"
            }
            .into();
        }
        let after = match ran {
            Ok(out) => {
                let budget_out = metered.as_ref().is_some_and(|m| m.budget_exhausted);
                self.after_agent(&id, req, &mut result, out, budget_out, &timeouts)
                    .await
            }
            Err(e) => Err(e),
        };
        Ok(metered::finish(
            result,
            after,
            started,
            Records {
                trial_dir: &req.trial_dir,
                agent_logs: &agent_dir,
                session: &session_name,
                agent: &req.agent,
                instruction: &task.instruction,
            },
            metered.as_ref(),
        ))
    }

    /// The agent's exit and timeout, then (unless the budget ran out, which makes the trial
    /// unscored anyway) the verifier.
    async fn after_agent(
        &self,
        id: &str,
        req: &TrialRequest,
        result: &mut TrialResult,
        (code, timed_out): (Option<i64>, bool),
        budget_out: bool,
        timeouts: &Timeouts,
    ) -> Result<()> {
        let task = &req.task;
        let agent_dir = result.logs.agent_dir.clone();
        let verifier_dir = result.logs.verifier_dir.clone();
        result.agent_exit_code = code.map(|c| c as i32);
        if let Some(c) = code
            && c != 0
        {
            let _ = std::fs::write(agent_dir.join("exit-code.txt"), format!("{c}\n"));
        }
        if timed_out {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Agent);
            result.error = Some(TrialError::new(
                "agent_timeout",
                format!(
                    "agent ran past {}; its process group was killed and the container removed",
                    timeouts.agent_text(task)
                ),
            ));
            return Ok(());
        }
        if budget_out {
            return Ok(());
        }

        // ---- verifier
        self.root(
            id,
            "rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json",
        )
        .await?;
        self.upload(id, &task.dir.join("tests"), "/tests").await?;
        self.root(id, "chmod +x /tests/test.sh").await?;
        let mut venv = Vec::new();
        for (k, v) in &task.config.verifier.env {
            let r = resolve_template(v)
                .map_err(|m| Error::invalid_task(format!("[verifier].env.{k}: {m}")))?;
            venv.push(format!("{k}={r}"));
        }
        venv.extend(
            req.settings
                .verifier_env
                .iter()
                .map(|(k, v)| format!("{k}={v}")),
        );
        let (_, timed_out) = self
            .exec(
                id,
                "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1",
                None,
                &venv,
                timeouts.verifier,
            )
            .await?;
        let _ = self.download(id, "/logs/verifier", &verifier_dir).await;
        if timed_out {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Verifier);
            result.error = Some(TrialError::new(
                "verifier_timeout",
                format!(
                    "tests/test.sh ran past {}; its process group was killed and the container removed",
                    timeouts.verifier_text(task)
                ),
            ));
            return Ok(());
        }
        finish_with_reward(result, &verifier_dir);
        Ok(())
    }

    /// A listener on `127.0.0.1` inside the container's own network namespace, for the
    /// model gateway: reached through `/proc/<pid>` of the container's first process, which
    /// must be the `sleep infinity` this engine started (a daemon on another machine, or in
    /// another PID namespace, shows no such process here).
    async fn gateway_listener(&self, id: &str) -> Result<std::net::TcpListener> {
        let info = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| docker_err("cannot inspect the container", e))?;
        let pid = info
            .state
            .and_then(|s| s.pid)
            .filter(|p| *p > 0)
            .ok_or_else(|| Error::infra("docker: the container reports no process id"))?;
        let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.windows(14).any(|w| w == b"sleep infinity"));
        if !ours {
            return Err(Error::infra(format!(
                "docker: the container's process {pid} is not visible in this machine's /proc, so the model gateway cannot listen inside the container"
            ))
            .hint("run evolve on the Docker host itself (not against a remote or rootless daemon), as root"));
        }
        reach::inside(Path::new(&format!("/proc/{pid}/ns/net"))).map_err(|e| {
            Error::infra(format!(
                "docker: cannot listen inside the container's network namespace for the model gateway: {e}"
            ))
            .hint("the docker engine's model gateway needs evolve to run as root on the Docker host")
        })
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(48)
        .collect()
}

/// Tar a directory (deterministic headers: uid/gid 0, fixed mtime, 0644/0755 modes;
/// symlinks stored as symlinks, never followed).
pub fn tar_dir(src: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    b.append_dir_all(".", src)
        .map_err(|e| Error::io("cannot archive", src, e))?;
    b.into_inner()
        .map_err(|e| Error::io("cannot archive", src, e))
}

/// Extract a tar from the Docker archive API into `dest`, stripping the top-level directory.
/// Only regular files and directories are written; absolute names, `..` components, links and
/// special files are refused (listed in the returned warnings, never written).
pub fn extract_safely(tar_bytes: &[u8], dest: &Path) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let mut ar = tar::Archive::new(tar_bytes);
    let entries = ar
        .entries()
        .map_err(|e| Error::infra(format!("malformed tar from the container: {e}")))?;
    let mut total = 0u64;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| Error::infra(format!("malformed tar from the container: {e}")))?;
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let path = PathBuf::from(&name);
        let mut parts = Vec::new();
        let mut bad = false;
        for c in path.components() {
            match c {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => {}
                _ => bad = true,
            }
        }
        if bad {
            warnings.push(format!("refused tar entry {name:?}: absolute or `..` path"));
            continue;
        }
        if parts.len() <= 1 {
            continue; // the top-level directory itself
        }
        let rel: PathBuf = parts[1..].iter().collect();
        let target = dest.join(&rel);
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(|e| Error::io("cannot create", &target, e))?;
        } else if kind.is_file() {
            // Parents must be real directories we created (never a symlink).
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::io("cannot create", parent, e))?;
                if std::fs::symlink_metadata(parent).is_ok_and(|m| !m.is_dir()) {
                    warnings.push(format!(
                        "refused tar entry {name:?}: parent is not a directory"
                    ));
                    continue;
                }
            }
            let mut data = Vec::new();
            entry
                .read_to_end(&mut data)
                .map_err(|e| Error::infra(format!("malformed tar from the container: {e}")))?;
            total += data.len() as u64;
            if total > COPY_OUT_CAP {
                return Err(Error::infra("copy-out larger than the cap"));
            }
            let _ = std::fs::remove_file(&target);
            std::fs::write(&target, &data).map_err(|e| Error::io("cannot write", &target, e))?;
        } else {
            warnings.push(format!(
                "refused tar entry {name:?}: {kind:?} (only files and directories are copied out)"
            ));
        }
    }
    Ok(warnings)
}

/// The process that created a container: its machine's boot id, its pid and its start
/// time (which tells the process from a later one that reuses the pid).
///
/// A handled signal removes the trial's containers on the way out, but SIGKILL cannot be
/// handled: its containers would keep running (and spending) for ever. So every engine
/// removes, when it connects, the containers whose owner on this machine is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    boot_id: String,
    pid: u32,
    start_time: String,
}

impl Owner {
    fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            boot_id: boot_id(),
            pid,
            start_time: start_time(pid).unwrap_or_default(),
        }
    }

    fn label(&self) -> String {
        format!("{}:{}:{}", self.boot_id, self.pid, self.start_time)
    }

    fn parse(label: &str) -> Option<Owner> {
        let mut parts = label.splitn(3, ':');
        Some(Owner {
            boot_id: parts.next()?.to_string(),
            pid: parts.next()?.parse().ok()?,
            start_time: parts.next()?.to_string(),
        })
    }

    /// Whether this owner ran on this machine (since its last boot) and has exited. An
    /// owner on another machine sharing the daemon is never judged gone.
    fn is_gone(&self) -> bool {
        !self.boot_id.is_empty()
            && self.boot_id == boot_id()
            && start_time(self.pid).as_deref() != Some(self.start_time.as_str())
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time, in clock ticks since boot.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from its end.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19).map(str::to_string)
}

/// Remove every trial container whose owning `evolve` is gone (see [`Owner`]).
/// Best effort: a daemon that cannot list or remove is reported by the trial itself.
async fn reap_orphans(docker: &Docker) {
    let filters = HashMap::from([("label", vec![OWNER_LABEL])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(Ok(containers)) =
        tokio::time::timeout(Duration::from_secs(10), docker.list_containers(Some(opts))).await
    else {
        return;
    };
    for c in containers {
        let gone = c
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
            .and_then(|v| Owner::parse(v))
            .is_some_and(|o| o.is_gone());
        if let (true, Some(id)) = (gone, c.id) {
            let opts = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            let _ = docker.remove_container(&id, Some(opts)).await;
        }
    }
}

/// Removes its container when dropped while armed (errors, panics, cancelled futures).
pub struct ContainerGuard {
    docker: Docker,
    pub id: String,
    armed: bool,
}

impl ContainerGuard {
    /// Remove the container now (awaited) and disarm.
    pub async fn remove(mut self) -> Result<()> {
        self.armed = false;
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        self.docker
            .remove_container(&self.id, Some(opts))
            .await
            .map_err(|e| docker_err("cannot remove the container", e))
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let docker = self.docker.clone();
        let id = std::mem::take(&mut self.id);
        // A fresh runtime on a helper thread: works even while the caller's runtime shuts down.
        let h = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async move {
                    let opts = RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .v(true)
                        .build();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(30),
                        docker.remove_container(&id, Some(opts)),
                    )
                    .await;
                });
            }
        });
        let _ = h.join();
    }
}

impl Engine for DockerEngine {
    fn name(&self) -> &'static str {
        "docker"
    }
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            let mut guard = None;
            let r = self.trial(req, &mut guard).await;
            let removal = match guard {
                Some(g) => g.remove().await,
                None => Ok(()),
            };
            match (r, removal) {
                (Ok(t), Ok(())) => t,
                (Ok(mut t), Err(e)) => {
                    // The result stands, but say the cleanup failed.
                    let note = format!("container removal failed: {e}");
                    t.error
                        .get_or_insert_with(|| TrialError::new("engine_error", note.clone()));
                    t
                }
                (Err(e), _) => {
                    let (status, err) = classify_error(&e);
                    failed_trial(req, "docker", status, err)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_gone_only_when_it_ran_here_and_exited() {
        let me = Owner::current();
        assert_eq!(Owner::parse(&me.label()), Some(me.clone()));
        assert!(!me.is_gone(), "this process is alive");
        let reused_pid = Owner {
            start_time: "1".into(),
            ..me.clone()
        };
        assert!(reused_pid.is_gone(), "same pid, another process");
        let elsewhere = Owner {
            boot_id: "another-machine".into(),
            start_time: "1".into(),
            ..me
        };
        assert!(!elsewhere.is_gone(), "never judged from another machine");
        assert_eq!(Owner::parse("no-colons"), None);
    }
}
