//! analyze/failure_patterns: group the failed train trials of a rollout/train summary by
//! what went wrong, within a fixed evidence budget. Deterministic; no model.
//!
//! Input: the rollout evidence *summary* (analyze gets a fresh `/scratch`, not the
//! rollout's artifacts). A failed trial is an entry of `trials` with `passed: false`;
//! for entries without `passed`, one whose status is not `benchmark-complete`, whose
//! reward is null or below 1. A summary with no `trials` but a `failed` list of task
//! names (e.g. a hand-written one) gives one case per name, pattern `failed`.
//!
//! Pattern of a failed trial, from the last non-empty line of its `verifier_output`:
//! a line starting `[kind]` (how the host appends an engine error) gives
//! `<status>: [kind]`; any other line gives `<status>: <line>` with every run of digits
//! replaced by `#` and at most 120 characters; no output gives `<status>`, or for a
//! completed trial `benchmark-complete: no reward` / `benchmark-complete: reward below
//! threshold`.
//!
//! Groups are ordered by trial count (descending), then pattern; each lists its tasks in
//! first-seen order and its first examples. Budget: at most `max_groups` groups and
//! `max_examples_per_group` examples per group (each example's output is its last 300
//! characters); then, while the summary's JSON is longer than `max_chars` characters,
//! the last example of the last group that still has one is dropped, and once no group
//! has examples, the last group. `truncated` says whether anything was left out.
//! `failure_patterns.json` in `/scratch` holds every group, with examples but without
//! the `max_chars` cut.

use std::path::Path;

use evolve_operator_sdk::config::integer;
use evolve_operator_sdk::prelude::*;

pub struct FailurePatterns;

/// The artifact this operator writes, relative to `/scratch`.
pub const PATTERNS: &str = "failure_patterns.json";
/// Characters of verifier output kept per example.
pub const EXAMPLE_CHARS: usize = 300;
/// Characters of a verifier line kept in a pattern.
pub const PATTERN_CHARS: usize = 120;

impl Operator for FailurePatterns {
    const NAME: &'static str = "failure_patterns";
    const SUMMARY: &'static str =
        "Group a train rollout's failed trials by verifier output or status, within a budget.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "max_groups",
                integer()
                    .default(json!(10))
                    .minimum(1.0)
                    .maximum(1000.0)
                    .description("Most patterns reported, the most frequent first"),
            )
            .field(
                "max_examples_per_group",
                integer()
                    .default(json!(3))
                    .minimum(0.0)
                    .maximum(100.0)
                    .description("Most example trials (with verifier output) per pattern"),
            )
            .field(
                "max_chars",
                integer()
                    .default(json!(4000))
                    .minimum(200.0)
                    .description("Longest summary, in characters of JSON"),
            )
    }
}

/// One failed trial as the rollout summary describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub task: String,
    pub repetition: Option<u64>,
    pub status: Option<String>,
    pub reward: Option<f64>,
    pub output: String,
}

/// The failed trials of a rollout summary, in summary order.
pub fn failed_cases(summary: &Value) -> Result<Vec<Case>, String> {
    let obj = summary
        .as_object()
        .ok_or("the rollout summary is not a JSON object")?;
    if let Some(trials) = obj.get("trials") {
        let trials = trials
            .as_array()
            .ok_or("the rollout summary's `trials` is not a list")?;
        let mut cases = Vec::new();
        for (i, t) in trials.iter().enumerate() {
            let task = t
                .get("task")
                .and_then(Value::as_str)
                .ok_or(format!("trials[{i}] has no task name"))?;
            let status = t.get("status").and_then(Value::as_str);
            let reward = t.get("reward").and_then(Value::as_f64);
            let failed = match t.get("passed").and_then(Value::as_bool) {
                Some(p) => !p,
                None => status != Some("benchmark-complete") || !reward.is_some_and(|r| r >= 1.0),
            };
            if failed {
                cases.push(Case {
                    task: task.to_string(),
                    repetition: t.get("repetition").and_then(Value::as_u64),
                    status: status.map(str::to_string),
                    reward,
                    output: t
                        .get("verifier_output")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
        }
        return Ok(cases);
    }
    if let Some(failed) = obj.get("failed").and_then(Value::as_array) {
        return Ok(failed
            .iter()
            .filter_map(Value::as_str)
            .map(|task| Case {
                task: task.to_string(),
                repetition: None,
                status: None,
                reward: None,
                output: String::new(),
            })
            .collect());
    }
    Err("the rollout summary has neither `trials` nor `failed`: \
         analyze/failure_patterns reads the summary of rollout/train"
        .into())
}

/// Replace every run of ASCII digits by `#`.
pub fn mask_digits(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// The last `n` characters of `s`.
pub fn tail(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let start = s.char_indices().nth(count - n).map_or(s.len(), |(i, _)| i);
    &s[start..]
}

/// What went wrong in one failed trial.
pub fn pattern(c: &Case) -> String {
    let status = c.status.as_deref().unwrap_or("failed");
    let line = c
        .output
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    if let Some(end) = line.find(']').filter(|_| line.starts_with('[')) {
        return format!("{status}: {}", &line[..=end]);
    }
    if !line.is_empty() {
        let masked: String = mask_digits(line).chars().take(PATTERN_CHARS).collect();
        return format!("{status}: {masked}");
    }
    match (status, c.reward) {
        ("benchmark-complete", None) => "benchmark-complete: no reward".into(),
        ("benchmark-complete", Some(_)) => "benchmark-complete: reward below threshold".into(),
        _ => status.to_string(),
    }
}

/// One pattern and the trials that show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub pattern: String,
    pub count: usize,
    pub tasks: Vec<String>,
    pub examples: Vec<Value>,
}

impl Group {
    fn to_json(&self) -> Value {
        json!({
            "pattern": self.pattern,
            "count": self.count,
            "tasks": self.tasks,
            "examples": self.examples,
        })
    }
}

/// Every group, most frequent first, each with at most `max_examples` examples.
pub fn group(cases: &[Case], max_examples: usize) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for c in cases {
        let p = pattern(c);
        let g = match groups.iter_mut().position(|g| g.pattern == p) {
            Some(i) => &mut groups[i],
            None => {
                groups.push(Group {
                    pattern: p,
                    count: 0,
                    tasks: Vec::new(),
                    examples: Vec::new(),
                });
                groups.last_mut().expect("just pushed")
            }
        };
        g.count += 1;
        if !g.tasks.contains(&c.task) {
            g.tasks.push(c.task.clone());
        }
        if g.examples.len() < max_examples {
            g.examples.push(json!({
                "task": c.task,
                "repetition": c.repetition,
                "reward": c.reward,
                "verifier_output": tail(&c.output, EXAMPLE_CHARS),
            }));
        }
    }
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.pattern.cmp(&b.pattern))
    });
    groups
}

/// The bounded summary (see the module documentation).
pub fn bounded_summary(
    cases: &[Case],
    max_groups: usize,
    max_examples: usize,
    max_chars: usize,
) -> Value {
    let all = group(cases, max_examples);
    let full_examples = group(cases, usize::MAX);
    let mut truncated = all.len() > max_groups
        || full_examples
            .iter()
            .any(|g| g.examples.len() > max_examples);
    let mut groups: Vec<Group> = all.into_iter().take(max_groups).collect();
    let render = |groups: &[Group], truncated: bool| {
        json!({
            "failed_trials": cases.len(),
            "groups": groups.iter().map(Group::to_json).collect::<Vec<_>>(),
            "truncated": truncated,
        })
    };
    loop {
        let summary = render(&groups, truncated);
        if summary.to_string().chars().count() <= max_chars {
            return summary;
        }
        if let Some(g) = groups.iter_mut().rev().find(|g| !g.examples.is_empty()) {
            g.examples.pop();
        } else if groups.pop().is_none() {
            return summary;
        }
        truncated = true;
    }
}

/// The whole operator with `/scratch` passed in.
pub fn analyze_with(ctx: &Context, rollout: &Evidence, scratch: &Path) -> Result<Evidence, String> {
    let summary: Value = evolve_operator_sdk::serde_json::from_str(&rollout.summary)
        .map_err(|e| format!("the rollout summary is not JSON: {e}"))?;
    let cases = failed_cases(&summary)?;
    let max_groups =
        usize::try_from(ctx.i64("max_groups").unwrap_or(10).max(1)).unwrap_or(usize::MAX);
    let max_examples = usize::try_from(ctx.i64("max_examples_per_group").unwrap_or(3).max(0))
        .unwrap_or(usize::MAX);
    let max_chars =
        usize::try_from(ctx.i64("max_chars").unwrap_or(4000).max(0)).unwrap_or(usize::MAX);
    let all: Vec<Value> = group(&cases, max_examples)
        .iter()
        .map(Group::to_json)
        .collect();
    let mut text = json!({"failed_trials": cases.len(), "groups": all}).to_string();
    text.push('\n');
    std::fs::write(scratch.join(PATTERNS), text)
        .map_err(|e| format!("cannot write {PATTERNS}: {e}"))?;
    Ok(Evidence {
        summary: bounded_summary(&cases, max_groups, max_examples, max_chars).to_string(),
        artifacts: vec![PATTERNS.into()],
    })
}

impl Analyze for FailurePatterns {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        analyze_with(ctx, rollout, Path::new("/scratch"))
    }
}

evolve_operator_sdk::export!(analyze: FailurePatterns);

#[cfg(test)]
mod tests {
    use super::*;

    fn case(task: &str, rep: u64, status: &str, reward: Option<f64>, out: &str) -> Case {
        Case {
            task: task.into(),
            repetition: Some(rep),
            status: Some(status.into()),
            reward,
            output: out.into(),
        }
    }

    fn ctx(config: Value) -> Context {
        let schema = <FailurePatterns as Operator>::config().build().unwrap();
        Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
    }

    fn parse(s: &str) -> Value {
        evolve_operator_sdk::serde_json::from_str(s).unwrap()
    }

    #[test]
    fn patterns_come_from_the_last_line_error_kind_or_status() {
        let p = |status: &str, reward, out: &str| pattern(&case("t", 0, status, reward, out));
        assert_eq!(
            p(
                "benchmark-complete",
                Some(0.0),
                "ok 1\nFAILED test_7 - assert 3 == 5\n\n"
            ),
            "benchmark-complete: FAILED test_# - assert # == #"
        );
        assert_eq!(
            p(
                "timeout",
                None,
                "partial\n[agent_timeout] agent ran past 30.5 s"
            ),
            "timeout: [agent_timeout]"
        );
        assert_eq!(
            p("infrastructure-failed", None, "  \n"),
            "infrastructure-failed"
        );
        assert_eq!(
            p("benchmark-complete", Some(0.2), ""),
            "benchmark-complete: reward below threshold"
        );
        assert_eq!(
            p("benchmark-complete", None, ""),
            "benchmark-complete: no reward"
        );
        assert_eq!(
            p("candidate-invalid", None, &"x".repeat(200)),
            format!("candidate-invalid: {}", "x".repeat(120))
        );
        assert_eq!(p("timeout", None, "[unclosed"), "timeout: [unclosed");
    }

    #[test]
    fn failed_cases_use_passed_or_fall_back_to_status_and_reward() {
        let s = json!({"trials": [
            {"task": "a", "repetition": 0, "status": "benchmark-complete", "reward": 0.5, "passed": true},
            {"task": "b", "repetition": 0, "status": "benchmark-complete", "reward": 1.0, "passed": false,
             "verifier_output": "no"},
            {"task": "c", "repetition": 1, "status": "benchmark-complete", "reward": 1.0},
            {"task": "d", "repetition": 0, "status": "benchmark-complete", "reward": 0.9},
            {"task": "e", "repetition": 0, "status": "timeout", "reward": 1.0},
        ], "failed": ["ignored"]});
        let tasks: Vec<String> = failed_cases(&s)
            .unwrap()
            .into_iter()
            .map(|c| c.task)
            .collect();
        assert_eq!(tasks, ["b", "d", "e"]);
        assert_eq!(
            failed_cases(&json!({"failed": ["train-3"], "passed": ["train-1"]})).unwrap(),
            vec![Case {
                task: "train-3".into(),
                repetition: None,
                status: None,
                reward: None,
                output: String::new()
            }]
        );
        assert_eq!(
            failed_cases(&json!({"rollout": "noop"})).unwrap_err(),
            "the rollout summary has neither `trials` nor `failed`: \
             analyze/failure_patterns reads the summary of rollout/train"
        );
        assert_eq!(
            failed_cases(&json!({"trials": [{"status": "timeout"}]})).unwrap_err(),
            "trials[0] has no task name"
        );
        assert_eq!(
            failed_cases(&json!([1])).unwrap_err(),
            "the rollout summary is not a JSON object"
        );
    }

    fn sample() -> Vec<Case> {
        vec![
            case("p1", 0, "benchmark-complete", Some(0.0), "assert 1 == 2"),
            case("p2", 0, "timeout", None, "[agent_timeout] 30 s"),
            case("p3", 0, "benchmark-complete", Some(0.5), "assert 4 == 2"),
            case("p1", 1, "benchmark-complete", Some(0.1), "assert 9 == 2"),
            case("p4", 0, "infrastructure-failed", None, ""),
        ]
    }

    #[test]
    fn groups_are_ordered_by_count_then_pattern() {
        let groups = group(&sample(), 2);
        let brief: Vec<(&str, usize, Vec<&str>)> = groups
            .iter()
            .map(|g| {
                (
                    g.pattern.as_str(),
                    g.count,
                    g.tasks.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            brief,
            vec![
                ("benchmark-complete: assert # == #", 3, vec!["p1", "p3"]),
                ("infrastructure-failed", 1, vec!["p4"]),
                ("timeout: [agent_timeout]", 1, vec!["p2"]),
            ]
        );
        assert_eq!(
            groups[0].examples,
            vec![
                json!({"task": "p1", "repetition": 0, "reward": 0.0, "verifier_output": "assert 1 == 2"}),
                json!({"task": "p3", "repetition": 0, "reward": 0.5, "verifier_output": "assert 4 == 2"}),
            ]
        );
    }

    #[test]
    fn the_budget_limits_groups_examples_and_characters() {
        // Fits: everything, nothing truncated.
        let s = bounded_summary(&sample(), 10, 3, 4000);
        assert_eq!(s["truncated"], false);
        assert_eq!(s["failed_trials"], 5);
        assert_eq!(s["groups"].as_array().unwrap().len(), 3);
        assert_eq!(s["groups"][0]["examples"].as_array().unwrap().len(), 3);

        // max_groups and max_examples_per_group.
        let s = bounded_summary(&sample(), 2, 1, 4000);
        assert_eq!(s["truncated"], true);
        let patterns: Vec<&str> = s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["pattern"].as_str().unwrap())
            .collect();
        assert_eq!(
            patterns,
            ["benchmark-complete: assert # == #", "infrastructure-failed"]
        );
        assert_eq!(s["groups"][0]["examples"].as_array().unwrap().len(), 1);

        // max_chars: examples go from the last group first, then whole groups.
        let s = bounded_summary(&sample(), 10, 3, 420);
        assert!(s.to_string().chars().count() <= 420);
        assert_eq!(
            s,
            json!({"failed_trials": 5, "truncated": true, "groups": [
                {"pattern": "benchmark-complete: assert # == #", "count": 3, "tasks": ["p1", "p3"],
                 "examples": [
                    {"task": "p1", "repetition": 0, "reward": 0.0, "verifier_output": "assert 1 == 2"},
                 ]},
                {"pattern": "infrastructure-failed", "count": 1, "tasks": ["p4"], "examples": []},
                {"pattern": "timeout: [agent_timeout]", "count": 1, "tasks": ["p2"], "examples": []},
            ]})
        );
        let s = bounded_summary(&sample(), 10, 3, 200);
        assert!(s.to_string().chars().count() <= 200);
        assert_eq!(s["truncated"], true);
        assert_eq!(s["groups"].as_array().unwrap().len(), 1);
        assert_eq!(s["groups"][0]["examples"], json!([]));
    }

    #[test]
    fn analyze_reads_the_rollout_train_summary_and_writes_the_full_grouping() {
        let dir = tempfile::tempdir().unwrap();
        let rollout = Evidence {
            summary: json!({"sampling": "static", "tasks": ["p1", "p2", "p3"], "trials": [
                {"task": "p1", "repetition": 0, "status": "benchmark-complete", "reward": 1.0, "passed": true},
                {"task": "p2", "repetition": 0, "status": "benchmark-complete", "reward": 0.25,
                 "passed": false, "verifier_output": ""},
                {"task": "p3", "repetition": 0, "status": "benchmark-complete", "reward": 0.5,
                 "passed": false, "verifier_output": ""},
            ], "mean_reward": 0.583, "failed": ["p2", "p3"]})
            .to_string(),
            artifacts: vec!["cases.json".into()],
        };
        let ev = analyze_with(
            &ctx(json!({"max_examples_per_group": 1})),
            &rollout,
            dir.path(),
        )
        .unwrap();
        assert_eq!(ev.artifacts, ["failure_patterns.json"]);
        assert_eq!(
            parse(&ev.summary),
            json!({"failed_trials": 2, "truncated": true, "groups": [
                {"pattern": "benchmark-complete: reward below threshold", "count": 2,
                 "tasks": ["p2", "p3"],
                 "examples": [{"task": "p2", "repetition": 0, "reward": 0.25, "verifier_output": ""}]},
            ]})
        );
        let full =
            parse(&std::fs::read_to_string(dir.path().join("failure_patterns.json")).unwrap());
        assert_eq!(full["failed_trials"], 2);
        assert_eq!(full["groups"][0]["count"], 2);

        // The CLI's sample evidence (no trials, a `failed` list) works too.
        let sample = Evidence {
            summary: r#"{"failed":["train-3"],"passed":["train-1","train-2"]}"#.into(),
            artifacts: vec![],
        };
        let ev = analyze_with(&ctx(json!({})), &sample, dir.path()).unwrap();
        assert_eq!(
            parse(&ev.summary),
            json!({"failed_trials": 1, "truncated": false, "groups": [
                {"pattern": "failed", "count": 1, "tasks": ["train-3"],
                 "examples": [{"task": "train-3", "repetition": null, "reward": null,
                               "verifier_output": ""}]},
            ]})
        );
        let bad = Evidence {
            summary: "not json".into(),
            artifacts: vec![],
        };
        assert!(
            analyze_with(&ctx(json!({})), &bad, dir.path())
                .unwrap_err()
                .starts_with("the rollout summary is not JSON: ")
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(mask_digits("a12b3 4.5"), "a#b# #.#");
        assert_eq!(tail("xé€z", 2), "€z");
        assert_eq!(tail("ab", 5), "ab");
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <FailurePatterns as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"max_groups": 10, "max_examples_per_group": 3, "max_chars": 4000})
        );
        assert!(schema.normalize(r#"{"max_groups": 0}"#).is_err());
        assert!(schema.normalize(r#"{"max_chars": 100}"#).is_err());
        assert!(schema.normalize(r#"{"model": "x"}"#).is_err());
    }
}
