//! driver/stall_swap: an agent driver that swaps the select policy when progress stalls.
//!
//! After each generation it looks at the certified primary-split scores the host sent.
//! When the last `window` generations all ran under the active select operator and none
//! of them beat the best score kept before it, it proposes the next policy of
//! `policies` (cycling) as the new select binding. Counting only generations run under
//! the active policy gives each policy a full window before it can be swapped out.

use evolve_operator_sdk::config::{array, integer, string};
use evolve_operator_sdk::prelude::*;
use std::collections::BTreeMap;

pub struct StallSwap;

impl Operator for StallSwap {
    const NAME: &'static str = "stall_swap";
    const SUMMARY: &'static str =
        "Swap the select policy when the best score has not improved for `window` generations.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "window",
                integer()
                    .default(json!(2))
                    .minimum(1.0)
                    .description("Generations without improvement before the policy is swapped"),
            )
            .field(
                "policies",
                array(string().minimum(1.0))
                    .default(json!(["greedy", "score_child_prop"]))
                    .minimum(2.0)
                    .description("Built-in select operators to cycle through"),
            )
            .refine(distinct_policies)
    }
}

fn distinct_policies(config: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let names: Vec<&str> = config
        .get("policies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() == names.len() {
        Ok(())
    } else {
        Err(vec![Violation::new("policies", "must not repeat a policy")])
    }
}

impl Driver for StallSwap {
    fn revise(ctx: &Context, feedback: &DriverFeedback) -> Result<Option<Revision>, String> {
        let window = ctx
            .i64("window")
            .and_then(|w| u32::try_from(w).ok())
            .ok_or("config.window must be a positive integer")?;
        let policies: Vec<String> = ctx
            .config
            .get("policies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect();
        let active = active_select(&feedback.active_bindings)?;
        if !stalled(feedback, &active, window) {
            return Ok(None);
        }
        let next = next_policy(&policies, &active).ok_or("config.policies is empty")?;
        let recipe = json!({"operators": {"select": {"operator": next}}});
        Ok(Some(Revision {
            recipe: recipe.to_string(),
            reason: format!(
                "the best score has not improved for {window} generation(s) under select/{active}; \
                 switching to select/{next}"
            ),
        }))
    }
}

/// The select operator of the active recipe.
fn active_select(bindings: &str) -> Result<String, String> {
    let v: Value = evolve_operator_sdk::serde_json::from_str(bindings)
        .map_err(|e| format!("active-bindings is not JSON: {e}"))?;
    v.pointer("/select/operator")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| "active-bindings has no select operator".to_string())
}

/// The policy after `active` in `policies`, cycling; the first one when `active` is
/// not among them.
fn next_policy<'a>(policies: &'a [String], active: &str) -> Option<&'a String> {
    let at = policies.iter().position(|p| p == active);
    let next = at.map_or(0, |i| (i + 1) % policies.len().max(1));
    policies.get(next)
}

/// The select operator a generation ran under, from its bindings.
fn select_of(g: &GenerationFeedback) -> Option<&str> {
    g.bindings
        .iter()
        .find(|b| b.stage == Stage::Select)
        .map(|b| b.operator.as_str())
}

/// The best score the gate kept in each generation (several children share a number).
fn best_by_generation(feedback: &DriverFeedback) -> BTreeMap<u32, Option<f64>> {
    let mut out: BTreeMap<u32, Option<f64>> = BTreeMap::new();
    for g in &feedback.generations {
        let kept = g.verdict == Some(Verdict::Keep);
        let score = g.score.filter(|s| kept && s.is_finite());
        let slot = out.entry(g.generation).or_insert(None);
        *slot = match (*slot, score) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    out
}

/// Whether the last `window` generations (up to the one that just completed) all ran
/// under `active` and none of them improved on the best score kept before it.
fn stalled(feedback: &DriverFeedback, active: &str, window: u32) -> bool {
    let current = feedback.generation;
    if window == 0 || current < window {
        return false;
    }
    let first = current + 1 - window;
    let under_active = feedback
        .generations
        .iter()
        .filter(|g| g.generation >= first && g.generation <= current)
        .all(|g| select_of(g) == Some(active));
    if !under_active {
        return false;
    }
    let best = best_by_generation(feedback);
    let before = best
        .range(..first)
        .filter_map(|(_, s)| *s)
        .fold(None::<f64>, |m, s| Some(m.map_or(s, |m| m.max(s))));
    let Some(before) = before else {
        // Nothing was ever kept before the window: nothing to stall against.
        return false;
    };
    best.range(first..=current)
        .filter_map(|(_, s)| *s)
        .all(|s| s <= before)
}

evolve_operator_sdk::export!(driver: StallSwap);

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(n: u32, score: Option<f64>, keep: bool, select: &str) -> GenerationFeedback {
        GenerationFeedback {
            generation_id: n.to_string(),
            parent: (n > 0).then(|| "0".to_string()),
            generation: n,
            status: GenerationStatus::Complete,
            score,
            verdict: Some(if keep {
                Verdict::Keep
            } else {
                Verdict::Discard
            }),
            failure_stage: None,
            reason: None,
            recipe_sha256: "x".into(),
            bindings: vec![BindingOutcome {
                stage: Stage::Select,
                operator: select.into(),
                outcome: StageOutcome::Ok,
            }],
        }
    }

    fn feedback(generations: Vec<GenerationFeedback>, active: &str) -> DriverFeedback {
        DriverFeedback {
            generation: generations.iter().map(|g| g.generation).max().unwrap_or(0),
            generations,
            champion: Some("0".into()),
            active_bindings: json!({"select": {"operator": active, "config": {}}}).to_string(),
            active_recipe_sha256: "x".into(),
        }
    }

    fn revise(window: u32, fb: &DriverFeedback) -> Option<Revision> {
        let ctx = Context::for_test(
            json!({"window": window, "policies": ["greedy", "score_child_prop"]}),
        );
        StallSwap::revise(&ctx, fb).unwrap()
    }

    #[test]
    fn keeps_the_policy_while_scores_improve() {
        let fb = feedback(
            vec![
                generation(0, Some(0.1), true, "greedy"),
                generation(1, Some(0.2), true, "greedy"),
                generation(2, Some(0.3), true, "greedy"),
            ],
            "greedy",
        );
        assert!(revise(2, &fb).is_none());
    }

    #[test]
    fn swaps_after_window_generations_without_improvement() {
        let fb = feedback(
            vec![
                generation(0, Some(0.1), true, "greedy"),
                generation(1, Some(0.5), true, "greedy"),
                generation(2, Some(0.4), false, "greedy"),
                generation(3, Some(0.5), true, "greedy"),
            ],
            "greedy",
        );
        let r = revise(2, &fb).expect("a revision");
        let recipe: Value = evolve_operator_sdk::serde_json::from_str(&r.recipe).unwrap();
        assert_eq!(
            recipe,
            json!({"operators": {"select": {"operator": "score_child_prop"}}})
        );
        assert!(r.reason.contains("select/greedy"), "{}", r.reason);
    }

    #[test]
    fn a_discarded_higher_score_is_not_progress() {
        let fb = feedback(
            vec![
                generation(0, Some(0.5), true, "greedy"),
                generation(1, Some(0.9), false, "greedy"),
            ],
            "greedy",
        );
        assert!(revise(1, &fb).is_some());
    }

    #[test]
    fn a_new_policy_gets_a_full_window() {
        // Generation 3 ran under the new policy: only one generation of evidence.
        let fb = feedback(
            vec![
                generation(0, Some(0.5), true, "greedy"),
                generation(1, Some(0.4), false, "greedy"),
                generation(2, Some(0.4), false, "greedy"),
                generation(3, Some(0.4), false, "score_child_prop"),
            ],
            "score_child_prop",
        );
        assert!(revise(2, &fb).is_none());
        let mut more = fb.generations.clone();
        more.push(generation(4, None, false, "score_child_prop"));
        let r = revise(2, &feedback(more, "score_child_prop")).expect("a revision");
        assert!(r.recipe.contains("\"greedy\""), "cycles back: {}", r.recipe);
    }

    #[test]
    fn too_early_or_no_baseline_keeps_the_recipe() {
        let fb = feedback(vec![generation(0, Some(0.5), true, "greedy")], "greedy");
        assert!(revise(2, &fb).is_none());
        let unscored = feedback(
            vec![
                generation(0, None, true, "greedy"),
                generation(1, None, false, "greedy"),
            ],
            "greedy",
        );
        assert!(revise(1, &unscored).is_none());
    }

    #[test]
    fn an_unknown_active_policy_swaps_to_the_first() {
        let policies = vec!["a".to_string(), "b".to_string()];
        assert_eq!(next_policy(&policies, "zzz"), Some(&policies[0]));
        assert_eq!(next_policy(&policies, "b"), Some(&policies[0]));
    }

    #[test]
    fn several_children_count_as_one_generation() {
        let mut a = generation(1, Some(0.3), false, "greedy");
        a.generation_id = "1-0".into();
        let mut b = generation(1, Some(0.6), true, "greedy");
        b.generation_id = "1-1".into();
        let fb = feedback(
            vec![generation(0, Some(0.5), true, "greedy"), a, b],
            "greedy",
        );
        assert!(revise(1, &fb).is_none(), "child 1-1 improved on 0.5");
    }

    #[test]
    fn schema_defaults_and_refusals() {
        let schema = <StallSwap as Operator>::config().build().unwrap();
        let d = schema.normalize("{}").unwrap();
        assert_eq!(d["window"], json!(2));
        assert_eq!(d["policies"], json!(["greedy", "score_child_prop"]));
        assert!(schema.normalize(r#"{"window": 0}"#).is_err());
        assert!(schema.normalize(r#"{"policies": ["greedy"]}"#).is_err());
        let dup = schema
            .normalize(r#"{"policies": ["greedy", "greedy"]}"#)
            .unwrap_err();
        assert_eq!(dup[0].path, "policies");
    }

    #[test]
    fn malformed_bindings_are_an_error() {
        let mut fb = feedback(vec![generation(0, Some(0.5), true, "greedy")], "greedy");
        fb.active_bindings = "{}".into();
        let ctx = Context::for_test(json!({"window": 1, "policies": ["a", "b"]}));
        assert!(StallSwap::revise(&ctx, &fb).is_err());
    }
}
