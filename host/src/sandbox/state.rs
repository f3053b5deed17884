//! The per-call store: a fresh WASI context with exactly the call's grants, the
//! capabilities its world imports, and a memory limiter.

use super::capabilities::Capabilities;
use super::output::CappedOutput;
use super::policy::{Grants, Limits};
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) capabilities: Capabilities,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps the *sum* of all linear memories (wasmtime's own limit is per memory), and
/// remembers that it refused, so the resulting trap is reported as out-of-memory.
pub struct MemoryLimiter {
    cap: usize,
    total: usize,
    pub(crate) refused: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.total - current.min(self.total) + desired;
        if total > self.cap {
            self.refused = true;
            return Ok(false);
        }
        self.total = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        64
    }
    fn tables(&self) -> usize {
        64
    }
    fn memories(&self) -> usize {
        16
    }
}

/// The hostcall fuel of a call: the result limit plus room, at least 64 MiB.
pub(crate) fn hostcall_fuel(limits: &Limits) -> usize {
    limits.result_bytes.saturating_add(1 << 20).max(64 << 20)
}

pub(crate) struct Streams {
    pub stdout: CappedOutput,
    pub stderr: CappedOutput,
}

/// Build the store for one call. Environment and arguments stay empty; sockets and name
/// lookup are refused; the only directories are the grants.
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    grants: &Grants,
    limits: &Limits,
    capabilities: Capabilities,
    epoch_ticks: u64,
    cancel: super::Cancel,
    quota_over: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<(Store<CallState>, Streams)> {
    let streams = Streams {
        stdout: CappedOutput::new(limits.log_bytes),
        stderr: CappedOutput::new(limits.log_bytes),
    };
    let mut b = WasiCtxBuilder::new();
    b.stdout(streams.stdout.clone())
        .stderr(streams.stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    for p in &grants.preopens {
        // Granting follows a symlink: a candidate whose `target` is a link (say, to
        // `../evaluator`) would hand out whatever it points at. Grant real directories only.
        if std::fs::symlink_metadata(&p.host).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(std::io::Error::other(format!(
                "cannot grant {} as {}: it is a symbolic link",
                p.host.display(),
                p.guest
            )));
        }
        let perms = if p.writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        b.preopened_dir(&p.host, p.guest, perms).map_err(|e| {
            std::io::Error::other(format!(
                "cannot grant {} as {}: {e:#}",
                p.host.display(),
                p.guest
            ))
        })?;
    }
    let state = CallState {
        wasi: b.build(),
        table: ResourceTable::new(),
        limiter: MemoryLimiter {
            cap: limits.memory_bytes,
            total: 0,
            refused: false,
        },
        capabilities,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    // Lifting a value out of the guest stops once it has carried this many bytes, before
    // they are copied into the host: a 100 MB result is refused without 100 MB of host
    // memory. It bounds host calls' arguments too, hence the 64 MiB floor.
    store.set_hostcall_fuel(hostcall_fuel(limits));
    // Wake every tick: trap with the deadline's interrupt once `epoch_ticks` have passed
    // (reported as a timeout), or at once when the run is cancelled.
    let mut elapsed = 0u64;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        elapsed += 1;
        if cancel.is_cancelled() {
            return Err(wasmtime::Error::new(super::cancel::CancelledTrap));
        }
        // The quota watcher saw a writable grant over its quota (`quota.rs`).
        if quota_over.load(std::sync::atomic::Ordering::Acquire) {
            return Err(wasmtime::Error::new(super::quota::QuotaTrap));
        }
        if elapsed >= epoch_ticks {
            return Ok(wasmtime::UpdateDeadline::Interrupt);
        }
        Ok(wasmtime::UpdateDeadline::Continue(1))
    });
    if let Some(fuel) = limits.fuel {
        store
            .set_fuel(fuel)
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    }
    Ok((store, streams))
}
