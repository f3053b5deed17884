use super::*;
use serde_json::json;

/// A terminal-seed-like trajectory: system, the task, then agent steps running bash.
pub(crate) fn sample() -> Trajectory {
    serde_json::from_value(json!({
        "schema_version": "ATIF-v1.4",
        "session_id": "s1",
        "agent": {"name": "terminal-agent", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You are a shell agent."},
            {"step_id": 2, "source": "user", "message": "Convert /app/users.csv to /app/users.json."},
            {"step_id": 3, "source": "agent", "message": "Look first.",
             "tool_calls": [{"tool_call_id": "c1", "function_name": "bash",
                             "arguments": {"command": "ls /app"}}],
             "observation": {"results": [{"source_call_id": "c1",
                             "content": "<returncode>0</returncode>\n<output>\nusers.csv\n</output>"}]},
             "metrics": {"prompt_tokens": 10}},
            {"step_id": 4, "source": "agent", "message": "Convert.",
             "tool_calls": [{"tool_call_id": "c2", "function_name": "bash",
                             "arguments": {"command": "python3 conv.py > /app/users.json"}}],
             "observation": {"results": [{"source_call_id": "c2",
                             "content": "<returncode>2</returncode>\n<output>\npython3: can't open file 'conv.py': [Errno 2] No such file or directory\n</output>"}]}},
            {"step_id": 5, "source": "agent", "message": "Done.",
             "tool_calls": [{"tool_call_id": "c3", "function_name": "bash",
                             "arguments": {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}],
             "observation": {"results": [{"source_call_id": "c3",
                             "content": "<returncode>0</returncode>\n<output>\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n</output>"}]}}
        ],
        "final_metrics": {"total_prompt_tokens": 10}
    }))
    .unwrap()
}

#[test]
fn atif_reads_with_unknown_fields_and_renders_actions() {
    let t = sample();
    assert_eq!(t.steps.len(), 5);
    assert_eq!(
        t.instruction(),
        Some("Convert /app/users.csv to /app/users.json.")
    );
    assert_eq!(t.steps[2].action(), "bash: ls /app");
    assert!(t.steps[3].observed().contains("<returncode>2</returncode>"));
    // A step without tool calls acts through its message.
    assert_eq!(
        t.steps[1].action(),
        "Convert /app/users.csv to /app/users.json."
    );
    let call = ToolCall {
        tool_call_id: "x".into(),
        function_name: "edit".into(),
        arguments: json!({"path": "a", "text": "b"}),
    };
    assert_eq!(call.text(), r#"edit: {"path":"a","text":"b"}"#);
}

#[test]
fn clues_are_paths_files_and_backquoted_spans() {
    let out = "error in row 1: [Errno 2] No such file or directory: '/app/users.json'\n\
               FAIL an array of 4 objects\nexpected `jq -s` output in report.csv, e.g. 3.5";
    assert_eq!(
        clues(out),
        ["jq -s", "/app/users.json", "users.json", "report.csv"]
    );
    assert!(clues("FAIL 3 of 4 checks. Version 1.2").is_empty());
    let many: String = (0..100).map(|i| format!("f{i}.txt ")).collect();
    assert_eq!(clues(&many).len(), MAX_CLUES);
}

#[test]
fn failure_signals() {
    assert_eq!(
        failure_signal("<returncode>1</returncode>\n<output>\n</output>").as_deref(),
        Some("returncode 1")
    );
    assert_eq!(
        failure_signal("<returncode>timeout</returncode>").as_deref(),
        Some("returncode timeout")
    );
    assert_eq!(failure_signal("<returncode>0</returncode>\nok"), None);
    assert_eq!(
        failure_signal("process exited with 127").as_deref(),
        Some("exit code 127")
    );
    assert_eq!(
        failure_signal("bash: jq: command not found").as_deref(),
        Some("command not found")
    );
    assert_eq!(failure_signal("all good, exit code 0"), None);
}

#[test]
fn the_verifier_points_at_the_step_that_touched_its_file() {
    let t = sample();
    let out =
        "error in an array of 4 objects: [Errno 2] No such file or directory: '/app/users.json'";
    let c = culprit(&t, out).unwrap();
    assert_eq!(c.step_id, 4);
    assert_eq!(c.rule, Rule::VerifierPointer);
    assert_eq!(c.clues, ["/app/users.json", "users.json"]);
    assert_eq!(c.failure.as_deref(), Some("returncode 2"));
}

#[test]
fn more_clues_beat_a_later_step_and_a_failure_breaks_ties() {
    let mut t = sample();
    // Step 5 now also mentions users.json (one clue); step 4 matches two.
    t.steps[4].tool_calls[0].arguments = json!({"command": "cat users.json"});
    let out = "missing /app/users.json";
    assert_eq!(culprit(&t, out).unwrap().step_id, 4);
    // Equal clue counts: the failing step wins over the later one.
    t.steps[4].tool_calls[0].arguments = json!({"command": "cat /app/users.json"});
    assert_eq!(culprit(&t, out).unwrap().step_id, 4);
    // Equal and neither failing: the latest.
    t.steps[3].observation = None;
    assert_eq!(culprit(&t, out).unwrap().step_id, 5);
}

#[test]
fn without_a_pointer_the_last_failing_observation_then_the_last_tool_call() {
    let t = sample();
    let c = culprit(&t, "FAIL 0 of 4 checks passed").unwrap();
    assert_eq!((c.step_id, c.rule), (4, Rule::LastFailingObservation));
    assert_eq!(c.failure.as_deref(), Some("returncode 2"));

    let mut quiet = sample();
    quiet.steps[3].observation = None;
    let c = culprit(&quiet, "").unwrap();
    assert_eq!((c.step_id, c.rule), (5, Rule::LastToolCall));

    let mut talk = sample();
    talk.steps.truncate(2);
    assert_eq!(culprit(&talk, "/app/users.json"), None);
}

#[test]
fn extracts_keep_a_clipped_window_around_the_focus() {
    let t = sample();
    let w = Window {
        before: 1,
        after: 1,
        field_chars: 40,
    };
    let e = extract(&t, Some(3), w);
    let ids: Vec<u64> = e.iter().map(|s| s.step_id).collect();
    assert_eq!(ids, [3, 4, 5]);
    assert!(e[1].culprit && !e[0].culprit && !e[2].culprit);
    assert_eq!(e[1].failure.as_deref(), Some("returncode 2"));
    assert!(e[1].observation.chars().count() <= 40 + marker(1000).chars().count());
    assert!(e[1].observation.contains("more characters cut]"));
    // The system prompt and the task are never part of the window.
    let e = extract(&t, Some(1), w);
    assert_eq!(e.iter().map(|s| s.step_id).collect::<Vec<_>>(), [3]);
    // No focus: the last steps, none marked.
    let e = extract(&t, None, w);
    assert_eq!(e.iter().map(|s| s.step_id).collect::<Vec<_>>(), [4, 5]);
    assert!(e.iter().all(|s| !s.culprit));
    assert!(extract(&Trajectory::default(), None, w).is_empty());
}

#[test]
fn clip_keeps_head_and_tail() {
    assert_eq!(clip("short", 10), "short");
    let c = clip(
        &"a".repeat(50)
            .chars()
            .chain("Z".repeat(50).chars())
            .collect::<String>(),
        30,
    );
    assert!(c.starts_with(&"a".repeat(20)));
    assert!(c.ends_with(&"Z".repeat(10)));
    assert!(c.contains("[… 70 more characters cut]"));
    assert_eq!(tail("héllo", 3), "llo");
    assert_eq!(verifier_text("[trajectory] {}\nFAIL x"), "FAIL x");
    assert_eq!(verifier_text("FAIL x"), "FAIL x");
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn the_bundle_joins_trials_to_their_trajectories() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let t = serde_json::to_string(&sample()).unwrap();
    write(root, "trajectories/run-1/a__r0.json", &t);
    write(root, "trajectories/run-1/b__r0.json", &t);
    write(root, "trajectories/run-1/c__r0.json", "not json");
    write(
        root,
        "trajectories/index.json",
        &json!([
            {"task": "a", "repetition": 0, "status": "benchmark-complete", "reward": 0.0,
             "json": "run-1/a__r0.json", "text": "run-1/a__r0.txt", "steps": 5, "tool_calls": 3,
             "prompt_tokens": 10, "truncated": false},
            {"task": "b", "repetition": 0, "status": "benchmark-complete", "reward": 1.0,
             "json": "run-1/b__r0.json", "text": "run-1/b__r0.txt"},
        ])
        .to_string(),
    );
    let summary = json!({"trials": [
        // Named by its summary entry.
        {"task": "a", "repetition": 0, "status": "benchmark-complete", "reward": 0.0, "passed": false,
         "trajectory": {"json": "trajectories/run-1/a__r0.json", "steps": 5}},
        // Found through the index.
        {"task": "b", "repetition": 0, "status": "benchmark-complete", "reward": 1.0, "passed": true},
        {"task": "c", "repetition": 0, "passed": false,
         "trajectory": {"json": "trajectories/run-1/c__r0.json"}},
        {"task": "d", "repetition": 0, "passed": false, "trajectory": {"skipped": "too large"}},
        {"task": "e", "repetition": 0, "passed": false,
         "trajectory": {"json": "trajectories/../../etc/passwd"}},
    ]});
    let trials = trials(&summary).unwrap();
    assert_eq!(
        trials.iter().map(Trial::failed).collect::<Vec<_>>(),
        [true, false, true, true, true]
    );
    let bundle = Bundle::open(root).unwrap();
    let joined = bundle.join(&trials).unwrap();
    assert_eq!(joined[0].file.as_deref(), Some("run-1/a__r0.json"));
    assert_eq!(joined[0].trajectory.as_ref().unwrap().steps.len(), 5);
    assert_eq!(joined[1].file.as_deref(), Some("run-1/b__r0.json"));
    assert!(joined[1].trajectory.is_ok());
    assert!(
        joined[2]
            .trajectory
            .as_ref()
            .unwrap_err()
            .starts_with("trajectories/run-1/c__r0.json is not ATIF: ")
    );
    assert_eq!(
        joined[3].trajectory.as_ref().unwrap_err(),
        "the host did not keep it: too large"
    );
    assert_eq!(joined[4].file, None);
    assert_eq!(
        joined[4].trajectory.as_ref().unwrap_err(),
        "the trial left no trajectory"
    );
    assert!(Bundle::open(&root.join("absent")).is_none());
}

#[test]
fn the_bundle_refuses_links_escapes_and_large_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "outside.json",
        &serde_json::to_string(&sample()).unwrap(),
    );
    std::fs::create_dir_all(root.join("b/trajectories")).unwrap();
    std::os::unix::fs::symlink(
        root.join("outside.json"),
        root.join("b/trajectories/l.json"),
    )
    .unwrap();
    write(
        root,
        "b/trajectories/big.json",
        &"x".repeat(READ_CAP as usize + 1),
    );
    let bundle = Bundle::open(&root.join("b")).unwrap();
    assert_eq!(
        bundle.trajectory("l.json").unwrap_err(),
        "trajectories/l.json is not a regular file"
    );
    assert_eq!(
        bundle.trajectory("big.json").unwrap_err(),
        format!("trajectories/big.json is larger than {READ_CAP} bytes")
    );
    assert_eq!(
        bundle.read("../outside.json").unwrap_err(),
        "`../outside.json` is not a plain relative path"
    );
    assert_eq!(
        bundle.read("/etc/passwd").unwrap_err(),
        "`/etc/passwd` is not a plain relative path"
    );
    // No index: no trajectories, not an error.
    assert_eq!(bundle.index().unwrap(), Vec::new());
}

#[test]
fn trials_need_rollout_trains_summary() {
    assert_eq!(
        trials(&json!({"rollout": "noop"})).unwrap_err(),
        "the rollout summary has neither `trials` nor `failed`: these operators read \
         rollout/train's"
    );
    let sample = trials(&json!({"failed": ["a"], "passed": ["b"]})).unwrap();
    assert_eq!(sample.len(), 1);
    assert!(sample[0].failed() && sample[0].task == "a");
    assert_eq!(
        trials(&json!({"trials": 3})).unwrap_err(),
        "the rollout summary's `trials` is not a list"
    );
    assert!(
        trials(&json!({"trials": [{"repetition": 0}]}))
            .unwrap_err()
            .starts_with("the rollout summary's trials[0] is not a trial: ")
    );
}

#[test]
fn cases_join_and_find_the_culprit_of_failed_trials_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let t = serde_json::to_string(&sample()).unwrap();
    write(root, "trajectories/run-1/a__r0.json", &t);
    write(root, "trajectories/run-1/b__r0.json", &t);
    let summary = json!({"trials": [
        {"task": "a", "repetition": 0, "status": "benchmark-complete", "reward": 0.0, "passed": false,
         "verifier_output": "error: No such file or directory: '/app/users.json'",
         "trajectory": {"json": "trajectories/run-1/a__r0.json"}},
        {"task": "b", "repetition": 0, "status": "benchmark-complete", "reward": 1.0, "passed": true,
         "trajectory": {"json": "trajectories/run-1/b__r0.json"}},
    ]});
    let bundle = Bundle::open(root).unwrap();
    let cases = cases(&summary, Some(&bundle)).unwrap();
    let c = cases[0].culprit.as_ref().unwrap();
    assert_eq!((c.step_id, c.rule), (4, Rule::VerifierPointer));
    assert_eq!(cases[0].culprit_step().unwrap().step_id, 4);
    assert!(cases[1].culprit.is_none(), "a passed trial has no culprit");
    let w = Window {
        before: 0,
        after: 0,
        field_chars: 200,
    };
    let ev = cases[0].evidence(w, 20);
    assert_eq!(ev["trajectory"], "trajectories/run-1/a__r0.json");
    assert_eq!(ev["verifier_output"], "y: '/app/users.json'");
    assert_eq!(ev["culprit"]["step_id"], 4);
    assert_eq!(ev["culprit"]["rule"], "verifier_pointer");
    assert_eq!(ev["extract"].as_array().unwrap().len(), 1);
    assert_eq!(ev["extract"][0]["culprit"], true);
    assert_eq!(ev["steps"], 5);

    // Without a bundle: the same trials, each saying why it has no trajectory.
    let bare = super::cases(&summary, None).unwrap();
    assert_eq!(
        bare[0].note.as_deref(),
        Some("no feedback bundle was granted to this call")
    );
    assert!(bare[0].culprit.is_none());
    assert_eq!(bare[0].evidence(w, 20)["extract"], json!([]));
}

#[test]
fn rule_names_are_their_json() {
    for r in [
        Rule::VerifierPointer,
        Rule::LastFailingObservation,
        Rule::LastToolCall,
    ] {
        assert_eq!(serde_json::to_value(r).unwrap(), json!(r.name()));
    }
}
