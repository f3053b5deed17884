//! Running one phase (agent or verifier) as a contained process tree.
//!
//! Containment, strongest available first (probed once per process):
//! 1. `unshare --pid --fork --kill-child --mount-proc [--net]` (as root, or inside a user
//!    namespace with `--user --map-root-user`): the phase is PID 1 of a fresh PID namespace,
//!    so when it exits or is killed the kernel kills every process in it, including
//!    daemonized grandchildren that called `setsid`. Its mount namespace hides the task
//!    sources under empty tmpfs mounts; `--net` gives it a network namespace with no
//!    interfaces.
//! 2. Fallback: its own process group (killed as a group), plus a scan of `/proc` for
//!    processes whose environment carries the phase's marker variable (`EVOLVE_TRIAL_MARKER`),
//!    which catches children that left the group with `setsid`.
//!
//! Both layers always run: after every phase the group is killed and `/proc` is scanned.
//! Output (stdout and stderr merged) is written to a log file, capped; the rest is drained.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// Which containment this machine offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxLevel {
    /// unshare works directly (root).
    Unshare,
    /// unshare works inside a user namespace.
    UnshareUserNs,
    /// Process group + /proc scan only.
    None,
}

fn probe(extra: &[&str]) -> bool {
    let mut c = std::process::Command::new("unshare");
    c.args(extra)
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--net",
            "--",
            "/bin/sh",
            "-c",
            "mount -t tmpfs evolve-probe /mnt 2>/dev/null || mount -t tmpfs evolve-probe /tmp",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.status().is_ok_and(|s| s.success())
}

/// The containment level of this machine (probed once).
pub fn sandbox_level() -> SandboxLevel {
    static LEVEL: OnceLock<SandboxLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        if std::env::var_os("EVOLVE_LOCAL_NO_UNSHARE").is_some() {
            SandboxLevel::None
        } else if probe(&[]) {
            SandboxLevel::Unshare
        } else if probe(&["--user", "--map-root-user"]) {
            SandboxLevel::UnshareUserNs
        } else {
            SandboxLevel::None
        }
    })
}

/// One phase to run.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    /// Merged stdout+stderr log.
    pub log: PathBuf,
    pub log_cap: u64,
    /// Run in a network namespace with no interfaces.
    pub deny_network: bool,
    /// Host directories to cover with an empty tmpfs for this phase.
    pub hide: Vec<PathBuf>,
    /// Unique marker value for `EVOLVE_TRIAL_MARKER`.
    pub marker: String,
}

/// What happened.
#[derive(Debug, Clone)]
pub struct PhaseOutcome {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub wall: Duration,
    /// Bytes of output dropped past the cap.
    pub truncated: u64,
}

const HIDE_SCRIPT: &str = r#"while [ "$1" != "--" ]; do if [ -d "$1" ]; then mount -t tmpfs -o size=4k,mode=000 evolve-hidden "$1" || { echo "evolve-sandbox: cannot hide $1" >&2; exit 125; }; fi; shift; done; shift; exec "$@""#;

fn build_argv(spec: &PhaseSpec, level: SandboxLevel) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if level != SandboxLevel::None {
        v.push("unshare".into());
        if level == SandboxLevel::UnshareUserNs {
            v.extend(["--user".into(), "--map-root-user".into()]);
        }
        v.extend(["--pid", "--fork", "--kill-child", "--mount-proc"].map(String::from));
        if spec.deny_network {
            v.push("--net".into());
        }
        v.extend(["--", "/bin/sh", "-c", HIDE_SCRIPT, "evolve-sandbox"].map(String::from));
        // Outermost directories only: once a parent is covered, its children are gone.
        let mut hide: Vec<&PathBuf> = spec.hide.iter().filter(|h| h.is_dir()).collect();
        hide.sort();
        hide.dedup();
        let mut kept: Vec<&PathBuf> = Vec::new();
        for h in hide {
            if !kept.iter().any(|k| h.starts_with(k)) {
                kept.push(h);
            }
        }
        v.extend(kept.iter().map(|h| h.to_string_lossy().into_owned()));
        v.push("--".into());
    }
    v.extend(spec.argv.iter().cloned());
    v
}

/// Kill every process whose environment carries `EVOLVE_TRIAL_MARKER=<marker>`; returns how
/// many were signalled.
pub fn kill_marked(marker: &str) -> usize {
    let needle = format!("EVOLVE_TRIAL_MARKER={marker}");
    let me = std::process::id();
    let mut n = 0;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for ent in rd.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid as u32 == me {
            continue;
        }
        let Ok(env) = std::fs::read(ent.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
            && let Some(p) = Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(p, Signal::KILL);
            n += 1;
        }
    }
    n
}

/// Whether a live (non-zombie) process carries the marker.
pub fn marked_alive(marker: &str) -> bool {
    let needle = format!("EVOLVE_TRIAL_MARKER={marker}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return false;
    };
    rd.flatten().any(|ent| {
        let p = ent.path();
        let zombie = std::fs::read_to_string(p.join("stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        !zombie
            && std::fs::read(p.join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
    })
}

fn kill_group(pgid: u32) {
    if let Some(p) = Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(p, Signal::KILL);
    }
}

fn pump(mut r: std::io::PipeReader, log: &Path, cap: u64) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(log).ok();
    let mut written = 0u64;
    let mut dropped = 0u64;
    let mut buf = [0u8; 16384];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(written) as usize;
                let take = n.min(room);
                if take > 0
                    && let Some(f) = f.as_mut()
                {
                    let _ = f.write_all(&buf[..take]);
                }
                written += take as u64;
                dropped += (n - take) as u64;
            }
        }
    }
    if dropped > 0
        && let Some(f) = f.as_mut()
    {
        let _ = writeln!(
            f,
            "\n[evolve: output capped at {cap} bytes; {dropped} bytes dropped]"
        );
    }
    dropped
}

/// Run a phase to completion or timeout; the whole process tree is gone when this returns.
pub async fn run_phase(spec: &PhaseSpec) -> std::io::Result<PhaseOutcome> {
    run_phase_at(spec, sandbox_level()).await
}

/// [`run_phase`] with the containment `level` chosen by the caller (tests use the
/// fallback, which every machine has).
async fn run_phase_at(spec: &PhaseSpec, level: SandboxLevel) -> std::io::Result<PhaseOutcome> {
    let argv = build_argv(spec, level);
    let (reader, writer) = std::io::pipe()?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("EVOLVE_TRIAL_MARKER", &spec.marker)
        .stdout(Stdio::from(writer.try_clone()?))
        .stderr(Stdio::from(writer))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .process_group(0)
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    drop(cmd); // closes our copies of the pipe's write end
    let pgid = child.id().unwrap_or(0);
    let reap = ReapOnDrop {
        pgid,
        marker: spec.marker.clone(),
    };
    let log = spec.log.clone();
    let cap = spec.log_cap;
    let pump = tokio::task::spawn_blocking(move || pump(reader, &log, cap));
    if let (Some(data), Some(mut stdin)) = (spec.stdin.clone(), child.stdin.take()) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(&data).await;
        });
    }
    let waited = match spec.timeout {
        Some(t) => tokio::time::timeout(t, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };
    let wall = started.elapsed();
    let (exit_code, timed_out) = match waited {
        Some(Ok(st)) => (st.code(), false),
        Some(Err(e)) => {
            cleanup(pgid, &spec.marker).await;
            return Err(e);
        }
        None => (None, true),
    };
    cleanup(pgid, &spec.marker).await;
    std::mem::forget(reap); // cleaned up above
    let _ = child.wait().await;
    // Every writer is dead now; give the pump a moment to drain.
    let truncated = tokio::time::timeout(Duration::from_secs(5), pump)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or(0);
    Ok(PhaseOutcome {
        exit_code,
        timed_out,
        wall,
        truncated,
    })
}

/// Kills a phase's process tree if the phase's future is dropped before it finished (the
/// run was cancelled with Ctrl-C, or the caller's own deadline fired): the trial runs in
/// its own process group, so neither the terminal's SIGINT nor `kill_on_drop` (which
/// kills only the direct child) would reach its descendants.
struct ReapOnDrop {
    pgid: u32,
    marker: String,
}

impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        if self.pgid != 0 {
            kill_group(self.pgid);
        }
        kill_marked(&self.marker);
    }
}

async fn cleanup(pgid: u32, marker: &str) {
    if pgid != 0 {
        kill_group(pgid);
    }
    // Repeat until no marked process is left (a fork racing with the scan is caught next round).
    for _ in 0..50 {
        kill_marked(marker);
        if !marked_alive(marker) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ctrl-C drops the evaluation's future mid-trial; the trial's whole tree must go with
    /// it, including a grandchild in the trial's process group.
    #[tokio::test]
    async fn dropping_a_running_phase_kills_its_process_tree() {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!("drop-test-{}", std::process::id());
        let spec = PhaseSpec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "sleep 300 & sleep 300; wait".into(),
            ],
            cwd: dir.path().to_path_buf(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: None,
            timeout: Some(Duration::from_secs(600)),
            log: dir.path().join("log"),
            log_cap: 4096,
            deny_network: false,
            hide: Vec::new(),
            marker: marker.clone(),
        };
        // The fallback containment: under `unshare` the kernel would end the namespace
        // when the direct child dies, which would hide a missing cleanup.
        let mut phase = Box::pin(run_phase_at(&spec, SandboxLevel::None));
        // Let it start and fork, then drop it as a cancelled run would.
        let started = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                tokio::select! {
                    _ = &mut phase => panic!("the phase ended on its own"),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                if marked_alive(&marker) {
                    // Give the shell time to fork its background sleep too.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return;
                }
            }
        })
        .await;
        assert!(started.is_ok(), "the phase never started");
        drop(phase); // the future itself, not a pinned reference to it
        for _ in 0..100 {
            if !marked_alive(&marker) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("processes of a dropped phase are still alive");
    }
}
