//! Hostile operators against the filesystem, network, environment and capability
//! grants. Every test asserts the typed outcome *and* that nothing outside the call's
//! grants changed on disk.

use crate::common;
use common::*;
use evolve::sandbox::model::ModelError;
use evolve::sandbox::{Capabilities, Limits, OperatorFailure};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Arc;

async fn run_select(fx: &Fixture, attack: &str) -> evolve::sandbox::CallReport {
    let op = load("hostile_select", Stage::Select);
    let grants = fx.grants(Stage::Select, false);
    sandbox()
        .call(
            &op,
            &grants,
            &Limits::default(),
            Capabilities::default(),
            select_input(attack),
        )
        .await
}

async fn run_mutate(
    fx: &Fixture,
    attack: &str,
    operators: bool,
    caps: Capabilities,
) -> evolve::sandbox::CallReport {
    let op = load("hostile_mutate", Stage::Mutate);
    let grants = fx.grants(Stage::Mutate, operators);
    sandbox()
        .call(&op, &grants, &Limits::default(), caps, mutate_input(attack))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_reading_etc_passwd_is_denied() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_select(&fx, "read_passwd").await;
    let msg = reported(&report);
    assert_eq!(
        msg,
        "read /etc/passwd: denied: No such file or directory (os error 44)"
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_reading_outside_target_and_through_planted_symlinks_is_denied() {
    let fx = Fixture::new();
    fx.plant_read_links();
    let before = fx.snapshot();
    let report = run_select(&fx, "read_escape").await;
    let msg = reported(&report);
    assert_all_denied(
        msg,
        &[
            "read ../evaluator/secret.txt",
            "read /target/../evaluator/secret.txt",
            "read /target/../archive.jsonl",
            "read /evaluator/secret.txt",
            "read /archive.jsonl",
            "read /scratch/../target/../evaluator/secret.txt",
            "read /target/link_rel",
            "read /target/link_abs",
            "read /target/link_dir/secret.txt",
            "read /target/sub/link_up2",
            "ls /",
        ],
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

/// Positive control for the denials above: the same component reads what it is
/// granted (including a symlink that stays inside `/target`) and nothing else exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_sees_exactly_its_grants() {
    let fx = Fixture::new();
    fx.plant_read_links();
    let before = fx.snapshot();
    let report = run_select(&fx, "report_fs").await;
    let lines = parents(&report);
    assert_eq!(
        lines,
        [
            "ls /: Err(\"No such file or directory (os error 44)\")",
            "ls /target: Ok([\"file.txt\", \"link_abs\", \"link_dir\", \"link_inner\", \"link_rel\", \"sub\"])",
            "ls /scratch: Ok([])",
            "ls /operators: Err(\"No such file or directory (os error 44)\")",
            "ls /feedback: Err(\"No such file or directory (os error 44)\")",
            "read /target/file.txt: Ok(\"24 bytes: \\\"original target content\\\\n\\\"\")",
            "read /target/link_inner: Ok(\"24 bytes: \\\"original target content\\\\n\\\"\")",
            "read /target/sub/keep.txt: Ok(\"5 bytes: \\\"keep\\\\n\\\"\")",
            "write /scratch/ok.txt: Ok(())",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(fx.scratch.join("ok.txt")).unwrap(),
        "scratch ok"
    );
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["scratch"]),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_cannot_write_read_only_target() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_select(&fx, "write_target").await;
    assert_all_denied(
        reported(&report),
        &[
            "create /target/x",
            "mkdir /target/newdir",
            "append /target/file.txt",
            "truncate /target/file.txt",
            "write /target/file.txt",
            "rename /target/file.txt",
            "remove /target/file.txt",
            "symlink /target/new_link",
            "rmdir /target/sub",
            "hard link /target/file.txt -> /scratch/hl",
            "rename /target/file.txt -> /scratch/hl.moved",
        ],
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_cannot_write_read_only_feedback() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "write_feedback", false, Capabilities::default()).await;
    assert_all_denied(
        reported(&report),
        &[
            "create /feedback/new.txt",
            "mkdir /feedback/newdir",
            "append /feedback/train.json",
            "truncate /feedback/train.json",
            "write /feedback/train.json",
            "rename /feedback/train.json",
            "remove /feedback/train.json",
            "hard link /feedback/train.json -> /target/hl",
            "rename /feedback/train.json -> /target/hl.moved",
            "hard link /feedback/train.json -> /scratch/hl",
            "rename /feedback/train.json -> /scratch/hl.moved",
        ],
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

/// The hostile analyze operator on the fixture, granted as a lifecycle analyze call is:
/// `/target` and `/feedback` read-only, `/scratch`.
async fn run_analyze(fx: &Fixture, attack: &str) -> evolve::sandbox::CallReport {
    let op = load("hostile_analyze", Stage::Analyze);
    let input = evolve::sandbox::StageInput::Analyze {
        ctx: ctx(serde_json::json!({ "attack": attack })),
        rollout: evolve::sandbox::types::Evidence {
            summary: "{}".into(),
            artifacts: Vec::new(),
        },
    };
    let grants = fx.grants(Stage::Analyze, false);
    sandbox()
        .call(
            &op,
            &grants,
            &Limits::default(),
            Capabilities::default(),
            input,
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analyze_reads_its_feedback_bundle_but_cannot_write_it_or_the_candidate() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_analyze(&fx, "write_feedback").await;
    assert_all_denied(
        reported(&report),
        &[
            "create /feedback/new.txt",
            "mkdir /feedback/newdir",
            "append /feedback/train.json",
            "truncate /feedback/train.json",
            "write /feedback/train.json",
            "rename /feedback/train.json",
            "remove /feedback/train.json",
            "hard link /feedback/train.json -> /scratch/hl",
            "rename /feedback/train.json -> /scratch/hl.moved",
            "create /target/new.txt",
            "append /target/file.txt",
            "truncate /target/file.txt",
            "write /target/file.txt",
            "rename /target/file.txt",
            "remove /target/file.txt",
        ],
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
    // What it is granted, it can read: the checks above are about writing.
    let report = run_analyze(&fx, "read_feedback").await;
    let out = report.outcome.as_ref().expect("reading /feedback works");
    assert!(out.to_json().to_string().contains("train.json"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_cannot_touch_operators_outside_the_surface() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "write_operators", false, Capabilities::default()).await;
    let msg = reported(&report);
    assert_all_denied(
        msg,
        &[
            "create /operators/new.txt",
            "append /operators/select/mine/src/lib.rs",
            "truncate /operators/select/mine/src/lib.rs",
            "write /operators/select/mine/src/lib.rs",
            "rename /operators/select/mine/src/lib.rs",
            "remove /operators/select/mine/src/lib.rs",
        ],
    );
    // Not granted at all: the directory does not exist for the guest.
    for line in msg.lines() {
        assert!(
            line.ends_with("No such file or directory (os error 44)"),
            "{line}"
        );
    }
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

/// Positive control: with `operators/**` in the surface, mutate may edit `/operators`,
/// and still nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_writes_operators_when_the_surface_includes_them() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "write_operators", true, Capabilities::default()).await;
    let notes = notes(&report);
    assert_eq!(
        notes[0],
        "BREACH create /operators/new.txt: created (write: Ok(()))"
    );
    assert_eq!(
        std::fs::read_to_string(fx.checkout.join("operators/new.txt")).unwrap(),
        "hostile"
    );
    let lib = fx.checkout.join("operators/select/mine/src");
    assert_eq!(
        std::fs::read_to_string(lib.join("lib.rs.moved")).unwrap(),
        "hostile overwrite"
    );
    assert!(!lib.join("lib.rs").exists());
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["checkout/operators"]),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_cannot_write_outside_its_grants() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "write_outside", false, Capabilities::default()).await;
    let msg = reported(&report);
    let (planted, denials): (Vec<&str>, Vec<&str>) =
        msg.lines().partition(|l| l.contains("planted"));
    assert_eq!(planted, ["symlink /target/esc -> ../evaluator: planted"]);
    assert_all_denied(
        &denials.join("\n"),
        &[
            "create /scratch/../../x",
            "create /scratch/../x",
            "create /target/../x",
            "create /target/../evaluator/x",
            "create /evaluator/x",
            "create ../x",
            "create /x",
            "create /tmp/x",
            "append /target/../evaluator/secret.txt",
            "truncate /target/../evaluator/secret.txt",
            "write /target/../evaluator/secret.txt",
            "rename /target/../evaluator/secret.txt",
            "remove /target/../evaluator/secret.txt",
            "append /target/../archive.jsonl",
            "truncate /target/../archive.jsonl",
            "write /target/../archive.jsonl",
            "rename /target/../archive.jsonl",
            "remove /target/../archive.jsonl",
            "create /target/esc/x",
            "append /target/esc/secret.txt",
            "truncate /target/esc/secret.txt",
            "write /target/esc/secret.txt",
            "rename /target/esc/secret.txt",
            "remove /target/esc/secret.txt",
        ],
    );
    // The only change anywhere: the (inert) symlink inside /target.
    assert_eq!(
        before.changes(&fx.snapshot()),
        ["changed checkout/target", "added checkout/target/esc"]
    );
    assert_eq!(
        std::fs::read_to_string(fx.checkout.join("evaluator/secret.txt")).unwrap(),
        SECRET
    );
}

/// A guest with a read-write `/target` can plant symlinks pointing out of it (a known
/// WASI behaviour). They must stay inert: the guest cannot follow them, and a host
/// that opens candidate files without following symlinks cannot be tricked either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_symlinks_cannot_be_followed() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "plant_symlinks", false, Capabilities::default()).await;
    let notes = notes(&report);
    assert_eq!(
        notes,
        [
            "symlink /target/link_rel -> ../evaluator/secret.txt: ok ()",
            "symlink /target/link_abs -> /etc/passwd: error: Operation not permitted (os error 63)",
            "symlink /target/link_up -> ..: ok ()",
            "symlink /target/link_inner -> file.txt: ok ()",
            "read /target/link_rel: error: Operation not permitted (os error 63)",
            "read /target/link_abs: error: No such file or directory (os error 44)",
            "read /target/link_up/evaluator/secret.txt: error: Operation not permitted (os error 63)",
            "read /target/link_inner: ok \"24 bytes: \\\"original target content\\\\n\\\"\"",
        ]
    );
    assert_no_secret(&notes.join("\n"));
    let target = fx.target();
    for (link, dest) in [
        ("link_rel", "../evaluator/secret.txt"),
        ("link_up", ".."),
        ("link_inner", "file.txt"),
    ] {
        let path = target.join(link);
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} is not a symlink");
        assert_eq!(
            std::fs::read_link(&path).unwrap(),
            std::path::Path::new(dest)
        );
        // The host's safe way to open candidate files refuses to follow them.
        let err = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{link}: {err}");
    }
    assert!(std::fs::symlink_metadata(target.join("link_abs")).is_err());
    // The host's tree reader reports the planted links as links and refuses to read
    // through any of them, however they are named.
    use evolve::safe_tree::{self, EntryKind, TreeError, TreeLimits};
    let entries = safe_tree::walk(&target, TreeLimits::default()).unwrap();
    let links: Vec<(&str, &EntryKind)> = entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::Symlink { .. }))
        .map(|e| (e.path.as_str(), &e.kind))
        .collect();
    assert_eq!(
        links,
        [
            (
                "link_inner",
                &EntryKind::Symlink {
                    target: "file.txt".into()
                }
            ),
            (
                "link_rel",
                &EntryKind::Symlink {
                    target: "../evaluator/secret.txt".into()
                }
            ),
            (
                "link_up",
                &EntryKind::Symlink {
                    target: "..".into()
                }
            ),
        ]
    );
    for path in ["link_rel", "link_inner", "link_up/evaluator/secret.txt"] {
        let err = safe_tree::read_file(&target, path, 1 << 20).unwrap_err();
        assert!(
            matches!(
                err,
                TreeError::NotAFile {
                    found: "symlink",
                    ..
                }
            ),
            "{path}: {err}"
        );
    }
    let copy_dest = fx.root.path().join("artifacts");
    let copied = safe_tree::copy_files(
        &target,
        &["link_rel".into()],
        &copy_dest,
        TreeLimits::default(),
    )
    .unwrap();
    assert!(copied.copied.is_empty(), "{copied:?}");
    assert!(
        matches!(
            copied.refused[..],
            [TreeError::NotAFile {
                found: "symlink",
                ..
            }]
        ),
        "{copied:?}"
    );
    assert!(!copy_dest.join("link_rel").exists());
    assert_eq!(
        before.changes(&fx.snapshot()),
        [
            "changed checkout/target",
            "added checkout/target/link_inner",
            "added checkout/target/link_rel",
            "added checkout/target/link_up",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(fx.checkout.join("evaluator/secret.txt")).unwrap(),
        SECRET
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_odd_file_names_stay_inside_target() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "odd_names", false, Capabilities::default()).await;
    let notes = notes(&report);
    let long = "a".repeat(255);
    let too_long = "b".repeat(256);
    let expected: Vec<String> = [
        "create \"new\\nline\": ok ()".to_string(),
        "create \"-rf\": ok ()".into(),
        "create \"--help\": ok ()".into(),
        "create \" spaced \": ok ()".into(),
        "create \"tab\\tname\": ok ()".into(),
        "create \"uni\u{e9}\": ok ()".into(),
        "create \"back\\\\slash\": ok ()".into(),
        format!("create {long:?}: ok ()"),
        format!("create {too_long:?}: error: Filename too long (os error 37)"),
        "create non-utf8: error: Illegal byte sequence (os error 25)".into(),
    ]
    .into();
    assert_eq!(notes, expected);
    let target = fx.target();
    for name in [
        "new\nline",
        "-rf",
        "--help",
        " spaced ",
        "tab\tname",
        "uni\u{e9}",
        "back\\slash",
        long.as_str(),
    ] {
        assert_eq!(
            std::fs::read(target.join(name)).unwrap(),
            name.as_bytes(),
            "{name:?}"
        );
    }
    assert_eq!(
        before.changes_outside(&fx.snapshot(), &["checkout/target"]),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_huge_file_is_written_only_inside_target() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "huge_file", false, Capabilities::default()).await;
    assert_eq!(notes(&report), ["wrote 50 MiB to /target/huge.bin"]);
    let meta = std::fs::symlink_metadata(fx.target().join("huge.bin")).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), 50 << 20);
    assert_eq!(
        before.changes(&fx.snapshot()),
        ["changed checkout/target", "added checkout/target/huge.bin"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_and_name_lookup_are_denied() {
    let fx = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let before = fx.snapshot();
    let op = load("hostile_select", Stage::Select);
    let input = select_input_with(serde_json::json!({"attack": "socket", "port": port}));
    let report = sandbox()
        .call(
            &op,
            &fx.grants(Stage::Select, false),
            &Limits::default(),
            Capabilities::default(),
            input,
        )
        .await;
    let msg = reported(&report);
    let addr = format!("127.0.0.1:{port}");
    assert_all_denied(
        msg,
        &[
            &format!("tcp connect {addr}"),
            "tcp listen 127.0.0.1:0",
            "udp bind 0.0.0.0:0",
            "dns localhost:80",
            "dns example.com:80",
        ],
    );
    assert!(msg.contains("Permission denied"), "{msg}");
    listener.set_nonblocking(true).unwrap();
    let accepted = listener.accept();
    assert_eq!(
        accepted.map(|(_, peer)| peer).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "a connection arrived"
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_and_arguments_are_empty() {
    let fx = Fixture::new();
    // The test process has an environment (PATH, HOME, ...); none of it may show.
    assert!(std::env::vars_os().next().is_some());
    let before = fx.snapshot();
    let report = run_select(&fx, "env").await;
    assert_eq!(
        parents(&report),
        ["args=[]", "vars=[]", "cwd=/", "stdin=Ok((0, \"\"))"]
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_is_unavailable_without_a_configured_model() {
    let fx = Fixture::new();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "call_model", false, Capabilities::default()).await;
    assert_eq!(
        reported(&report),
        "model: unavailable: no model is configured for this experiment (set `model:` in the recipe)"
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
    // The host-side type the guest saw.
    let _: fn(String) -> ModelError = ModelError::Unavailable;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_refuse_non_train_names_without_reaching_the_backend() {
    let fx = Fixture::new();
    let backend = Arc::new(RecordingTasks::default());
    let caps = Capabilities {
        tasks: backend.clone(),
        ..Capabilities::default()
    };
    let before = fx.snapshot();
    let report = run_mutate(&fx, "call_tasks_gate", false, caps).await;
    let notes = notes(&report);
    assert_eq!(
        notes,
        [
            "train-tasks: [\"train-1\"]",
            "gate: error TasksError::UnknownTask(\"`gate-secret` is not a train task\")",
            "unknown: error TasksError::UnknownTask(\"`no-such-task` is not a train task\")",
            "mixed: error TasksError::UnknownTask(\"`gate-secret` is not a train task\")",
            "zero-reps: error TasksError::InvalidRequest(\"name at least one task and at least one repetition\")",
            "train: ok [(\"train-1\", 0, Some(0.5))]",
        ]
    );
    // Only the one legitimate request reached the backend.
    assert_eq!(
        *backend.runs.lock().unwrap(),
        vec![vec!["train-1".to_string()]]
    );
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

/// A failing call leaves the sandbox usable and shares nothing with the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_call_does_not_affect_the_next_one() {
    let fx = Fixture::new();
    let first = run_select(&fx, "panic").await;
    assert!(matches!(first.outcome, Err(OperatorFailure::Trap { .. })));
    let second = run_select(&fx, "ok").await;
    assert_eq!(parents(&second), ["0"]);
    assert!(
        second.stderr.bytes.is_empty(),
        "stderr leaked across calls: {}",
        stderr(&second)
    );
}

/// A candidate whose `target` entry is itself a symlink (e.g. a hostile seed commit)
/// must not turn the grant into access to wherever the link points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_directory_that_is_a_symlink_is_refused() {
    let fx = Fixture::new();
    std::fs::remove_dir_all(fx.target()).unwrap();
    std::os::unix::fs::symlink("evaluator", fx.target()).unwrap();
    let before = fx.snapshot();
    let report = run_mutate(&fx, "write_outside", false, Capabilities::default()).await;
    match failure(&report) {
        OperatorFailure::Host(msg) => {
            assert!(msg.starts_with("cannot grant "), "{msg}");
            assert!(msg.ends_with(" as /target: it is a symbolic link"), "{msg}");
        }
        other => panic!("expected a host error, got {}", brief(other)),
    }
    assert_eq!(before.changes(&fx.snapshot()), Vec::<String>::new());
}

/// Issue 22: an artifact that is a symlink was dropped silently, and one bad artifact
/// dropped the valid ones with it. Each refused artifact is reported (in the report and
/// at the end of the stage's stderr log), the valid one stays, and no link is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_artifacts_are_each_refused_and_the_valid_one_kept() {
    let fx = Fixture::new();
    let op = load("hostile_validate", Stage::Validate);
    let input = evolve::sandbox::StageInput::Validate {
        ctx: ctx(serde_json::json!({"attack": "bad_artifacts"})),
        changed: Vec::new(),
        rollout: None,
    };
    let report = sandbox()
        .call(
            &op,
            &fx.grants(Stage::Validate, false),
            &Limits::default(),
            Capabilities::default(),
            input,
        )
        .await;
    match &report.outcome {
        Ok(evolve::sandbox::StageOutput::Validation(v)) => assert_eq!(v.artifacts, ["good.txt"]),
        other => panic!("expected a validation, got {}", brief(other)),
    }
    assert_eq!(
        report.refused_artifacts,
        [
            "artifact `link.txt` is a symbolic link, not a regular file (links are not followed)",
            "artifact path `../x` must be a relative path without `..`",
            "artifact `dir` is a directory, not a regular file (links are not followed)",
            "artifact `missing.txt` cannot be read in /scratch: No such file or directory (os error 2)",
        ]
    );
    let logs = fx.root.path().join("logs");
    report.write_logs(&logs, "operator").unwrap();
    let log = std::fs::read_to_string(logs.join("operator.stderr.log")).unwrap();
    assert!(
        log.contains("[evolve: refused artifact `link.txt` is a symbolic link"),
        "{log}"
    );
}
