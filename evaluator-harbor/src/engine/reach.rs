//! Where a trial's model-gateway listener lives, so that the agent reaches the gateway and
//! nothing else.
//!
//! A listening socket belongs to the network namespace it was created in, and the host can
//! serve it from any thread. So the engine creates the gateway's listener *inside* the
//! agent's namespace, on its `127.0.0.1`, and hands it to the host's gateway:
//!
//! - local engine ([`isolated`]): a new namespace whose only interface is `lo` and whose only
//!   listening socket is the gateway's; the agent phase is started in it with `nsenter`
//!   (see [`super::contain::JailNet::Enter`]);
//! - docker engine ([`inside`]): the container's own namespace (`--network none`, so `lo`
//!   alone), joined through `/proc/<pid>/ns/net` of its first process.
//!
//! Changing namespace is per thread, so each is done on a short-lived thread of its own that
//! exits once the socket is made: no thread of the host's runtime ever leaves the host's
//! network. Both need `CAP_SYS_ADMIN`, i.e. evolve running as root.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A network namespace made for one trial's agent, held open until the trial ends.
#[derive(Debug)]
pub struct AgentNetwork {
    ns: OwnedFd,
}

impl AgentNetwork {
    /// The namespace as a path another process can open (`nsenter --net=<path>`): this
    /// process's descriptor of it, valid while `self` lives.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.ns.as_raw_fd()
        ))
    }
}

/// Run `f` on a thread of its own (which exits when `f` returns), so whatever namespace it
/// enters never outlives it.
fn on_own_thread<T: Send>(f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("evolve-netns".into())
            .spawn_scoped(s, f)?
            .join()
            .map_err(|_| io::Error::other("the network-namespace thread panicked"))?
    })
}

fn loopback_listener() -> io::Result<TcpListener> {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
}

/// A listener on the host's own `127.0.0.1`, for trials whose agent shares the host's network
/// anyway (unconfined trials, tasks that allow the network).
pub fn host_loopback() -> io::Result<TcpListener> {
    loopback_listener()
}

/// A new network namespace with `lo` up, and the gateway's listener on its `127.0.0.1`.
pub fn isolated() -> io::Result<(AgentNetwork, TcpListener)> {
    on_own_thread(|| {
        // SAFETY: CLONE_NEWNET only changes this thread's network namespace; without
        // CLONE_FILES/CLONE_FS no descriptor table or file-system state is unshared.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }
            .map_err(|e| refused(e, "create a network namespace"))?;
        loopback_up()?;
        let listener = loopback_listener()?;
        let ns = std::fs::File::open("/proc/thread-self/ns/net")?;
        Ok((AgentNetwork { ns: ns.into() }, listener))
    })
}

/// A listener on `127.0.0.1` inside the network namespace at `netns` (e.g.
/// `/proc/<pid>/ns/net` of a container's first process). Refuses the host's own namespace,
/// so a wrong path can never put the gateway on the host's loopback.
pub fn inside(netns: &Path) -> io::Result<TcpListener> {
    let target = std::fs::File::open(netns)?;
    let ours = std::fs::File::open("/proc/self/ns/net")?;
    let id = |f: &std::fs::File| rustix::fs::fstat(f).map(|st| (st.st_dev, st.st_ino));
    if id(&target)? == id(&ours)? {
        return Err(io::Error::other(format!(
            "{} is the host's own network namespace",
            netns.display()
        )));
    }
    on_own_thread(move || {
        rustix::thread::move_into_link_name_space(
            target.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| refused(e, "enter the network namespace"))?;
        loopback_listener()
    })
}

/// Why the kernel refused to `what`, naming the capability when that is what is missing: a
/// bare "Operation not permitted" does not tell a non-root user, or a root evolve in a
/// container that withholds the capability, what to change.
fn refused(e: rustix::io::Errno, what: &str) -> io::Error {
    let why = if e == rustix::io::Errno::PERM {
        format!(
            "cannot {what} ({e}): that takes CAP_SYS_ADMIN, which evolve lacks (it is not running as root, or runs where the capability is withheld)"
        )
    } else {
        format!("cannot {what}: {e}")
    };
    io::Error::new(e.kind(), why)
}

/// Bring up `lo` in the calling thread's network namespace (a new one has it down).
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2); the descriptor is owned (and closed) by `OwnedFd`.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let sock = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    // SAFETY: `ifreq` is plain data, valid when zeroed.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the `ifreq` passed, which lives for
    // the call; the descriptor is open.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The namespace's listener answers inside it and is absent from the host's loopback.
    #[test]
    fn the_isolated_listener_is_not_on_the_hosts_loopback() {
        if !crate::engine::contain::running_as_root() {
            eprintln!("SKIP: creating a network namespace needs root");
            return;
        }
        let (net, listener) = isolated().unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        // Another host program may own that port on the host's loopback: what matters is
        // that the trial's listener never sees the connection.
        let _ = std::net::TcpStream::connect(("127.0.0.1", port));
        assert_eq!(
            listener.accept().map(|_| ()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the host's 127.0.0.1:{port} reached the trial's listener"
        );
        let path = net.path();
        let inner = on_own_thread(|| {
            let f = std::fs::File::open(&path)?;
            rustix::thread::move_into_link_name_space(
                f.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )?;
            std::net::TcpStream::connect(("127.0.0.1", port))
        });
        assert!(inner.is_ok(), "inside the namespace: {inner:?}");
        assert!(
            listener.accept().is_ok(),
            "the connection from inside arrived"
        );
        assert!(inside(Path::new("/proc/self/ns/net")).is_err());
    }
}
