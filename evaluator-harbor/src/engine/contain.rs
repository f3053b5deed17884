//! Containment of a local trial's processes (agent, oracle, verifier) with bubblewrap.
//!
//! The agent under test is evolved code, as untrusted as an operator, so the local engine
//! never runs it on the host as it is. Each phase runs under `bwrap` (Debian's
//! `bubblewrap`, the sandbox Flatpak uses: a maintained, audited tool, rather than mounts
//! written by hand) in a fresh root that holds only:
//!
//! - the read-only system directories a program needs (`/usr`, and `/bin`, `/lib*`, `/sbin`
//!   as the host has them), a minimal `/etc` (copies of an allowlist of harmless files plus a
//!   generated `passwd`, `group`, `hosts` and `hostname` naming only the sandbox user),
//!   `/dev` (null, zero, random, tty, …) and a `/proc` of its own PID namespace;
//! - the trial's directories bound at the paths Harbor promises (`/app` and `/logs/agent` for
//!   the agent, `/tests` and `/logs/verifier` for the verifier, `/solution` for the oracle),
//!   and the trial's own `/tmp`; everything else is read-only, the root included.
//!
//! Home directories, the key directory, the workspace (archive, receipts, `runs/`, git
//! objects, the frozen evaluator), other trials, the task set and the Docker socket are not
//! in that root at all. The phase gets new PID, IPC, UTS and (unless the task allows the
//! network) network namespaces, no capabilities and `no_new_privs`. An agent under the model
//! gateway instead runs in the network namespace the engine made for it, entered with
//! util-linux's `nsenter` before bwrap starts, whose only listening socket is the gateway's
//! ([`JailNet::Enter`], [`super::reach`]).
//!
//! **Never host root.** When evolve itself runs as root, bwrap sets up the root with root's
//! rights (so it can bind directories under a 0700 home) and then `setpriv` drops the phase to
//! a dedicated uid of its own (one per concurrent trial, from [`SANDBOX_UID_BASE`]), clearing
//! every capability set. Otherwise bwrap runs unprivileged in a user namespace as the
//! invoking user. Resource limits ([`Limits`]) are set by `prlimit` (util-linux), which
//! then execs bwrap, so everything in the phase inherits them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, ErrorKind, Result};

/// First host uid (and gid) of the trials' dedicated users when evolve runs as root; trial
/// `k` of those running at once gets `SANDBOX_UID_BASE + k`. Far above any uid a
/// distribution or an LDAP directory hands out, and below the 32-bit "no uid" marker.
pub const SANDBOX_UID_BASE: u32 = 2_000_000_000;
/// How many contained trials may run at once as root (each holds one uid).
pub const SANDBOX_UID_SLOTS: u32 = 4096;

/// `/etc` entries copied into every jail's `/etc`: what the dynamic loader, `alternatives`
/// links, name service look-ups, TLS and shells read. Nothing here holds a secret (no
/// `shadow`, `ssh`, `sudoers`, `machine-id`, `docker`, credentials of any kind), and of
/// these only what every user may read is copied.
const ETC_ALLOWLIST: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "host.conf",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "profile",
    "protocols",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "services",
    "ssl",
    "terminfo",
    "timezone",
];

/// System directories bound read-only (or recreated as the same symlink, on merged-/usr
/// systems where `/bin` is `usr/bin`).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// One host directory or file visible inside the phase.
#[derive(Debug, Clone)]
pub struct Bind {
    pub host: PathBuf,
    /// The absolute path inside the phase.
    pub at: String,
    pub writable: bool,
}

/// Per-process limits of a contained phase (set by `prlimit`, inherited by every process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_DATA`: heap and private writable mappings of each process.
    pub memory_bytes: u64,
    /// `RLIMIT_NPROC`: processes of the phase's user at once.
    pub processes: u64,
    /// `RLIMIT_FSIZE`: the largest file a process may write.
    pub file_bytes: u64,
    /// `RLIMIT_CPU`: CPU seconds of each process.
    pub cpu_seconds: Option<u64>,
}

/// Everything the contained phase sees.
#[derive(Debug, Clone)]
pub struct Jail {
    pub binds: Vec<Bind>,
    /// The working directory inside the phase.
    pub workdir: String,
    pub network: JailNet,
    /// The jail's `/etc` (see [`write_etc`]).
    pub etc: PathBuf,
    /// The host's `/etc` directories bound over their mount points in it.
    pub etc_dirs: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub limits: Limits,
}

/// The network a jail's phase is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JailNet {
    /// The host's (the task allows the network).
    Host,
    /// A namespace of its own with nothing but a loopback (bwrap's `--unshare-net`).
    Own,
    /// The existing namespace at this path (`/proc/<pid>/fd/<n>`), entered with `nsenter`
    /// before bwrap starts: the agent's namespace whose only listening socket is the model
    /// gateway's (see [`super::reach`]).
    Enter(PathBuf),
}

/// How bwrap is started on this machine.
#[derive(Debug, Clone)]
pub struct Bubblewrap {
    bwrap: PathBuf,
    /// util-linux's `prlimit`, which sets the phase's limits and execs bwrap. (Setting them
    /// in a `pre_exec` hook would make the host fork its whole address space for every
    /// phase instead of spawning, which costs more than the extra exec.)
    prlimit: PathBuf,
    /// `Some` when evolve runs as root: bwrap runs privileged and `setpriv` drops the phase
    /// to its dedicated uid.
    setpriv: Option<PathBuf>,
    /// util-linux's `nsenter`, which puts a phase in the namespace the model gateway
    /// listens in ([`JailNet::Enter`]); only trials with a gateway need it.
    nsenter: Option<PathBuf>,
}

/// The first executable regular file called `name` in `dirs`.
pub fn find_executable(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.iter().map(|d| Path::new(d).join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

fn find_program(name: &str) -> Option<PathBuf> {
    find_executable(
        name,
        &["/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin"],
    )
}

/// Whether evolve runs as root (and so hands each trial a dedicated uid).
pub fn running_as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The containment this machine offers, probed once per process by starting a real
/// sandbox; the error says exactly what is missing and what to do.
pub fn bubblewrap() -> std::result::Result<&'static Bubblewrap, &'static str> {
    static PROBED: OnceLock<std::result::Result<Bubblewrap, String>> = OnceLock::new();
    PROBED.get_or_init(probe).as_ref().map_err(|e| e.as_str())
}

fn probe() -> std::result::Result<Bubblewrap, String> {
    if std::env::var_os("EVOLVE_LOCAL_NO_BWRAP").is_some() {
        return Err("EVOLVE_LOCAL_NO_BWRAP is set".into());
    }
    let Some(bwrap) = find_program("bwrap") else {
        return Err("bubblewrap (bwrap) is not installed".into());
    };
    let prlimit = find_program("prlimit").ok_or("prlimit (util-linux) is not installed")?;
    let setpriv = if running_as_root() {
        Some(find_program("setpriv").ok_or("setpriv (util-linux) is not installed")?)
    } else {
        None
    };
    let b = Bubblewrap {
        bwrap,
        prlimit,
        setpriv,
        nsenter: find_program("nsenter"),
    };
    let dir = tempfile::tempdir().map_err(|e| format!("cannot create a probe directory: {e}"))?;
    let etc = dir.path().join("etc");
    let (uid, gid) = if running_as_root() {
        (
            SANDBOX_UID_BASE + SANDBOX_UID_SLOTS,
            SANDBOX_UID_BASE + SANDBOX_UID_SLOTS,
        )
    } else {
        own_ids()
    };
    let etc_dirs = write_etc(&etc, uid, gid, false)
        .map_err(|e| format!("cannot write the probe's /etc: {e}"))?;
    let jail = Jail {
        binds: Vec::new(),
        workdir: "/".into(),
        network: JailNet::Own,
        etc,
        etc_dirs,
        uid,
        gid,
        limits: Limits {
            memory_bytes: 256 << 20,
            processes: 64,
            file_bytes: 1 << 20,
            cpu_seconds: Some(10),
        },
    };
    let argv = b.argv(&jail, &["/bin/sh".into(), "-c".into(), "exit 0".into()]);
    let out = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", b.bwrap.display()))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "bwrap cannot create a sandbox here ({})",
            why.trim().lines().next().unwrap_or("no message")
        ));
    }
    Ok(b)
}

/// The error a local trial gets when this machine cannot contain it.
pub fn unavailable(why: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the local engine runs every trial phase in a bubblewrap sandbox, and this machine cannot start one: {why}"),
    )
    .hint("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or use the docker engine; a WASI component agent is contained by wasmtime, but its task's verifier still needs the sandbox. Running trials unconfined needs an explicit opt-in (evaluator.unconfined_trials: true, or --unconfined), recorded in the evaluation contract")
}

fn own_ids() -> (u32, u32) {
    (
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    )
}

/// Make the jail's `/etc` in `dir`: copies of the allowlisted host files that any user may
/// read (links copied as links, never followed), generated `passwd` and `group` files that
/// name only the sandbox user (`agent`, home `/tmp`), `hosts` and `hostname` for a machine
/// called `evolve-trial`, and the host's `resolv.conf` when the task may use the network.
/// Allowlisted *directories* (`alternatives`, `ssl`, … hundreds of entries) are not copied:
/// an empty mount point is made for each, and the names returned are bound read-only over
/// them. Each bind is a mount and each copy a few system calls, so this split keeps a
/// phase's set-up to a handful of mounts and a trial's to a few dozen small writes.
pub fn write_etc(dir: &Path, uid: u32, gid: u32, network: bool) -> std::io::Result<Vec<String>> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let mut bound = Vec::new();
    let mut names: Vec<&str> = ETC_ALLOWLIST.to_vec();
    if network {
        names.push("resolv.conf");
    }
    for name in names {
        let host = Path::new("/etc").join(name);
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        let mode = meta.permissions().mode();
        let to = dir.join(name);
        if name == "resolv.conf" {
            // Often a link into /run (systemd-resolved), which the jail does not show:
            // copy what it names. The host's own /etc is trusted; the candidate's never is.
            std::fs::copy(&host, &to)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644))?;
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&host)?, &to)?;
        } else if meta.is_dir() && mode & 0o005 == 0o005 {
            std::fs::create_dir_all(&to)?;
            bound.push(name.to_string());
        } else if meta.is_file() && mode & 0o004 != 0 {
            std::fs::copy(&host, &to)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode & 0o755))?;
        }
    }
    std::fs::write(
        dir.join("passwd"),
        format!(
            "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nagent:x:{uid}:{gid}:agent:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
    )?;
    std::fs::write(
        dir.join("group"),
        format!("root:x:0:\nagent:x:{gid}:\nnogroup:x:65534:\n"),
    )?;
    std::fs::write(
        dir.join("hosts"),
        "127.0.0.1\tlocalhost evolve-trial\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )?;
    std::fs::write(dir.join("hostname"), "evolve-trial\n")?;
    Ok(bound)
}

impl Bubblewrap {
    /// Whether phases drop from root to a dedicated uid.
    pub fn privileged(&self) -> bool {
        self.setpriv.is_some()
    }

    /// Why a phase cannot be put in an existing network namespace here ([`JailNet::Enter`]),
    /// or `None` when it can. Joining a namespace takes `CAP_SYS_ADMIN`, which only a root
    /// evolve has (an unprivileged bwrap makes its own user namespace, which owns none).
    pub fn cannot_enter_netns(&self) -> Option<String> {
        if !self.privileged() {
            return Some(format!(
                "evolve runs as uid {}, not root, so it cannot create the agent's network namespace",
                rustix::process::geteuid().as_raw()
            ));
        }
        if self.nsenter.is_none() {
            return Some("nsenter (util-linux) is not installed".into());
        }
        None
    }

    /// The full command line that runs `command` inside `jail`.
    pub fn argv(&self, jail: &Jail, command: &[String]) -> Vec<String> {
        let l = jail.limits;
        let mut v: Vec<String> = Vec::new();
        if let (JailNet::Enter(ns), Some(nsenter)) = (&jail.network, &self.nsenter) {
            // Only the network namespace changes; bwrap then makes every other one.
            v.extend([
                nsenter.to_string_lossy().into_owned(),
                format!("--net={}", ns.display()),
                "--".into(),
            ]);
        }
        v.extend([
            self.prlimit.to_string_lossy().into_owned(),
            format!("--nproc={}", l.processes),
            format!("--data={}", l.memory_bytes),
            format!("--fsize={}", l.file_bytes),
        ]);
        if let Some(cpu) = l.cpu_seconds {
            v.push(format!("--cpu={cpu}"));
        }
        v.push("--".into());
        v.push(self.bwrap.to_string_lossy().into_owned());
        let mut arg = |a: &str| v.push(a.to_string());
        for a in [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "evolve-trial",
        ] {
            arg(a);
        }
        match &jail.network {
            JailNet::Host => {}
            JailNet::Own => arg("--unshare-net"),
            JailNet::Enter(_) if self.nsenter.is_some() => {}
            // Never run a phase in the host's network because nsenter went missing: the
            // caller checks `cannot_enter_netns` first, and this keeps the jail closed.
            JailNet::Enter(_) => arg("--unshare-net"),
        }
        if self.privileged() {
            // setpriv needs these three to switch user and empty the bounding set; it then
            // drops them (and every other capability) before the phase's program starts.
            for a in [
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
                "--cap-add",
                "CAP_SETPCAP",
            ] {
                arg(a);
            }
        } else {
            for a in ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"] {
                arg(a);
            }
        }
        for dir in SYSTEM_DIRS {
            match std::fs::symlink_metadata(dir) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(dir) {
                        v.extend([
                            "--symlink".into(),
                            target.to_string_lossy().into_owned(),
                            dir.to_string(),
                        ]);
                    }
                }
                Ok(m) if m.is_dir() => {
                    v.extend(["--ro-bind".into(), dir.to_string(), dir.to_string()]);
                }
                _ => {}
            }
        }
        v.extend(["--proc", "/proc", "--dev", "/dev", "--ro-bind"].map(String::from));
        v.extend([jail.etc.to_string_lossy().into_owned(), "/etc".into()]);
        for name in &jail.etc_dirs {
            let host = format!("/etc/{name}");
            v.extend(["--ro-bind".into(), host.clone(), host]);
        }
        // bwrap would create a bind's missing parents readable by root alone; make them
        // explicitly, traversable by the phase's user.
        let mut parents = BTreeSet::new();
        for b in &jail.binds {
            let mut p = Path::new(&b.at).parent();
            while let Some(dir) = p.filter(|d| *d != Path::new("/")) {
                parents.insert(dir.to_path_buf());
                p = dir.parent();
            }
        }
        for dir in parents {
            v.extend([
                "--perms".into(),
                "0755".into(),
                "--dir".into(),
                dir.to_string_lossy().into_owned(),
            ]);
        }
        for b in &jail.binds {
            v.extend([
                if b.writable { "--bind" } else { "--ro-bind" }.into(),
                b.host.to_string_lossy().into_owned(),
                b.at.clone(),
            ]);
        }
        // Nothing else is writable: the fresh root (and the directories bwrap made in it
        // for the mount points) becomes read-only once every bind is in place.
        v.extend(["--remount-ro", "/", "--chdir"].map(String::from));
        v.push(jail.workdir.clone());
        v.push("--".into());
        if let Some(setpriv) = &self.setpriv {
            v.extend([
                setpriv.to_string_lossy().into_owned(),
                "--reuid".into(),
                jail.uid.to_string(),
                "--regid".into(),
                jail.gid.to_string(),
                "--clear-groups".into(),
                "--inh-caps=-all".into(),
                "--bounding-set=-all".into(),
                "--no-new-privs".into(),
                "--".into(),
            ]);
        }
        v.extend(command.iter().cloned());
        v
    }
}

/// The uid a trial's phases run as, held for the whole trial (agent and verifier).
#[derive(Debug)]
pub struct SandboxUser {
    pub uid: u32,
    pub gid: u32,
    slot: Option<u32>,
}

static SLOTS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

impl SandboxUser {
    /// A dedicated uid no other running trial holds (as root), or the invoking user's own.
    pub fn lease(privileged: bool) -> Result<SandboxUser> {
        if !privileged {
            let (uid, gid) = own_ids();
            return Ok(SandboxUser {
                uid,
                gid,
                slot: None,
            });
        }
        let mut held = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        let slot = (0..SANDBOX_UID_SLOTS)
            .find(|s| !held.contains(s))
            .ok_or_else(|| {
                Error::infra(format!(
                    "more than {SANDBOX_UID_SLOTS} contained trials at once"
                ))
            })?;
        held.insert(slot);
        let id = SANDBOX_UID_BASE + slot;
        Ok(SandboxUser {
            uid: id,
            gid: id,
            slot: Some(slot),
        })
    }

    /// Give `path` (recursively, never following a link) to this user, so the phase can write
    /// its granted directories; a no-op when the phase runs as the invoking user.
    pub fn own(&self, path: &Path) -> std::io::Result<()> {
        if self.slot.is_none() {
            return Ok(());
        }
        let meta = std::fs::symlink_metadata(path)?;
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))?;
        if meta.is_dir() {
            for ent in std::fs::read_dir(path)? {
                self.own(&ent?.path())?;
            }
        }
        Ok(())
    }

    /// `RLIMIT_NPROC` counts every process of the real uid. A dedicated uid has none but the
    /// phase's; the invoking user's own processes count too, so they are added.
    pub fn process_limit(&self, phase_processes: u64) -> u64 {
        if self.slot.is_some() {
            return phase_processes;
        }
        let mine = std::fs::read_dir("/proc")
            .map(|rd| {
                use std::os::unix::fs::MetadataExt;
                rd.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .filter(|e| e.metadata().is_ok_and(|m| m.uid() == self.uid))
                    .count() as u64
            })
            .unwrap_or(0);
        mine + phase_processes
    }
}

impl Drop for SandboxUser {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            SLOTS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(root: bool, nsenter: bool) -> Bubblewrap {
        Bubblewrap {
            bwrap: "/x/bwrap".into(),
            prlimit: "/x/prlimit".into(),
            setpriv: root.then(|| "/x/setpriv".into()),
            nsenter: nsenter.then(|| "/x/nsenter".into()),
        }
    }

    fn gateway_jail() -> Jail {
        Jail {
            binds: Vec::new(),
            workdir: "/app".into(),
            network: JailNet::Enter("/proc/1/fd/3".into()),
            etc: "/x/etc".into(),
            etc_dirs: Vec::new(),
            uid: 1000,
            gid: 1000,
            limits: Limits {
                memory_bytes: 1 << 30,
                processes: 64,
                file_bytes: 1 << 30,
                cpu_seconds: None,
            },
        }
    }

    #[test]
    fn entering_the_gateways_namespace_needs_root_and_nsenter_and_says_which_is_missing() {
        assert_eq!(machine(true, true).cannot_enter_netns(), None);
        assert_eq!(
            machine(true, false).cannot_enter_netns().as_deref(),
            Some("nsenter (util-linux) is not installed")
        );
        let not_root = machine(false, true).cannot_enter_netns().unwrap();
        assert!(not_root.contains("not root"), "{not_root}");
    }

    #[test]
    fn without_nsenter_a_gateway_phase_gets_a_closed_network_never_the_hosts() {
        let jail = gateway_jail();
        let with = machine(true, true).argv(&jail, &["true".into()]);
        assert_eq!(with[..2], ["/x/nsenter", "--net=/proc/1/fd/3"]);
        assert!(!with.iter().any(|a| a == "--unshare-net"), "{with:?}");
        let without = machine(true, false).argv(&jail, &["true".into()]);
        assert!(
            !without.iter().any(|a| a.contains("nsenter")),
            "{without:?}"
        );
        assert!(without.iter().any(|a| a == "--unshare-net"), "{without:?}");
    }
}
