//! Running one phase (agent, oracle or verifier) as a contained process tree.
//!
//! Containment ([`Confinement`]): a bubblewrap jail ([`super::contain`]) whose PID
//! namespace ends every process of the phase when its first one exits, or, only on the
//! user's explicit opt-in, nothing but a process group. Both are backed by the same cleanup:
//! after every phase the group is killed and `/proc` is scanned for processes whose
//! environment carries the phase's marker variable (`EVOLVE_TRIAL_MARKER`), which catches
//! children that left the group with `setsid`.
//!
//! A [`DiskQuota`] is watched while the phase runs: the bytes and files under its
//! directories are counted every [`QUOTA_TICK`], and the phase is killed as soon as it holds
//! more than it is allowed (`RLIMIT_FSIZE` already stops any single file at the cap).
//! Output (stdout and stderr merged) is written to a log file, capped; the rest is drained.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::contain::{Bubblewrap, Jail};

/// How often a running phase's disk use is counted.
pub const QUOTA_TICK: Duration = Duration::from_millis(200);

/// How a phase is contained.
#[derive(Debug, Clone)]
pub enum Confinement {
    /// In a bubblewrap jail (the default, and the only mode without an opt-in).
    Contained {
        jail: Box<Jail>,
        bwrap: &'static Bubblewrap,
    },
    /// Directly on the host in its own process group: the user's explicit opt-in, recorded
    /// in the trial's isolation and the evaluation contract.
    Unconfined,
}

/// The most a phase may hold on disk, counted over `dirs` (never following a link).
#[derive(Debug, Clone)]
pub struct DiskQuota {
    pub dirs: Vec<PathBuf>,
    pub bytes: u64,
    pub files: u64,
}

/// One phase to run.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    /// The program and its arguments, in the phase's own paths.
    pub argv: Vec<String>,
    /// The host working directory (an unconfined phase runs there; a jail has its own).
    pub cwd: PathBuf,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
    /// Merged stdout+stderr log.
    pub log: PathBuf,
    pub log_cap: u64,
    pub confinement: Confinement,
    pub quota: Option<DiskQuota>,
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
    /// Set when the phase was killed for holding more than its [`DiskQuota`].
    pub over_quota: Option<String>,
}

/// Bytes (allocated blocks) and entries under `dirs`, stopping early once past the caps.
pub fn disk_usage(dirs: &[PathBuf], stop_bytes: u64, stop_files: u64) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for ent in rd.flatten() {
            let Ok(m) = ent.metadata() else { continue };
            files += 1;
            bytes += m.blocks() * 512;
            if m.is_dir() {
                stack.push(ent.path());
            }
            if bytes > stop_bytes || files > stop_files {
                return (bytes, files);
            }
        }
    }
    (bytes, files)
}

impl DiskQuota {
    /// What the phase did past the quota, or `None` while it is within it.
    pub fn exceeded(&self) -> Option<String> {
        let (bytes, files) = disk_usage(&self.dirs, self.bytes, self.files);
        if bytes > self.bytes {
            Some(format!(
                "wrote more than its storage cap of {} MiB",
                self.bytes >> 20
            ))
        } else if files > self.files {
            Some(format!("created more than its cap of {} files", self.files))
        } else {
            None
        }
    }
}

fn build_argv(spec: &PhaseSpec) -> Vec<String> {
    match &spec.confinement {
        Confinement::Contained { jail, bwrap } => bwrap.argv(jail, &spec.argv),
        Confinement::Unconfined => spec.argv.clone(),
    }
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

/// Run a phase to completion, timeout or quota; the whole process tree is gone when this
/// returns.
pub async fn run_phase(spec: &PhaseSpec) -> std::io::Result<PhaseOutcome> {
    let argv = build_argv(spec);
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
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut over_quota = None;
    let waited = loop {
        let tick = tokio::time::sleep(QUOTA_TICK);
        let expired = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            st = child.wait() => break Some(st),
            _ = expired => break None,
            _ = tick, if spec.quota.is_some() => {
                let q = spec.quota.clone().expect("guarded by the select arm");
                if let Ok(Some(why)) = tokio::task::spawn_blocking(move || q.exceeded()).await {
                    over_quota = Some(why);
                    break None;
                }
            }
        }
    };
    let wall = started.elapsed();
    let (exit_code, timed_out) = match waited {
        Some(Ok(st)) => (st.code(), false),
        Some(Err(e)) => {
            cleanup(pgid, &spec.marker).await;
            return Err(e);
        }
        None => (None, over_quota.is_none()),
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
        over_quota,
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
            confinement: Confinement::Unconfined,
            quota: None,
            marker: marker.clone(),
        };
        // Unconfined: in a jail the kernel would end the PID namespace when the direct
        // child dies, which would hide a missing cleanup.
        let mut phase = Box::pin(run_phase(&spec));
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
