use super::*;
use evolve_operator_sdk::testing::{row, view};

fn ctx(config: Value, generation: u32) -> Context {
    let schema = <RrsiMutate as Operator>::config().build().unwrap();
    let mut c = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
    c.generation = generation;
    c
}

fn root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("target")).unwrap();
    std::fs::write(dir.path().join("target/a.txt"), "alpha\n").unwrap();
    std::fs::write(dir.path().join("target/b.txt"), "beta\n").unwrap();
    dir
}

fn observation(archive: Option<ArchiveView>) -> Observation {
    Observation {
        rollout: None,
        analysis: None,
        feedback_dir: None,
        surface: Surface {
            includes: vec!["target/**".into()],
            excludes: vec![],
        },
        archive,
    }
}

fn answer(content: &str) -> ChatResponse {
    ChatResponse {
        content: content.into(),
        input_tokens: 10,
        output_tokens: 5,
        usd: 0.001,
    }
}

fn tagged(id: &str, generation: u32, score: f64, tags: &[&str]) -> ArchiveRow {
    ArchiveRow {
        parent: Some("0".into()),
        annotations: json!({"x_rrsi_components": tags}).to_string(),
        ..row(id, generation, Some(score), true)
    }
}

const TWO_EDITS: &str = "Retry on failure.\n\
<<<<<<< WRITE target/a.txt\nalpha two\n>>>>>>> END\n\
<<<<<<< WRITE target/b.txt\nbeta two\n>>>>>>> END\n";

#[test]
fn the_prompt_carries_budget_and_history_and_edits_apply() {
    let dir = root();
    let archive = view(vec![
        row("0", 0, Some(0.5), true),
        tagged("1", 1, 0.4, &["memory"]),
    ]);
    let mut seen = String::new();
    let p = mutate_with(
        &ctx(json!({"b_max": 4}), 1),
        &observation(Some(archive)),
        dir.path(),
        &mut |r| {
            seen = r.messages[1].content.clone();
            Ok(answer(TWO_EDITS))
        },
    )
    .unwrap();
    assert!(
        seen.contains("Edit budget: change at most 4 file(s)."),
        "{seen}"
    );
    assert!(
        seen.contains("- memory: yield -0.1000\nPrune (do not edit): memory\n"),
        "{seen}"
    );
    assert!(
        seen.contains("Untried components: client_tool, skill, subagent, prompt, other"),
        "{seen}"
    );
    assert_eq!(p.changed, ["target/a.txt", "target/b.txt"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target/b.txt")).unwrap(),
        "beta two\n"
    );
    assert_eq!(p.notes[0], "edit budget b_t = 4 at generation 1");
    assert_eq!(
        p.notes[1],
        "history: prune [memory], untried [client_tool, skill, subagent, prompt, other], stalled false, exploration slots 0, attempts 1 (0 unmeasured)"
    );
    assert_eq!(p.notes.last().unwrap(), "why: Retry on failure.");
    assert_eq!((p.usage.input_tokens, p.usage.output_tokens), (10, 5));
}

#[test]
fn blocks_beyond_the_budget_are_refused() {
    let dir = root();
    // Horizon 2, generation 2: b_t = b_min = 1.
    let c = ctx(json!({"b_min": 1, "b_max": 3, "horizon": 2}), 2);
    let p = mutate_with(&c, &observation(None), dir.path(), &mut |_| {
        Ok(answer(TWO_EDITS))
    })
    .unwrap();
    assert_eq!(p.changed, ["target/a.txt"]);
    assert!(
        p.notes
            .iter()
            .any(|n| n.starts_with("refused (write) target/b.txt")),
        "{:?}",
        p.notes
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target/b.txt")).unwrap(),
        "beta\n"
    );
}

#[test]
fn model_errors_and_bad_history_are_the_operators_errors() {
    let dir = root();
    let e = mutate_with(
        &ctx(json!({}), 1),
        &observation(None),
        dir.path(),
        &mut |_| Err(ModelError::Timeout),
    );
    assert_eq!(
        e.unwrap_err(),
        "model: timeout: the call ran past its per-call timeout"
    );
    let mut bad = tagged("1", 1, 0.4, &[]);
    bad.annotations = r#"{"x_rrsi_components": "skill"}"#.into();
    let e = mutate_with(
        &ctx(json!({}), 1),
        &observation(Some(view(vec![bad]))),
        dir.path(),
        &mut |_| Ok(answer("")),
    );
    assert_eq!(
        e.unwrap_err(),
        "history: annotation x_rrsi_components of generation 1: expected an array of component names"
    );
}
