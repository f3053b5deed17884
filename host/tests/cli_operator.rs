//! The operator author's command line, run as a user would run it.

use super::cmd::evolve;
use std::path::Path;
use std::process::Command;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

#[test]
fn list_describe_check_and_run_built_in_operators() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = evolve(["operator", "list", "--json"]).cwd(here).run();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let greedy = list
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "greedy")
        .expect("select/greedy listed");
    assert_eq!(greedy["stage"], "select");
    assert_eq!(greedy["sha256"].as_str().unwrap().len(), 64);

    let out = evolve(["operator", "run", "select/greedy", "--json"])
        .cwd(here)
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Sample archive: 1 and 2 tie at 0.667, 3 is not eligible: the first of the tie wins.
    assert_eq!(run["result"]["parents"], serde_json::json!(["1"]));

    let out = evolve([
        "operator",
        "check",
        "select/greedy",
        "--config",
        r#"{"bogus": "sk-SECRET"}"#,
    ])
    .cwd(here)
    .run();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("- bogus: unknown field"), "{err}");
    assert!(
        !err.contains("sk-SECRET"),
        "a violation must not echo the value: {err}"
    );
}

#[test]
fn errors_name_the_problem_and_exit_2_on_usage() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = evolve(["operator", "describe", "nostage/x"])
        .cwd(here)
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "evolve: unknown stage `nostage`\n  hint: stages: select, rollout, analyze, mutate, validate, novelty, gate, record, reflect (and driver)\n"
    );
    let out = evolve(["operator", "describe", "select/nope"])
        .cwd(here)
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("evolve: no built-in operator `select/nope`"));

    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let out = evolve(["operator", "describe", core.to_str().unwrap()])
        .cwd(here)
        .run();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is a core WebAssembly module, not a component"),
        "{}",
        text(&out.stderr)
    );

    let out = evolve(["operator", "bogus-command"]).cwd(here).run();
    assert_eq!(out.status.code(), Some(2));
}

/// `evolve operator new` scaffolds, for every stage, a crate that builds to a
/// component the host accepts for that stage, and whose own test passes.
#[test]
fn scaffolded_crates_build_and_pass_their_tests() {
    let dir = tempfile::tempdir().unwrap();
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scaffold-target");
    for stage in [
        "select", "rollout", "analyze", "mutate", "validate", "novelty", "gate", "record",
        "reflect", "driver",
    ] {
        let name = format!("my_{stage}");
        let crate_dir = dir.path().join(&name);
        let out = evolve([
            "operator",
            "new",
            stage,
            &name,
            "--dir",
            crate_dir.to_str().unwrap(),
        ])
        .cwd(dir.path())
        .run();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

        let built = evolve(["operator", "build", crate_dir.to_str().unwrap(), "--json"])
            .env("CARGO_TARGET_DIR", &target_dir)
            .env("CARGO_NET_OFFLINE", "true")
            .ok()
            .json();
        assert_eq!(built[0]["stage"], stage);
        assert_eq!(built[0]["name"], name.as_str());
        assert!(built[0].get("empty_config_violations").is_none(), "{built}");

        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["test", "--offline", "--quiet", "--manifest-path"])
            .arg(crate_dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{stage}: {}", text(&out.stderr));
    }
    // The name is checked before anything is written.
    let out = evolve(["operator", "new", "select", "Bad-Name"])
        .cwd(dir.path())
        .run();
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.path().join("Bad-Name").exists());
}
