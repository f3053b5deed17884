//! `evolve bench`: the output's shape (never its timings, which depend on the machine),
//! one iteration of every measurement through the real binary; and the correctness of
//! the model gateway's concurrent burst, through the library: every call succeeds and
//! the charges add up to the budget pool's spend.

use serde_json::Value;

fn bench(args: &[&str]) -> crate::cmd::Ran {
    crate::cmd::evolve(["bench"]).args(args).run()
}

fn stat_ok(v: &Value, what: &str) {
    for k in ["median_ms", "p95_ms"] {
        let x = v[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}.{k} is a number: {v}"));
        assert!(x.is_finite() && x >= 0.0, "{what}.{k} = {x}");
    }
    assert!(
        v["median_ms"].as_f64() <= v["p95_ms"].as_f64(),
        "{what}: median > P95"
    );
    assert!(
        v["samples"].as_u64().is_some_and(|n| n >= 1),
        "{what}.samples"
    );
}

/// The concurrent burst through the gateway: every call answered, and the pool's spend
/// the sum of the calls' charges (which the bench checks itself, failing otherwise).
fn concurrent_ok(c: &Value) {
    assert_eq!(
        (&c["calls"], &c["trials"], &c["succeeded"]),
        (&Value::from(200), &Value::from(4), &Value::from(200)),
        "{c}"
    );
    let (spent, charged) = (c["spent_usd"].as_f64(), c["charged_usd"].as_f64());
    let (spent, charged) = (spent.unwrap(), charged.unwrap());
    // 200 calls of 10 prompt and 2 completion tokens at $0.15 and $0.60 per million.
    let expected = 200.0 * (10.0 * 0.15 + 2.0 * 0.60) / 1e6;
    assert!((spent - charged).abs() < 1e-12, "{c}");
    assert!((charged - expected).abs() < 1e-12, "{c}");
    assert!(c["wall_ms"].as_f64().is_some_and(|x| x > 0.0), "{c}");
}

#[test]
fn the_gateway_bench_succeeds_every_concurrent_call_and_its_spend_adds_up() {
    let rt = evolve::command::runtime().unwrap();
    let g = evolve::bench::gateway::measure(&rt, 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((g.direct.samples, g.through_gateway.samples), (2, 2));
    concurrent_ok(&serde_json::to_value(&g.concurrent).unwrap());
}

#[test]
fn bench_json_has_every_measurement() {
    let work = tempfile::tempdir().unwrap();
    let out = bench(&[
        "--json",
        "--iterations",
        "1",
        "--work-dir",
        work.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");

    let names: Vec<&str> = r["table5"]
        .as_array()
        .expect("table5 is an array")
        .iter()
        .map(|row| {
            stat_ok(row, "table5 row");
            assert!(row["rsihub_median_ms"].as_f64().is_some_and(|x| x > 0.0));
            assert!(row["ratio"].as_f64().is_some_and(|x| x > 0.0));
            row["operation"].as_str().expect("operation name")
        })
        .collect();
    assert_eq!(
        names,
        [
            "workspace init",
            "candidate worktree + snapshot",
            "surface validation",
            "evaluation stamp + archive update",
            "state verification + champion recomputation",
            "recovery replay",
        ]
    );

    let inv = &r["operator_invocation"];
    for k in ["cold", "cached", "disk_cache"] {
        stat_ok(&inv[k], k);
    }
    match &inv["python_subprocess"] {
        Value::Null => assert!(inv["cached_vs_python"].is_null()),
        p => {
            stat_ok(p, "python_subprocess");
            assert!(inv["cached_vs_python"].as_f64().is_some());
        }
    }

    let g = &r["generation"];
    assert_eq!(g["generations"], 1);
    for k in ["total", "operators", "evaluation", "framework", "fdatasync"] {
        stat_ok(&g[k], k);
    }
    stat_ok(&r["file_creation_floor"], "file_creation_floor");
    // A select event and the child's outcome, at least.
    assert!(
        g["archive_events_per_generation"]
            .as_f64()
            .is_some_and(|c| c >= 2.0),
        "{g}"
    );
    assert!(
        g["operator_calls_per_generation"]
            .as_f64()
            .is_some_and(|c| c >= 3.0),
        "select, mutate and gate ran: {g}"
    );
    assert!(
        g["generations_per_second"]
            .as_f64()
            .is_some_and(|x| x > 0.0)
    );

    let t = &r["trial_startup"];
    stat_ok(&t["unconfined"], "trial_startup.unconfined");
    // CI and the developers' machines have bubblewrap: the jail's cost is measured too.
    stat_ok(&t["contained"], "trial_startup.contained");
    assert!(t["added_ms"].as_f64().is_some_and(f64::is_finite), "{t}");

    let g = &r["model_gateway"];
    stat_ok(&g["direct"], "model_gateway.direct");
    stat_ok(&g["through_gateway"], "model_gateway.through_gateway");
    for k in ["added_p50_ms", "added_p95_ms"] {
        assert!(g[k].as_f64().is_some_and(f64::is_finite), "{k}: {g}");
    }
    concurrent_ok(&g["concurrent"]);

    let goals = r["goals"].as_array().expect("goals");
    assert_eq!(goals.len(), 4);
    assert!(
        goals
            .iter()
            .all(|x| x["met"].is_boolean() && x["measured"].is_string())
    );
    assert!(r["machine"]["cores"].as_u64().is_some_and(|c| c >= 1));
    assert!(
        std::fs::read_dir(work.path()).unwrap().next().is_none(),
        "the scratch directory is removed"
    );
}

#[test]
fn bench_rejects_zero_iterations_and_a_missing_work_dir() {
    let out = bench(&["--iterations", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--iterations"));
    let out = bench(&["--work-dir", "/nonexistent/evolve-bench-dir"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scratch directory") && err.contains("/nonexistent/evolve-bench-dir"),
        "{err}"
    );
}
