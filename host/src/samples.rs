//! Sample inputs for `evolve operator run`, `recipe check` and the self-edit check: a
//! small archive and candidate that show what each stage receives, so an operator can be
//! tried without an experiment.

use crate::sandbox::StageInput;
use crate::sandbox::types::*;
use serde_json::json;

pub fn context(config: &str, parent: Option<&str>) -> CallContext {
    CallContext {
        generation_id: "4".into(),
        parent: parent.map(str::to_string),
        generation: 4,
        seed: 0x5eed,
        config: config.to_string(),
        deadline_ms: 30_000,
        script: None,
    }
}

fn trial(repetition: u32, reward: f64) -> Trial {
    Trial {
        repetition,
        status: TrialStatus::BenchmarkComplete,
        reward: Some(reward),
    }
}

fn row(
    id: &str,
    parent: Option<&str>,
    generation: u32,
    score: f64,
    rewards: [f64; 3],
) -> ArchiveRow {
    ArchiveRow {
        generation_id: id.into(),
        parent: parent.map(str::to_string),
        generation,
        status: GenerationStatus::Complete,
        score: Some(score),
        eligible: true,
        verdict: Some(Verdict::Keep),
        children: 1,
        task_vector: ["private-1", "private-2", "private-3"]
            .iter()
            .zip(rewards)
            .map(|(t, r)| TaskScore {
                task: t.to_string(),
                trials: vec![trial(0, r)],
            })
            .collect(),
        cost_usd: 0.0,
        annotations: "{}".into(),
    }
}

/// Generation 0 and two children: `2` is the best, `3` was discarded by its gate.
pub fn archive() -> ArchiveView {
    let mut discarded = row("3", Some("2"), 3, 0.4, [1.0, 0.0, 0.0]);
    discarded.eligible = false;
    discarded.verdict = Some(Verdict::Discard);
    discarded.children = 0;
    ArchiveView {
        rows: vec![
            row("0", None, 0, 0.3333333333333333, [1.0, 0.0, 0.0]),
            row("1", Some("0"), 1, 0.6666666666666666, [1.0, 1.0, 0.0]),
            row("2", Some("1"), 2, 0.6666666666666666, [0.0, 1.0, 1.0]),
            discarded,
        ],
        champion: Some("1".into()),
    }
}

pub fn parent() -> ArchiveRow {
    archive().rows.remove(1)
}

pub fn child() -> ArchiveRow {
    archive().rows.remove(2)
}

pub fn evidence() -> Evidence {
    Evidence {
        summary: r#"{"failed":["train-3"],"passed":["train-1","train-2"]}"#.into(),
        artifacts: vec![],
    }
}

pub fn observation() -> Observation {
    Observation {
        rollout: Some(evidence()),
        analysis: None,
        feedback_dir: None,
        archive: Some(archive()),
        surface: Surface {
            includes: vec!["target/**".into()],
            excludes: vec![],
        },
    }
}

pub fn diff() -> CandidateDiff {
    CandidateDiff {
        changed_paths: vec!["target/params.json".into()],
        patch: "--- a/target/params.json\n+++ b/target/params.json\n@@ -1 +1 @@\n-{\"k\": 1}\n+{\"k\": 2}\n".into(),
        recent_accepted: vec![],
    }
}

pub fn playbook() -> Vec<PlaybookEntry> {
    vec![PlaybookEntry {
        id: "p1".into(),
        text: "Smaller steps helped in generation 2.".into(),
        data: "{}".into(),
    }]
}

/// Files put in the sample candidate's `target/`.
pub const TARGET_FILES: &[(&str, &str)] = &[
    ("params.json", "{\"k\": 1, \"temperature\": 0.7}\n"),
    ("prompt.md", "You are a careful agent.\n"),
];

/// The sample input of `stage`, with `config` (normalized JSON text) as its
/// configuration.
pub fn input(stage: Stage, config: &str) -> StageInput {
    let ctx = |parent: Option<&str>| context(config, parent);
    match stage {
        Stage::Select => StageInput::Select {
            ctx: ctx(None),
            archive: archive(),
        },
        Stage::Rollout => StageInput::Rollout {
            ctx: ctx(Some("1")),
            parent: parent(),
        },
        Stage::Analyze => StageInput::Analyze {
            ctx: ctx(Some("1")),
            rollout: evidence(),
        },
        Stage::Mutate => StageInput::Mutate {
            ctx: ctx(Some("1")),
            observation: observation(),
        },
        Stage::Validate => StageInput::Validate {
            ctx: ctx(Some("1")),
            changed: vec!["target/params.json".into()],
            rollout: Some(evidence()),
        },
        Stage::Novelty => StageInput::Novelty {
            ctx: ctx(Some("1")),
            diff: diff(),
        },
        Stage::Gate => StageInput::Gate {
            ctx: ctx(Some("1")),
            child: child(),
            parent: Some(parent()),
            archive: archive(),
            diff: Some(diff()),
        },
        Stage::Record => StageInput::Record {
            ctx: ctx(Some("1")),
            child: child(),
            diff: Some(diff()),
        },
        Stage::Reflect => StageInput::Reflect {
            ctx: ctx(None),
            archive: archive(),
            playbook: playbook(),
        },
        Stage::Driver => StageInput::Driver {
            ctx: ctx(None),
            feedback: sample_feedback(),
        },
    }
}

/// A small feedback for `evolve operator run driver/NAME`.
pub fn sample_feedback() -> DriverFeedback {
    let bindings = |select: &str| {
        vec![BindingOutcome {
            stage: Stage::Select,
            operator: select.into(),
            outcome: StageOutcome::Ok,
        }]
    };
    let generation = |n: u32, score: f64, keep: bool| GenerationFeedback {
        generation_id: n.to_string(),
        parent: (n > 0).then(|| "0".to_string()),
        generation: n,
        status: GenerationStatus::Complete,
        score: Some(score),
        verdict: Some(if keep {
            Verdict::Keep
        } else {
            Verdict::Discard
        }),
        failure_stage: None,
        reason: None,
        recipe_sha256: "0".repeat(64),
        bindings: if n == 0 { vec![] } else { bindings("greedy") },
    };
    DriverFeedback {
        generation: 3,
        generations: vec![
            generation(0, 0.4, true),
            generation(1, 0.6, true),
            generation(2, 0.5, false),
            generation(3, 0.6, false),
        ],
        champion: Some("1".into()),
        active_bindings: json!({"select": {"operator": "greedy", "config": {}}}).to_string(),
        active_recipe_sha256: "0".repeat(64),
    }
}
