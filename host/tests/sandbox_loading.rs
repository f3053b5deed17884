//! Loading hostile or broken components: file safety inside the checkout, the world
//! contract, the host's checks on `meta` answers, and the compile cache.

use crate::common;
use common::*;
use evolve::sandbox::types::ConfigViolation;
use evolve::sandbox::{
    CacheSource, Capabilities, ContractError, Grants, Limits, LoadError, LoadErrorKind,
    LoadedOperator, OperatorFailure, Sandbox, SandboxConfig, StageInput, StageOutput, hex,
};
use serde_json::json;
use sha2::Digest;
use std::path::Path;

fn contract_error(result: Result<LoadedOperator, LoadError>) -> ContractError {
    match result {
        Err(LoadError {
            kind: LoadErrorKind::Contract(e),
            ..
        }) => e,
        Err(other) => panic!("expected a contract error, got {other}"),
        Ok(op) => panic!("{} loaded", op.origin),
    }
}

fn unreadable(result: Result<LoadedOperator, LoadError>) -> (String, String) {
    match result {
        Err(LoadError {
            origin,
            kind: LoadErrorKind::Unreadable(why),
        }) => (origin, why),
        Err(other) => panic!("expected an unreadable error, got {other}"),
        Ok(op) => panic!("{} loaded", op.origin),
    }
}

async fn call(
    sandbox: &Sandbox,
    op: &LoadedOperator,
    input: StageInput,
) -> evolve::sandbox::CallReport {
    let scratch = tempfile::tempdir().unwrap();
    let limits = Limits {
        timeout: std::time::Duration::from_secs(60),
        ..Limits::default()
    };
    sandbox
        .call(
            op,
            &Grants::scratch_only(scratch.path()),
            &limits,
            Capabilities::default(),
            input,
        )
        .await
}

// ---- the world contract -------------------------------------------------------------

#[test]
fn a_core_module_is_refused() {
    let fx = Fixture::new();
    std::fs::write(fx.checkout.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let err = sandbox()
        .load_from_checkout(Stage::Select, &fx.checkout, "core.wasm")
        .err()
        .expect("refused");
    assert_eq!(
        err,
        LoadError {
            origin: "core.wasm".into(),
            kind: LoadErrorKind::Contract(ContractError::CoreModule)
        }
    );
    assert!(err.to_string().contains("not a component"), "{err}");
}

#[test]
fn a_random_file_is_not_wasm() {
    let fx = Fixture::new();
    std::fs::write(fx.checkout.join("script.wasm"), b"#!/bin/sh\nrm -rf /\n").unwrap();
    std::fs::write(fx.checkout.join("empty.wasm"), b"").unwrap();
    for name in ["script.wasm", "empty.wasm"] {
        let err = sandbox()
            .load_from_checkout(Stage::Select, &fx.checkout, name)
            .err()
            .expect("refused");
        assert_eq!(
            err,
            LoadError {
                origin: name.into(),
                kind: LoadErrorKind::Contract(ContractError::NotWasm)
            }
        );
    }
}

#[test]
fn a_truncated_component_is_invalid() {
    let bytes = component("hostile_select");
    for cut in [9, bytes.len() / 2, bytes.len() - 1] {
        match contract_error(sandbox().load_bytes(Stage::Select, &bytes[..cut], "cut".into())) {
            ContractError::Invalid(msg) => assert!(!msg.is_empty()),
            other => panic!("cut at {cut}: expected Invalid, got {other:?}"),
        }
    }
}

#[test]
fn an_empty_component_exports_no_world() {
    let err =
        contract_error(sandbox().load_bytes(Stage::Select, b"\0asm\x0d\0\x01\0", "empty".into()));
    assert_eq!(err, ContractError::WrongWorld { exported: vec![] });
}

#[test]
fn a_component_for_another_stage_is_the_wrong_world() {
    let err = contract_error(sandbox().load_bytes(
        Stage::Select,
        &component("hostile_mutate"),
        "m".into(),
    ));
    assert_eq!(
        err,
        ContractError::WrongWorld {
            exported: vec!["`mutate`".into()]
        }
    );
    assert_eq!(
        err.to_string(),
        "exports the `mutate` world, not this stage's"
    );
    for stage in [Stage::Mutate, Stage::Gate, Stage::Reflect] {
        let err =
            contract_error(sandbox().load_bytes(stage, &component("hostile_select"), "s".into()));
        assert_eq!(
            err,
            ContractError::WrongWorld {
                exported: vec!["`select`".into()]
            }
        );
    }
}

#[test]
fn a_select_component_importing_the_model_is_refused() {
    let err = contract_error(sandbox().load_bytes(
        Stage::Select,
        &component("wrong_imports"),
        "w".into(),
    ));
    assert_eq!(
        err,
        ContractError::ForbiddenImport {
            import: "evolve:operator/model@0.1.0".into(),
            stage: Stage::Select
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_describe_claiming_another_stage_is_a_contract_mismatch() {
    let op = load("lying_raw", Stage::Select);
    let report = call(&sandbox(), &op, StageInput::Describe).await;
    assert_failure(
        &report,
        &OperatorFailure::ContractMismatch(
            "describe() says stage `mutate` but the component exports the `select` world".into(),
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_normalize_config_answers_are_refused() {
    let op = load("lying_raw", Stage::Select);
    for (raw, expected) in [
        (
            "empty-violations",
            "normalize-config failed without naming a violation",
        ),
        (
            "not-json",
            "normalized config is not valid JSON (line 1, column 2)",
        ),
        ("array", "normalized config must be a JSON object"),
    ] {
        let report = call(&sandbox(), &op, StageInput::NormalizeConfig(raw.into())).await;
        assert_failure(&report, &OperatorFailure::MalformedResult(expected.into()));
    }
    let report = call(&sandbox(), &op, StageInput::NormalizeConfig("{}".into())).await;
    assert!(matches!(&report.outcome, Ok(StageOutput::NormalizedConfig(Ok(m))) if m.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_component_returning_a_blank_parent_is_malformed() {
    let op = load("lying_raw", Stage::Select);
    let report = call(&sandbox(), &op, select_input_with(json!({"mode": "blank"}))).await;
    assert_failure(
        &report,
        &OperatorFailure::MalformedResult("select returned an empty parent id".into()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_for_another_stage_is_refused_before_running() {
    let op = load("hostile_select", Stage::Select);
    let report = call(&sandbox(), &op, mutate_input("ok")).await;
    assert_failure(
        &report,
        &OperatorFailure::Host("a mutate input was sent to a select operator".into()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_reports_the_declared_schema() {
    let op = load("hostile_select", Stage::Select);
    let report = call(&sandbox(), &op, StageInput::Describe).await;
    let Ok(StageOutput::Description(d)) = &report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(
        (d.stage, d.name.as_str()),
        (Stage::Select, "hostile_select")
    );
    let schema: serde_json::Value = serde_json::from_str(&d.config_schema).unwrap();
    assert_eq!(schema["required"], json!(["attack"]));
    assert_eq!(schema["additionalProperties"], json!(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_violations_are_sorted_and_never_echo_values() {
    let op = load("hostile_select", Stage::Select);
    let secret = "sk-live-DO-NOT-ECHO-0d9e";
    let raw = json!({"extra": secret, "port": secret, "attack": 5}).to_string();
    let report = call(&sandbox(), &op, StageInput::NormalizeConfig(raw)).await;
    let Ok(StageOutput::NormalizedConfig(Err(violations))) = &report.outcome else {
        panic!("{:?}", report.outcome)
    };
    let v = |path: &'static str, message: &'static str| (path.to_string(), message.to_string());
    let pairs = |v: &[ConfigViolation]| -> Vec<(String, String)> {
        v.iter()
            .map(|v| (v.path.clone(), v.message.clone()))
            .collect()
    };
    assert_eq!(
        pairs(violations),
        [
            v("attack", "must be a string"),
            v("extra", "unknown field"),
            v("port", "must be an integer")
        ]
    );
    let text = format!(
        "{violations:?}{}{}",
        stderr(&report),
        String::from_utf8_lossy(&report.stdout.bytes)
    );
    assert!(!text.contains(secret), "{text}");

    let raw = json!({"port": 70000, "attack": "spin"}).to_string();
    let report = call(&sandbox(), &op, StageInput::NormalizeConfig(raw)).await;
    let Ok(StageOutput::NormalizedConfig(Err(violations))) = &report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(pairs(violations), [v("port", "must be <= 65535")]);

    let report = call(
        &sandbox(),
        &op,
        StageInput::NormalizeConfig(r#"{"attack":"spin"}"#.into()),
    )
    .await;
    let Ok(StageOutput::NormalizedConfig(Ok(config))) = &report.outcome else {
        panic!("{:?}", report.outcome)
    };
    assert_eq!(
        serde_json::Value::Object(config.clone()),
        json!({"attack": "spin"})
    );
}

// ---- reading the component file from a checkout -------------------------------------

#[test]
fn a_component_inside_the_checkout_loads() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.checkout.join("operators/select/mine")).unwrap();
    std::fs::write(
        fx.checkout.join("operators/select/mine/op.wasm"),
        component("hostile_select"),
    )
    .unwrap();
    let op = sandbox()
        .load_from_checkout(Stage::Select, &fx.checkout, "operators/select/mine/op.wasm")
        .unwrap();
    assert_eq!(op.origin, "operators/select/mine/op.wasm");
    assert_eq!(
        op.digest,
        <[u8; 32]>::from(sha2::Sha256::digest(component("hostile_select")))
    );
}

/// Past the racy window: a file written before now is settled, so its digest is
/// remembered on the next load.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(150));
}

#[test]
fn a_component_changed_in_its_checkout_is_read_again() {
    let fx = Fixture::new();
    let path = fx.checkout.join("op.wasm");
    std::fs::write(&path, component("hostile_select")).unwrap();
    settle();
    let sb = sandbox();
    let load = || sb.load_from_checkout(Stage::Select, &fx.checkout, "op.wasm");
    let first = load().unwrap();
    let again = load().unwrap();
    assert_eq!(again.cache, CacheSource::Memory);
    assert_eq!(again.digest, first.digest);
    // Rewritten in place at once: the file is read again (and refused for the wrong world).
    std::fs::write(&path, component("hostile_mutate")).unwrap();
    assert!(matches!(
        contract_error(load()),
        ContractError::WrongWorld { .. }
    ));
    // Settled, then replaced by a rename: a new inode, read again.
    settle();
    assert!(matches!(
        contract_error(load()),
        ContractError::WrongWorld { .. }
    ));
    let other = fx.checkout.join("other.wasm");
    std::fs::write(
        &other,
        with_custom_section(&component("hostile_select"), "v2", b"2"),
    )
    .unwrap();
    std::fs::rename(&other, &path).unwrap();
    let replaced = load().unwrap();
    assert_ne!(replaced.digest, first.digest);
    assert_eq!(
        replaced.digest,
        <[u8; 32]>::from(sha2::Sha256::digest(std::fs::read(&path).unwrap()))
    );
}

#[test]
fn paths_leaving_the_checkout_are_unreadable() {
    let fx = Fixture::new();
    let outside = fx.root.path().join("x.wasm");
    std::fs::write(&outside, component("hostile_select")).unwrap();
    let abs = outside.display().to_string();
    for path in [
        "../x.wasm",
        abs.as_str(),
        "target/../../x.wasm",
        "./x.wasm",
        "target//x.wasm",
        "",
    ] {
        let (origin, why) =
            unreadable(sandbox().load_from_checkout(Stage::Select, &fx.checkout, path));
        assert_eq!(origin, path);
        assert!(
            why.starts_with("operator path ")
                && why.ends_with("must be a relative path without `..`"),
            "{why}"
        );
    }
}

#[test]
fn symlinks_are_never_followed() {
    let fx = Fixture::new();
    let c = &fx.checkout;
    std::fs::write(
        fx.root.path().join("outside.wasm"),
        component("hostile_select"),
    )
    .unwrap();
    std::fs::write(c.join("inside.wasm"), component("hostile_select")).unwrap();
    std::os::unix::fs::symlink("../outside.wasm", c.join("link_out.wasm")).unwrap();
    std::os::unix::fs::symlink(fx.root.path().join("outside.wasm"), c.join("link_abs.wasm"))
        .unwrap();
    std::os::unix::fs::symlink("inside.wasm", c.join("link_in.wasm")).unwrap();
    std::os::unix::fs::symlink("..", c.join("up")).unwrap();
    for path in ["link_out.wasm", "link_abs.wasm", "link_in.wasm"] {
        let (_, why) = unreadable(sandbox().load_from_checkout(Stage::Select, c, path));
        assert_eq!(
            why, "not a regular file (symlinks are not followed)",
            "{path}"
        );
    }
    // A directory symlink leading out of the checkout.
    let (_, why) = unreadable(sandbox().load_from_checkout(Stage::Select, c, "up/outside.wasm"));
    assert!(!why.is_empty());
    // Positive control: the same file, not through a link, loads.
    assert!(
        sandbox()
            .load_from_checkout(Stage::Select, c, "inside.wasm")
            .is_ok()
    );
}

#[test]
fn directories_fifos_and_missing_files_are_unreadable() {
    let fx = Fixture::new();
    let c = &fx.checkout;
    std::fs::create_dir(c.join("dir.wasm")).unwrap();
    let fifo = std::ffi::CString::new(c.join("fifo.wasm").display().to_string()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    for path in ["dir.wasm", "fifo.wasm"] {
        let (_, why) = unreadable(sandbox().load_from_checkout(Stage::Select, c, path));
        assert_eq!(
            why, "not a regular file (symlinks are not followed)",
            "{path}"
        );
    }
    let (_, why) = unreadable(sandbox().load_from_checkout(Stage::Select, c, "missing.wasm"));
    assert!(why.contains("No such file"), "{why}");
}

#[test]
fn files_over_64_mib_are_unreadable() {
    let fx = Fixture::new();
    let c = &fx.checkout;
    // Sparse files: cheap to create.
    std::fs::File::create(c.join("big.wasm"))
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    std::fs::File::create(c.join("limit.wasm"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let (_, why) = unreadable(sandbox().load_from_checkout(Stage::Select, c, "big.wasm"));
    assert_eq!(
        why,
        format!("{} bytes is over the 64 MiB limit", (64u64 << 20) + 1)
    );
    // Exactly at the limit it is read (and then found not to be WebAssembly).
    let err = contract_error(sandbox().load_from_checkout(Stage::Select, c, "limit.wasm"));
    assert_eq!(err, ContractError::NotWasm);
}

// ---- the compile cache ----------------------------------------------------------------

fn entry_files(dir: &Path, op: &LoadedOperator) -> (std::path::PathBuf, std::path::PathBuf) {
    let prefix = hex(&op.digest);
    let mut found: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .collect();
    found.sort();
    assert_eq!(found.len(), 2, "{found:?}");
    let mac = found
        .iter()
        .find(|p| p.extension().unwrap() == "mac")
        .unwrap()
        .clone();
    let cwasm = found
        .iter()
        .find(|p| p.extension().unwrap() == "cwasm")
        .unwrap()
        .clone();
    (cwasm, mac)
}

fn disk_sandbox(dir: &Path) -> std::sync::Arc<Sandbox> {
    Sandbox::new(SandboxConfig {
        cache_dir: Some(dir.to_path_buf()),
        fuel: false,
    })
    .unwrap()
}

async fn assert_runs(sandbox: &Sandbox, op: &LoadedOperator) {
    let report = call(sandbox, op, select_input("ok")).await;
    assert_eq!(parents(&report), ["0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_load_comes_from_memory() {
    let sandbox = Sandbox::new(SandboxConfig::default()).unwrap();
    let bytes = component("hostile_select");
    let first = sandbox
        .load_bytes(Stage::Select, &bytes, "a".into())
        .unwrap();
    let second = sandbox
        .load_bytes(Stage::Select, &bytes, "b".into())
        .unwrap();
    assert_eq!(
        (first.cache, second.cache),
        (CacheSource::Compiled, CacheSource::Memory)
    );
    assert_eq!(first.digest, second.digest);
    assert_runs(&sandbox, &second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sandbox_loads_from_the_disk_cache() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let bytes = component("hostile_select");
    let first = disk_sandbox(&cache)
        .load_bytes(Stage::Select, &bytes, "a".into())
        .unwrap();
    assert_eq!(first.cache, CacheSource::Compiled);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&cache), 0o700);
    assert_eq!(mode(&cache.join("cache.key")), 0o600);
    let sandbox = disk_sandbox(&cache);
    let second = sandbox
        .load_bytes(Stage::Select, &bytes, "b".into())
        .unwrap();
    assert_eq!(second.cache, CacheSource::Disk);
    assert_runs(&sandbox, &second).await;
    sandbox.clear_memory_cache();
    assert_eq!(
        sandbox
            .load_bytes(Stage::Select, &bytes, "c".into())
            .unwrap()
            .cache,
        CacheSource::Disk
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_cache_entry_is_recompiled_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let bytes = component("hostile_select");
    let op = disk_sandbox(cache)
        .load_bytes(Stage::Select, &bytes, "a".into())
        .unwrap();
    let (cwasm, mac) = entry_files(cache, &op);

    type Tamper = fn(&Path, &Path);
    let tampers: [(&str, Tamper); 5] = [
        ("flip a code byte", |cwasm, _| {
            let mut data = std::fs::read(cwasm).unwrap();
            let mid = data.len() / 2;
            data[mid] ^= 0xff;
            std::fs::write(cwasm, data).unwrap();
        }),
        ("truncate", |cwasm, _| {
            let data = std::fs::read(cwasm).unwrap();
            std::fs::write(cwasm, &data[..data.len() / 3]).unwrap();
        }),
        ("flip a MAC byte", |_, mac| {
            let mut data = std::fs::read(mac).unwrap();
            data[0] ^= 1;
            std::fs::write(mac, data).unwrap();
        }),
        ("delete the MAC", |_, mac| {
            std::fs::remove_file(mac).unwrap()
        }),
        ("replace the key", |cwasm, _| {
            std::fs::write(cwasm.parent().unwrap().join("cache.key"), [7u8; 32]).unwrap();
        }),
    ];
    for (what, tamper) in tampers {
        tamper(&cwasm, &mac);
        let sandbox = disk_sandbox(cache);
        let op = sandbox
            .load_bytes(Stage::Select, &bytes, "b".into())
            .unwrap();
        assert_eq!(op.cache, CacheSource::Compiled, "{what}");
        assert_runs(&sandbox, &op).await;
        // The recompile rewrote a good entry.
        assert_eq!(
            disk_sandbox(cache)
                .load_bytes(Stage::Select, &bytes, "c".into())
                .unwrap()
                .cache,
            CacheSource::Disk
        );
    }
}

/// Entries the host itself wrote, but for other bytes, must not be reused either: an
/// entry is bound to the digest of the component it was compiled from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_entry_swapped_between_components_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let sandbox = disk_sandbox(cache);
    let honest = sandbox
        .load_bytes(Stage::Select, &component("hostile_select"), "h".into())
        .unwrap();
    let liar = sandbox
        .load_bytes(Stage::Select, &component("lying_raw"), "l".into())
        .unwrap();
    let (h_cwasm, h_mac) = entry_files(cache, &honest);
    let (l_cwasm, l_mac) = entry_files(cache, &liar);
    std::fs::copy(&h_cwasm, &l_cwasm).unwrap();
    std::fs::copy(&h_mac, &l_mac).unwrap();

    let sandbox = disk_sandbox(cache);
    let liar = sandbox
        .load_bytes(Stage::Select, &component("lying_raw"), "l".into())
        .unwrap();
    assert_eq!(liar.cache, CacheSource::Compiled);
    // And it really runs lying_raw's code, not hostile_select's.
    let report = call(&sandbox, &liar, StageInput::Describe).await;
    assert_failure(
        &report,
        &OperatorFailure::ContractMismatch(
            "describe() says stage `mutate` but the component exports the `select` world".into(),
        ),
    );
}

/// Append a custom section: a valid component with other bytes (as after a self-edit).
fn with_custom_section(bytes: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modified_component_never_reuses_the_old_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let original = component("hostile_select");
    let modified = with_custom_section(&original, "evolve-test", b"self-edit");
    let sandbox = disk_sandbox(cache);
    let a = sandbox
        .load_bytes(Stage::Select, &original, "a".into())
        .unwrap();
    let b = sandbox
        .load_bytes(Stage::Select, &modified, "b".into())
        .unwrap();
    assert_eq!(
        (a.cache, b.cache),
        (CacheSource::Compiled, CacheSource::Compiled)
    );
    assert_ne!(a.digest, b.digest);
    assert_runs(&sandbox, &b).await;
    let fresh = disk_sandbox(cache);
    for (bytes, digest) in [(&modified, b.digest), (&original, a.digest)] {
        let op = fresh.load_bytes(Stage::Select, bytes, "c".into()).unwrap();
        assert_eq!((op.cache, op.digest), (CacheSource::Disk, digest));
    }
}
