//! Agent-driven runs (`evolve run --driver`): a driver's revisions are checked, archived
//! and stamped on the next generation's certified record; it can never change the
//! fixed recipe keys, and it never sees sealed or anchor data or private task names.

use crate::ws;
use serde_json::{Value, json};
use ws::{Exp, Spec, component, text};

fn driver_path() -> String {
    component("driver_scripted").display().to_string()
}

/// An initialized experiment of `generations` generations with `mutate` as mutate's config.
fn experiment(generations: u32, mutate: Value) -> Exp {
    let e = Exp::new(&Spec {
        generations,
        mutate,
        ..Spec::default()
    });
    e.init();
    e
}

/// `evolve run ws --driver DRIVER --driver-config CONFIG`, which must succeed.
fn run_driven(e: &Exp, driver: &str, config: Value) -> String {
    let out = e.run_ok(&[
        "run",
        "ws",
        "--driver",
        driver,
        "--driver-config",
        &config.to_string(),
    ]);
    text(&out)
}

fn of_type(e: &Exp, t: &str) -> Vec<Value> {
    e.events()
        .into_iter()
        .filter(|ev| ev["type"] == t)
        .collect()
}

/// generation → the recipe digest its select event stamps.
fn select_digests(e: &Exp) -> Vec<(u64, String)> {
    of_type(e, "select")
        .iter()
        .map(|s| {
            (
                s["body"]["generation"].as_u64().unwrap(),
                s["body"]["recipe_sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn genesis_digest(e: &Exp) -> String {
    let log = e.log();
    let row0 = log.iter().find(|r| r["genid"] == "0").unwrap();
    row0["recipe_sha256"].as_str().unwrap().to_string()
}

fn verify_ok(e: &Exp) {
    let v = e.json(&["verify", "ws", "--json"]);
    assert_eq!(v["ok"], json!(true), "{v:#}");
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_driver_that_changes_the_evaluator_the_surface_or_the_budget_is_refused() {
    for (action, field) in [
        ("evaluator", "`evaluator."),
        ("surface", "`surface.include`"),
        ("budget", "`experiment.budget_usd`"),
    ] {
        let e = experiment(2, json!({"action": "climb"}));
        let out = run_driven(&e, &driver_path(), json!({"action": action, "at": 1}));
        assert!(out.contains("driver after gen 1: refused"), "{out}");
        let revisions = of_type(&e, "driver_revision");
        let refused: Vec<&Value> = revisions
            .iter()
            .filter(|r| r["body"]["outcome"] == "refused")
            .collect();
        assert_eq!(refused.len(), 1, "{action}: {revisions:#?}");
        let body = &refused[0]["body"];
        assert_eq!(body["accepted"], json!(false));
        assert_eq!(body["after_generation"], json!(1));
        let reason = body["reason"].as_str().unwrap();
        assert!(
            reason.contains(field) && reason.contains("fixed"),
            "{action}: {reason}"
        );
        // Nothing changed: every generation ran under gen/0's recipe.
        let gen0 = genesis_digest(&e);
        assert_eq!(body["recipe_sha256"], json!(gen0));
        let digests = select_digests(&e);
        assert_eq!(digests.len(), 2);
        assert!(digests.iter().all(|(_, d)| *d == gen0), "{digests:?}");
        verify_ok(&e);
    }
}

#[test]
fn a_revision_that_names_a_file_or_a_bad_config_is_refused_with_every_reason() {
    let e = experiment(2, json!({"action": "climb"}));
    run_driven(
        &e,
        &driver_path(),
        json!({"action": "rebind", "at": 0, "operator": "/etc/passwd"}),
    );
    let r = &of_type(&e, "driver_revision")[0]["body"];
    assert_eq!(r["outcome"], "refused", "{r:#}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("not a built-in select operator"),
        "{r:#}"
    );

    let e = experiment(1, json!({"action": "climb"}));
    run_driven(
        &e,
        &driver_path(),
        json!({"action": "rebind", "at": 0, "operator": "greedy", "config": {"k": 3}}),
    );
    let r = &of_type(&e, "driver_revision")[0]["body"];
    assert_eq!(r["outcome"], "refused", "{r:#}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("operators.select.config.k: unknown field"),
        "{r:#}"
    );

    let e = experiment(1, json!({"action": "climb"}));
    run_driven(&e, &driver_path(), json!({"action": "not_json", "at": 0}));
    let r = &of_type(&e, "driver_revision")[0]["body"];
    assert_eq!(r["outcome"], "failed", "{r:#}");
    assert!(
        r["reason"].as_str().unwrap().contains("revision recipe"),
        "{r:#}"
    );
}

#[test]
fn an_honest_revision_is_stamped_on_the_next_generation_and_runs_it() {
    let e = experiment(3, json!({"action": "climb"}));
    let out = run_driven(
        &e,
        &driver_path(),
        json!({"action": "rebind", "at": 1, "operator": "newest"}),
    );
    assert!(
        out.contains("driver after gen 1: accepted (select changed)"),
        "{out}"
    );
    let revisions = of_type(&e, "driver_revision");
    // One call before each generation: after gen 0, 1 and 2.
    let after: Vec<u64> = revisions
        .iter()
        .map(|r| r["body"]["after_generation"].as_u64().unwrap())
        .collect();
    assert_eq!(after, [0, 1, 2]);
    let accepted = &revisions[1]["body"];
    assert_eq!(accepted["outcome"], "accepted", "{accepted:#}");
    assert_eq!(accepted["changed"], json!(["select"]));
    assert_eq!(
        accepted["recipe"]["operators"]["select"]["operator"],
        "newest"
    );
    let revised = accepted["recipe_sha256"].as_str().unwrap().to_string();
    let component = accepted["rebound"]["select"]["component_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(accepted["rebound"]["select"]["operator"], "newest");

    // Generation 1 ran under gen/0's recipe; 2 and 3 under the revision.
    let gen0 = genesis_digest(&e);
    assert_ne!(gen0, revised);
    assert_eq!(
        select_digests(&e),
        [
            (1, gen0.clone()),
            (2, revised.clone()),
            (3, revised.clone())
        ]
    );
    let log = e.log();
    let digest_of = |g: &str| {
        log.iter().find(|r| r["genid"] == g).unwrap()["recipe_sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        (digest_of("1"), digest_of("2")),
        (gen0.clone(), revised.clone())
    );
    let shown = e.json(&["show", "2", "-w", "ws", "--json"]);
    assert_eq!(shown["recipe_sha256"], json!(revised));

    // Generation 2's select loaded the frozen `newest`, generation 1's did not.
    let loaded = |g: &str| {
        read_json(&e.ws.join(format!("runs/gen-{g}/select/result.json")))["component_sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(loaded("2"), component);
    assert_ne!(loaded("1"), component);
    verify_ok(&e);

    // A resumed run without --driver keeps the revised recipe.
    e.run_ok(&["run", "ws", "--max-generations", "4"]);
    assert_eq!(select_digests(&e).last().unwrap(), &(4, revised.clone()));
    assert_eq!(loaded("4"), component);
    verify_ok(&e);
    // The evidence bundle carries the revisions: `verify --bundle` re-checks each
    // revision and each generation's stamped digest against gen/0's recipe.
    e.run_ok(&["export", "evidence", "-w", "ws"]);
    let v = e.json(&["verify", "--bundle", "evidence", "--json"]);
    assert_eq!(v["ok"], json!(true), "{v:#}");

    // A frozen component altered on disk is caught by verify and refused at load.
    let frozen =
        e.ws.join(format!(".evolve/recipes/{revised}/operators/select.wasm"));
    let mut bytes = std::fs::read(&frozen).unwrap();
    bytes.push(0);
    std::fs::write(&frozen, bytes).unwrap();
    let v = e.json(&["verify", "ws", "--json"]);
    assert_eq!(v["ok"], json!(false));
    assert!(
        v["repository_findings"].to_string().contains("select.wasm"),
        "{v:#}"
    );
}

/// Gate and sealed task names, from the workspace's frozen task set.
fn private_task_names(e: &Exp) -> Vec<String> {
    let ts = serde_json::from_str::<Value>(&e.gen0_file("evaluator/task-set.json")).unwrap();
    let mut out = Vec::new();
    for split in ["gate", "sealed"] {
        for t in ts["split"][split].as_array().unwrap() {
            out.push(t.as_str().unwrap().to_string());
        }
    }
    assert!(!out.is_empty(), "{ts:#}");
    out
}

#[test]
fn sealed_data_never_reaches_the_driver_and_the_session_ends_with_a_sealed_acceptance() {
    let e = experiment(2, json!({"action": "climb"}));
    let out = run_driven(&e, &driver_path(), json!({"action": "keep"}));
    let mut seen = String::new();
    for after in 0..2 {
        let dir = e.ws.join(format!("runs/driver/after-gen-{after}"));
        seen.push_str(&std::fs::read_to_string(dir.join("operator.stdout.log")).unwrap());
        seen.push_str(&std::fs::read_to_string(dir.join("input.json")).unwrap());
    }
    // The driver printed what it received: generations with primary scores.
    assert!(seen.contains("generation-id: \"1\""), "{seen}");
    assert!(seen.contains("\"generation_id\": \"1\""), "{seen}");
    assert!(seen.contains("recipe_sha256"), "{seen}");
    for name in private_task_names(&e) {
        assert!(
            !seen.contains(&name),
            "private task {name} reached the driver"
        );
    }
    assert!(!seen.to_lowercase().contains("sealed"), "{seen}");
    assert!(!seen.to_lowercase().contains("anchor"), "{seen}");

    // The session ended with one sealed acceptance: gen/0 against the champion.
    let acc = of_type(&e, "acceptance");
    assert_eq!(acc.len(), 1, "{acc:#?}");
    let body = &acc[0]["body"];
    assert_eq!(body["split"], "sealed");
    assert_eq!(body["baseline"]["genid"], "0");
    let champion = e.json(&["status", "ws", "--json"])["champion"]["genid"].clone();
    assert_eq!(body["champion"]["genid"], champion);
    assert_eq!(
        body["baseline"]["task_set_hash"],
        body["champion"]["task_set_hash"]
    );
    assert!(body["baseline"]["score"].is_number() && body["champion"]["score"].is_number());
    assert!(out.contains("sealed acceptance: gen 0"), "{out}");
    verify_ok(&e);
}

#[test]
fn a_failing_driver_leaves_the_recipe_and_the_run_goes_on() {
    let e = experiment(2, json!({"action": "climb"}));
    run_driven(&e, &driver_path(), json!({"action": "panic", "at": 0}));
    let r = &of_type(&e, "driver_revision")[0]["body"];
    assert_eq!(r["outcome"], "failed");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("scripted driver panic"),
        "{r:#}"
    );
    assert_eq!(select_digests(&e).len(), 2);
    verify_ok(&e);
}

#[test]
fn stall_swap_swaps_the_select_policy_when_progress_stalls() {
    // Mutate proposes nothing: no generation ever improves on gen/0.
    let e = experiment(3, json!({"action": "none"}));
    let out = run_driven(&e, "stall_swap", json!({"window": 1}));
    let revisions = of_type(&e, "driver_revision");
    let first = revisions
        .iter()
        .find(|r| r["body"]["outcome"] == "accepted")
        .unwrap_or_else(|| panic!("no accepted revision: {revisions:#?}\n{out}"));
    assert_eq!(first["body"]["after_generation"], json!(1));
    assert_eq!(
        first["body"]["recipe"]["operators"]["select"]["operator"],
        "score_child_prop"
    );
    assert!(
        first["body"]["driver_reason"]
            .as_str()
            .unwrap()
            .contains("select/greedy"),
        "{first:#}"
    );
    assert_eq!(first["body"]["driver"]["name"], "stall_swap");
    verify_ok(&e);
}

#[test]
fn bad_driver_arguments_are_usage_errors() {
    let e = experiment(1, json!({"action": "climb"}));
    e.usage_error(
        &["run", "ws", "--driver", "no_such_driver"],
        "neither a built-in driver",
    );
    // A select component is not a driver.
    let out = e
        .evolve(&[
            "run",
            "ws",
            "--driver",
            &component("hostile_select").display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("world"), "{}", text(&out));
    let out = e
        .evolve(&[
            "run",
            "ws",
            "--driver",
            "stall_swap",
            "--driver-config",
            r#"{"window": 0}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // One line, each violation `path: message` ('; ' between them): an error is printed
    // as one escaped line.
    assert!(
        text(&out).contains("--driver-config does not fit stall_swap: window:"),
        "{}",
        text(&out)
    );
}
