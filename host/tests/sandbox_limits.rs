//! Hostile operators against the resource limits: time, memory, stack, fuel, output
//! and result size. Each failure must be the exact typed outcome, and leave every file
//! outside the call's scratch directory untouched.

mod common;

use common::*;
use evolve::sandbox::{
    CallReport, Capabilities, Limits, OperatorFailure, Sandbox, SandboxConfig, StageOutput,
};
use std::time::Duration;

/// Run `attack` in the shared sandbox with `limits`, checking that nothing outside the
/// grants changed.
async fn run(sandbox: &Sandbox, attack: &str, limits: Limits) -> CallReport {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let op = sandbox
        .load_bytes(
            Stage::Select,
            &component("hostile_select"),
            "test:hostile_select".into(),
        )
        .unwrap();
    let report = sandbox
        .call(
            &op,
            &fx.grants(Stage::Select, false),
            &limits,
            Capabilities::default(),
            select_input(attack),
        )
        .await;
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["scratch"]),
        Vec::<String>::new()
    );
    report
}

fn timeout(secs: u64) -> Limits {
    Limits {
        timeout: Duration::from_secs(secs),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_times_out() {
    let report = run(&sandbox(), "spin", timeout(1)).await;
    assert_failure(
        &report,
        &OperatorFailure::Timeout {
            limit: Duration::from_secs(1),
            in_host_call: false,
        },
    );
    assert!(
        report.elapsed >= Duration::from_secs(1),
        "{:?}",
        report.elapsed
    );
    assert!(
        report.elapsed < Duration::from_secs(10),
        "{:?}",
        report.elapsed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_sleep_times_out_in_the_host_call() {
    // The guest sleeps 30 s inside a WASI call, where epochs cannot interrupt it.
    let report = run(&sandbox(), "sleep", timeout(1)).await;
    assert_failure(
        &report,
        &OperatorFailure::Timeout {
            limit: Duration::from_secs(1),
            in_host_call: true,
        },
    );
    assert!(
        report.elapsed >= Duration::from_secs(1),
        "{:?}",
        report.elapsed
    );
    assert!(
        report.elapsed < Duration::from_secs(10),
        "{:?}",
        report.elapsed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_is_out_of_memory() {
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..timeout(60)
    };
    let report = run(&sandbox(), "memory_bomb", limits).await;
    assert_failure(&report, &OperatorFailure::OutOfMemory { limit: 64 << 20 });
    assert!(
        stderr(&report).contains("memory allocation of"),
        "stderr: {}",
        stderr(&report)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_recursion_is_a_stack_overflow() {
    let report = run(&sandbox(), "recursion", timeout(60)).await;
    assert_failure(&report, &OperatorFailure::StackOverflow);
}

/// Recursion whose frames live on Rust's shadow stack (in linear memory) runs off the
/// bottom of memory rather than off wasm's call stack: a plain out-of-bounds trap,
/// never a silent overwrite of the operator's data and never a host crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_stack_overflow_is_an_out_of_bounds_trap() {
    let report = run(&sandbox(), "recursion_shadow", timeout(60)).await;
    assert_failure(
        &report,
        &OperatorFailure::Trap {
            trap: "wasm trap: out of bounds memory access".into(),
            panic: None,
        },
    );
}

fn fuel_sandbox() -> std::sync::Arc<Sandbox> {
    static FUEL: std::sync::OnceLock<std::sync::Arc<Sandbox>> = std::sync::OnceLock::new();
    FUEL.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            cache_dir: None,
            fuel: true,
        })
        .unwrap()
    })
    .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_runs_out_of_fuel() {
    let limits = Limits {
        fuel: Some(10_000_000),
        ..timeout(60)
    };
    let report = run(&fuel_sandbox(), "spin", limits).await;
    assert_failure(&report, &OperatorFailure::OutOfFuel);
    assert_eq!(report.fuel_consumed, Some(10_000_000));
    assert!(
        report.elapsed < Duration::from_secs(10),
        "{:?}",
        report.elapsed
    );
}

/// Positive control for fuel: a cheap call fits in the budget and reports its use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cheap_call_fits_its_fuel() {
    let limits = Limits {
        fuel: Some(10_000_000),
        ..timeout(60)
    };
    let report = run(&fuel_sandbox(), "ok", limits).await;
    assert_eq!(parents(&report), ["0"]);
    let used = report.fuel_consumed.expect("fuel is metered");
    assert!(used > 0 && used < 10_000_000, "{used}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooding_stdout_is_capped_not_fatal() {
    let limits = Limits {
        log_bytes: 64 << 10,
        ..timeout(60)
    };
    let report = run(&sandbox(), "flood_stdout", limits).await;
    assert_eq!(parents(&report), ["flooded"]);
    assert_eq!(report.stdout.bytes.len(), 64 << 10);
    assert_eq!(report.stdout.dropped, (10u64 << 20) - (64 << 10));
    let line = [&[b'x'; 1023][..], b"\n"].concat();
    assert_eq!(report.stdout.bytes, line.repeat(64));
    assert!(
        report.stderr.bytes.is_empty(),
        "stderr: {}",
        stderr(&report)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_parent_list_is_malformed() {
    let report = run(&sandbox(), "empty_result", timeout(60)).await;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult("select must return at least one parent id".into()),
    );
    let report = run(&sandbox(), "blank_result", timeout(60)).await;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult("select returned an empty parent id".into()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_result_is_malformed() {
    let report = run(&sandbox(), "oversized_result", timeout(60)).await;
    let limit = Limits::default().result_bytes;
    assert_eq!(limit, 8 << 20);
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult(format!(
            "the result is {} bytes; the limit is {limit}",
            (20 << 20) + 8
        )),
    );
}

/// The size limit covers the error text too: a 20 MiB `Err` must not reach the
/// archive or the logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_error_message_is_malformed() {
    let report = run(&sandbox(), "oversized_error", timeout(60)).await;
    let limit = Limits::default().result_bytes;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult(format!(
            "the reported error is {} bytes; the limit is {limit}",
            20 << 20
        )),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_a_trap_carrying_the_message() {
    let report = run(&sandbox(), "panic", timeout(60)).await;
    match failure(&report) {
        OperatorFailure::Trap {
            trap,
            panic: Some(msg),
        } => {
            assert!(msg.starts_with("hostile panic 42 (at "), "{msg}");
            assert!(trap.contains("unreachable"), "{trap}");
        }
        other => panic!("expected a trap with a panic message, got {other:?}"),
    }
}

/// `exit(0)` from inside a call is not a success (the call returned nothing), and it
/// ends only the guest, never the host process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exiting_or_aborting_is_a_trap() {
    let report = run(&sandbox(), "exit", timeout(60)).await;
    match failure(&report) {
        OperatorFailure::Trap { trap, panic: None } => {
            assert!(trap.contains("exit status 0"), "{trap}")
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    let report = run(&sandbox(), "abort", timeout(60)).await;
    assert_failure(
        &report,
        &OperatorFailure::Trap {
            trap: "wasm trap: wasm `unreachable` instruction executed".into(),
            panic: None,
        },
    );
}

/// A result within the limits is accepted: the limit is not off by a mile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_result_limit_is_exact() {
    let report = run(
        &sandbox(),
        "ok",
        Limits {
            result_bytes: 9,
            ..timeout(60)
        },
    )
    .await;
    assert!(
        matches!(report.outcome, Ok(StageOutput::Parents(_))),
        "{:?}",
        report.outcome
    );
    let report = run(
        &sandbox(),
        "ok",
        Limits {
            result_bytes: 8,
            ..timeout(60)
        },
    )
    .await;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult("the result is 9 bytes; the limit is 8".into()),
    );
}
