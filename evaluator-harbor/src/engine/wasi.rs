//! The fully sandboxed agent form: a WASI command component (wasm32-wasip2) run under
//! wasmtime with exactly three preopens: the trial's `/app` and `/logs/agent` (read-write)
//! and the agent's own directory (the candidate's `target/`, holding `agent.toml`) as
//! `/agent`, read-only.
//! No network (the default `WasiCtxBuilder` denies sockets), no inherited environment, stdin =
//! the instruction, stdout+stderr captured (capped) to `/logs/agent/agent.txt`, a wall-clock
//! deadline from `[agent].timeout_sec` (epoch interruption for guest code, plus an async
//! timeout for guests blocked in host calls), and a cap on its linear memory: the task's
//! `memory_mb`, else [`DEFAULT_MEMORY_BYTES`]. A guest is single-threaded, so the wall-clock
//! deadline also bounds its CPU time. A component is compiled once per process and content,
//! then reused by every trial.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::error::{Error, ErrorKind, Result};

const TICK: Duration = Duration::from_millis(10);

/// An agent component's memory cap when its task sets no `memory_mb`: the operators'
/// default, so an agent gets what an operator does.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;

struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: StoreLimits,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn engine() -> Result<&'static Engine> {
    static ENGINE: OnceLock<std::result::Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut cfg = Config::new();
            cfg.epoch_interruption(true);
            let e = Engine::new(&cfg).map_err(|e| e.to_string())?;
            let weak = e.weak();
            std::thread::spawn(move || {
                while let Some(e) = weak.upgrade() {
                    e.increment_epoch();
                    drop(e);
                    std::thread::sleep(TICK);
                }
            });
            Ok(e)
        })
        .as_ref()
        .map_err(|e| Error::infra(format!("cannot create the wasmtime engine: {e}")))
}

/// How many compiled components [`compile_cached`] keeps (most recently used first).
const COMPILED_CACHE_SIZE: usize = 16;

type Compiled = Arc<tokio::sync::OnceCell<std::result::Result<Component, String>>>;

/// The component for `bytes`, compiled once per process and content: every trial of an
/// evaluation (and every candidate shipping the same bytes) reuses it. Concurrent trials
/// wait for the first compilation instead of repeating it. A compile error is cached too
/// (the same bytes fail the same way).
async fn compile_cached(
    engine: &Engine,
    bytes: Vec<u8>,
) -> Result<std::result::Result<Component, String>> {
    use sha2::{Digest, Sha256};
    static CACHE: Mutex<Vec<([u8; 32], Compiled)>> = Mutex::new(Vec::new());
    let key: [u8; 32] = Sha256::digest(&bytes).into();
    let cell = {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        let cell = match cache.iter().position(|(k, _)| *k == key) {
            Some(i) => cache.remove(i).1,
            None => Compiled::default(),
        };
        cache.insert(0, (key, cell.clone()));
        cache.truncate(COMPILED_CACHE_SIZE);
        cell
    };
    let engine = engine.clone();
    cell.get_or_try_init(|| async move {
        tokio::task::spawn_blocking(move || {
            Component::new(&engine, &bytes).map_err(|e| format!("{e:#}"))
        })
        .await
        .map_err(|e| Error::infra(format!("compile task failed: {e}")))
    })
    .await
    .cloned()
}

/// Outcome of a component run.
#[derive(Debug, Clone)]
pub struct ComponentOutcome {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub wall: Duration,
}

/// The agent component of a trial, as its manifest loaded it.
pub struct ComponentAgent<'a> {
    /// Its path relative to the agent directory (for messages).
    pub name: &'a str,
    pub bytes: Arc<Vec<u8>>,
    pub env: &'a BTreeMap<String, String>,
    /// Preopened read-only at `/agent`.
    pub agent_dir: &'a Path,
    /// Cap on its linear memories together.
    pub memory_bytes: u64,
}

/// Run `agent` as the trial's agent. A component that does not load, is not a WASI
/// command, or traps (running out of memory included) is `InvalidAgent`
/// (candidate_invalid); a timeout is reported in the outcome.
pub async fn run_component(
    agent: ComponentAgent<'_>,
    instruction: &str,
    app: &Path,
    agent_logs: &Path,
    timeout: Option<Duration>,
    output_cap: u64,
) -> Result<ComponentOutcome> {
    let engine = engine()?;
    let invalid = |m: String| {
        Error::new(ErrorKind::InvalidAgent, m).at(format!("{} in the agent directory", agent.name))
    };
    let (env, agent_dir) = (agent.env, agent.agent_dir);
    let component = compile_cached(engine, agent.bytes.to_vec())
        .await?
        .map_err(|e| invalid(format!("not a loadable WebAssembly component: {e}")))?;
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| Error::infra(format!("cannot link WASI: {e}")))?;

    let out = MemoryOutputPipe::new(output_cap as usize);
    let mut b = WasiCtxBuilder::new();
    b.stdin(MemoryInputPipe::new(instruction.as_bytes().to_vec()))
        .stdout(out.clone())
        .stderr(out.clone())
        .args(&["agent"])
        .env("EVOLVE_APP_DIR", "/app")
        .env("EVOLVE_AGENT_DIR", "/agent")
        .env("EVOLVE_AGENT_LOGS_DIR", "/logs/agent");
    if instruction.len() <= 100_000 {
        b.env("EVOLVE_INSTRUCTION", instruction);
    }
    for (k, v) in env {
        b.env(k, v);
    }
    b.preopened_dir(app, "/app", FsPerms::ReadWrite)
        .map_err(|e| Error::infra(format!("cannot preopen /app: {e}")))?;
    b.preopened_dir(agent_logs, "/logs/agent", FsPerms::ReadWrite)
        .map_err(|e| Error::infra(format!("cannot preopen /logs/agent: {e}")))?;
    b.preopened_dir(agent_dir, "/agent", FsPerms::ReadOnly)
        .map_err(|e| Error::infra(format!("cannot preopen /agent: {e}")))?;
    let mut store = Store::new(
        engine,
        State {
            wasi: b.build(),
            table: ResourceTable::new(),
            limits: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(agent.memory_bytes).unwrap_or(usize::MAX))
                .trap_on_grow_failure(true)
                .build(),
        },
    );
    store.limiter(|s| &mut s.limits);
    let ticks = timeout
        .map(|t| (t.as_millis() / TICK.as_millis()).max(1) as u64)
        .unwrap_or(u64::MAX / 2);
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();

    let started = Instant::now();
    let run = async {
        let cmd = Command::instantiate_async(&mut store, &component, &linker)
            .await
            .map_err(|e| invalid(format!("component is not a runnable WASI command: {e:#}")))?;
        Ok::<_, Error>(cmd.wasi_cli_run().call_run(&mut store).await)
    };
    let outcome = match timeout {
        Some(t) => tokio::time::timeout(t + TICK * 5, run).await.ok(),
        None => Some(run.await),
    };
    let wall = started.elapsed();
    // The guest could have planted links in /logs/agent: write through none of them.
    let _ = crate::beneath::write_new(agent_logs, "agent.txt", &out.contents());
    let (exit_code, timed_out) = match outcome {
        None => (None, true),
        Some(Err(e)) => return Err(e),
        Some(Ok(Ok(Ok(())))) => (Some(0), false),
        Some(Ok(Ok(Err(())))) => (Some(1), false),
        Some(Ok(Err(e))) => {
            if let Some(x) = e.downcast_ref::<I32Exit>() {
                (Some(x.0), false)
            } else if matches!(
                e.downcast_ref::<wasmtime::Trap>(),
                Some(wasmtime::Trap::Interrupt)
            ) {
                (None, true)
            } else {
                // A trap is the candidate's failure, like a crashing process: exit code 128.
                let _ = crate::beneath::write_new(
                    agent_logs,
                    "trap.txt",
                    format!("{e:#}\n").as_bytes(),
                );
                (Some(128), false)
            }
        }
    };
    Ok(ComponentOutcome {
        exit_code,
        timed_out,
        wall,
    })
}
