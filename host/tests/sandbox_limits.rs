//! Hostile operators against the resource limits: time, memory, stack, fuel, output
//! and result size. Each failure must be the exact typed outcome, and leave every file
//! outside the call's scratch directory untouched.

use crate::common;
use common::*;
use evolve::sandbox::{
    CallReport, Capabilities, Limits, OperatorFailure, QuotaBreach, Sandbox, SandboxConfig,
    StageOutput,
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

/// Run `attack` of `component` (a select or mutate test component) on `fx`.
async fn run_on(
    fx: &Fixture,
    stage: Stage,
    component_name: &str,
    input: evolve::sandbox::StageInput,
    limits: Limits,
) -> CallReport {
    let op = sandbox()
        .load_bytes(
            stage,
            &component(component_name),
            format!("test:{component_name}"),
        )
        .unwrap();
    sandbox()
        .call(
            &op,
            &fx.grants(stage, false),
            &limits,
            Capabilities::default(),
            input,
        )
        .await
}

/// Every entry left under `dir`.
fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn quota_breach(report: &CallReport) -> &QuotaBreach {
    match failure(report) {
        OperatorFailure::QuotaExceeded(b) => b,
        other => panic!("expected quota_exceeded, got {other:?}"),
    }
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
/// bottom of memory rather than off wasm's call stack. It used to be reported as a
/// plain out-of-bounds `trap`; it is the stack overflow it is (issue 22), never a
/// silent overwrite of the operator's data and never a host crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_stack_overflow_is_a_stack_overflow() {
    let report = run(&sandbox(), "recursion_shadow", timeout(60)).await;
    assert_failure(&report, &OperatorFailure::StackOverflow);
}

/// A guest that reads past the end of its memory, far from the stack's wrap-around,
/// is still a plain out-of-bounds trap: the stack-overflow reading is not a catch-all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wild_read_is_still_an_out_of_bounds_trap() {
    let report = run(&sandbox(), "wild_read", timeout(60)).await;
    match failure(&report) {
        OperatorFailure::Trap { trap, .. } => {
            assert_eq!(trap, "wasm trap: out of bounds memory access")
        }
        other => panic!("expected an out-of-bounds trap, got {other:?}"),
    }
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

/// Issue 22: 1 GiB written to /scratch was kept for good. The quota stops the guest
/// during the call (the watcher saw far less than the 1 GiB it meant to write), the
/// call is `quota_exceeded`, and the scratch is left empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_past_the_disk_quota_is_stopped_and_removed() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let limits = Limits {
        disk_bytes: 8 << 20,
        ..timeout(60)
    };
    let report = run_on(
        &fx,
        Stage::Select,
        "hostile_select",
        select_input("fill_scratch"),
        limits,
    )
    .await;
    let b = quota_breach(&report);
    assert_eq!((b.grant.as_str(), b.limit_bytes), ("/scratch", 8 << 20));
    assert!(b.bytes > 8 << 20 && b.bytes < 1 << 30, "{b:?}");
    assert_eq!(entries(&fx.scratch), Vec::<String>::new());
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["scratch"]),
        Vec::<String>::new()
    );
    let msg = failure(&report).to_string();
    assert!(
        msg.contains("disk quota in /scratch") && msg.contains("8388608 bytes"),
        "{msg}"
    );
}

/// 100,000 files in /scratch: over the file quota, all removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_files_are_quota_exceeded_and_removed() {
    let fx = Fixture::new();
    let limits = Limits {
        disk_files: 1_000,
        ..timeout(60)
    };
    let report = run_on(
        &fx,
        Stage::Select,
        "hostile_select",
        select_input("many_files"),
        limits,
    )
    .await;
    let b = quota_breach(&report);
    assert_eq!((b.grant.as_str(), b.limit_files), ("/scratch", 1_000));
    assert!(b.files > 1_000 && b.files < 100_000, "{b:?}");
    assert_eq!(entries(&fx.scratch), Vec::<String>::new());
}

/// A sparse file counts at its length: 1 TiB of apparent size is over any quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_file_counts_at_its_length() {
    let fx = Fixture::new();
    let report = run_on(
        &fx,
        Stage::Select,
        "hostile_select",
        select_input("sparse_file"),
        timeout(60),
    )
    .await;
    let b = quota_breach(&report);
    assert_eq!((b.bytes, b.limit_bytes), (1 << 40, 256 << 20));
    assert_eq!(entries(&fx.scratch), Vec::<String>::new());
}

/// Mutate's /target is a writable grant too: the proposal is refused and the
/// over-quota file is gone, while the candidate's own files stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutate_filling_target_is_refused_and_its_writes_removed() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let limits = Limits {
        disk_bytes: 16 << 20,
        ..timeout(60)
    };
    let report = run_on(
        &fx,
        Stage::Mutate,
        "hostile_mutate",
        mutate_input("fill_target"),
        limits,
    )
    .await;
    let b = quota_breach(&report);
    assert_eq!(b.grant, "/target");
    assert_eq!(entries(&fx.target()), ["file.txt", "sub"]);
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["scratch", "checkout/target"]),
        Vec::<String>::new()
    );
    assert_eq!(
        std::fs::read_to_string(fx.target().join("file.txt")).unwrap(),
        TARGET_FILE
    );
}

/// Within the quota nothing changes: the call succeeds and its scratch is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_within_the_quota_are_kept() {
    let fx = Fixture::new();
    let limits = Limits {
        disk_files: 1,
        ..timeout(60)
    };
    let report = run_on(
        &fx,
        Stage::Select,
        "hostile_select",
        select_input("report_fs"),
        limits,
    )
    .await;
    assert!(
        matches!(report.outcome, Ok(StageOutput::Parents(_))),
        "{:?}",
        report.outcome
    );
    assert_eq!(entries(&fx.scratch), ["ok.txt"]);
}

/// Issue 22: 900,000 ids for one child were accepted and archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_parent_ids_than_children_are_malformed() {
    let report = run(&sandbox(), "many_ids", timeout(60)).await;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult(
            "select returned 900000 parent ids; at most 64 are allowed (one per child, or one for all)".into(),
        ),
    );
    let limits = Limits {
        max_parents: 1,
        ..timeout(60)
    };
    let report = run(&sandbox(), "ok", limits).await;
    assert_eq!(parents(&report), ["0"]);
}

/// A result past wasmtime's hostcall fuel used to be a `trap` ("hostcall fuel"): it is
/// a malformed result, refused before it is copied into the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_past_the_hostcall_fuel_is_malformed() {
    let limits = Limits {
        memory_bytes: 512 << 20,
        ..timeout(60)
    };
    let report = run(&sandbox(), "huge_result", limits).await;
    match failure(&report) {
        OperatorFailure::MalformedResult(m) => assert_eq!(
            m,
            "the operator passed the host more than 67108864 bytes in one value (its result, \
             or the argument of a host call), and the result limit is 8388608 bytes"
        ),
        other => panic!("expected malformed_result, got {other:?}"),
    }
}

/// The guest is told the deadline the sandbox enforces, whatever the context said
/// (`evolve operator run --timeout 5` told it 30 000 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guest_is_told_the_enforced_deadline() {
    let report = run(&sandbox(), "deadline", timeout(5)).await;
    assert_eq!(parents(&report), ["5000"]);
}

fn row(genid: &str) -> evolve::sandbox::types::ArchiveRow {
    use evolve::sandbox::types::*;
    ArchiveRow {
        generation_id: genid.into(),
        parent: Some("0".into()),
        generation: 1,
        status: GenerationStatus::Complete,
        score: Some(0.5),
        eligible: true,
        verdict: Some(Verdict::Keep),
        children: 0,
        task_vector: Vec::new(),
        cost_usd: 0.0,
        annotations: "{}".into(),
    }
}

async fn run_record(attack: &str) -> CallReport {
    let fx = Fixture::new();
    let input = evolve::sandbox::StageInput::Record {
        ctx: ctx(serde_json::json!({ "attack": attack })),
        child: row("1"),
        diff: None,
    };
    run_on(&fx, Stage::Record, "hostile_record", input, timeout(60)).await
}

/// Issue 22: 7 MiB of annotations per generation were archived. One annotation object
/// is at most 64 KiB of canonical JSON; the cap is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_annotations_are_malformed() {
    let cap = evolve::sandbox::MAX_ANNOTATION_BYTES;
    assert_failure(
        &run_record("huge").await,
        &OperatorFailure::MalformedResult(format!(
            "the annotations are {} bytes of canonical JSON; the cap is {cap}",
            (7 << 20) + 13
        )),
    );
    assert_failure(
        &run_record("just_over").await,
        &OperatorFailure::MalformedResult(format!(
            "the annotations are {} bytes of canonical JSON; the cap is {cap}",
            cap + 1
        )),
    );
    let report = run_record("at_cap").await;
    assert!(
        matches!(report.outcome, Ok(StageOutput::Annotations(_))),
        "{}",
        brief(&report.outcome)
    );
}

async fn run_reflect(
    attack: &str,
    playbook: Vec<evolve::sandbox::types::PlaybookEntry>,
) -> CallReport {
    let fx = Fixture::new();
    let input = evolve::sandbox::StageInput::Reflect {
        ctx: ctx(serde_json::json!({ "attack": attack })),
        archive: evolve::sandbox::types::ArchiveView {
            rows: vec![row("1")],
            champion: None,
        },
        playbook,
    };
    run_on(&fx, Stage::Reflect, "hostile_reflect", input, timeout(60)).await
}

fn malformed(report: &CallReport) -> &str {
    match failure(report) {
        OperatorFailure::MalformedResult(m) => m,
        other => panic!("expected malformed_result, got {other:?}"),
    }
}

/// One playbook operation is at most 64 KiB, one result's operations and the whole
/// playbook (what reflect was handed plus its adds) at most 1 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_playbook_is_capped_per_operation_and_in_total() {
    use evolve::sandbox::types::PlaybookEntry;
    assert_eq!(
        malformed(&run_reflect("huge_op", Vec::new()).await),
        format!(
            "playbook operation 0 is {} bytes; the cap is {}",
            (100 << 10) + 6,
            evolve::sandbox::MAX_PLAYBOOK_OP_BYTES
        )
    );
    let handed: Vec<PlaybookEntry> = (0..12)
        .map(|i| PlaybookEntry {
            id: format!("old{i}"),
            text: "o".repeat(60 << 10),
            data: "{}".into(),
        })
        .collect();
    let m = run_reflect("grow", handed.clone()).await;
    let m = malformed(&m);
    assert!(
        m.starts_with("the playbook would be ") && m.ends_with("the cap is 1048576"),
        "{m}"
    );
    let m = run_reflect("many_credits", Vec::new()).await;
    let m = malformed(&m);
    assert!(
        m.starts_with("the playbook operations are over 1048576 bytes"),
        "{m}"
    );
    let report = run_reflect("ok", handed).await;
    assert!(
        matches!(report.outcome, Ok(StageOutput::Playbook(_))),
        "{}",
        brief(&report.outcome)
    );
}

/// A guest over its quota and then blocked in a host call (a 30 s sleep), where no
/// epoch tick reaches it, is dropped by the quota watcher's wake-up, not at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_over_quota_and_blocked_in_a_host_call_is_stopped() {
    let fx = Fixture::new();
    let limits = Limits {
        disk_bytes: 8 << 20,
        ..timeout(60)
    };
    let report = run_on(
        &fx,
        Stage::Select,
        "hostile_select",
        select_input("fill_then_sleep"),
        limits,
    )
    .await;
    let b = quota_breach(&report);
    assert!(b.bytes > 8 << 20, "{b:?}");
    // Without the wake-up it would be found only after the 30 s sleep.
    assert!(
        report.elapsed < std::time::Duration::from_secs(10),
        "{:?}",
        report.elapsed
    );
    assert_eq!(entries(&fx.scratch), Vec::<String>::new());
}
