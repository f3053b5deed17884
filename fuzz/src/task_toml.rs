//! Harbor's `task.toml` parser and its semantic checks.

use evaluator_harbor::task::TaskConfig;
use std::path::Path;

/// Parse `data` as `task.toml`. Invariant: an accepted config has the positive finite
/// timeouts the engines turn into `Duration`s (which panic on negative or NaN input).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = TaskConfig::parse(text, Path::new("tasks/t/task.toml")) else {
        return;
    };
    let _ = cfg.agent_timeout();
    let _ = cfg.verifier_timeout();
    let _ = cfg.network_allowed();
    let _ = evaluator_harbor::task::strip_canary(text);
}
