//! Turning interpreter errors into the operator's error text: always the script's path
//! and, where the interpreter knows it, the line in the script.

use crate::Limits;
use rhai::{EvalAltResult, ParseError, Position};

/// `script <path> line <n>: <what>` (or without the line when there is none).
pub fn at(path: &str, pos: Position, what: &str) -> String {
    match pos.line() {
        Some(line) => format!("script {path} line {line}: {what}"),
        None => format!("script {path}: {what}"),
    }
}

/// A syntax error.
pub fn parse(path: &str, e: &ParseError) -> String {
    at(
        path,
        e.position(),
        &format!("syntax error: {}", e.err_type()),
    )
}

/// A runtime error, a thrown value, or a limit the script ran into. Errors inside
/// functions the script called are reported where they happened, not at the call; a
/// limit, which the interpreter reports without a useful position, at `last`, the
/// position of the step that was running.
pub fn runtime(path: &str, e: &EvalAltResult, limits: &Limits, last: Position) -> String {
    let (inner, pos) = innermost(e, e.position());
    let pos = if inner.is_system_exception() || pos.is_none() {
        last
    } else {
        pos
    };
    let what = match inner {
        EvalAltResult::ErrorRuntime(value, _) => value.to_string(),
        EvalAltResult::ErrorTooManyOperations(_) => format!(
            "operation limit exceeded: more than {} operations (an endless loop?); \
             config.max_operations raises it",
            limits.max_operations
        ),
        EvalAltResult::ErrorTerminated(_, _) => format!(
            "memory limit exceeded: the script holds more than {} MiB; config.max_memory_mib raises it",
            limits.max_memory_bytes >> 20
        ),
        EvalAltResult::ErrorDataTooLarge(what, _) => format!(
            "{what} exceeds the script's data limits ({} bytes of text, {} array items, {} map entries)",
            crate::engine::MAX_STRING,
            crate::engine::MAX_ARRAY,
            crate::engine::MAX_MAP
        ),
        EvalAltResult::ErrorStackOverflow(_) => format!(
            "call depth limit exceeded: more than {} nested calls (endless recursion?)",
            crate::engine::MAX_CALL_LEVELS
        ),
        other => {
            // The interpreter's text ends with ` (line 7, position 3)`: the line is
            // already in front.
            let text = other.to_string();
            let suffix = format!(" ({})", other.position());
            text.strip_suffix(&suffix).unwrap_or(&text).to_string()
        }
    };
    at(path, pos, &what)
}

/// The error that actually happened, through any chain of function calls, and the most
/// precise position known for it.
fn innermost(e: &EvalAltResult, outer: Position) -> (&EvalAltResult, Position) {
    match e {
        EvalAltResult::ErrorInFunctionCall(_, _, inner, pos) => {
            let here = if pos.is_none() { outer } else { *pos };
            innermost(inner, here)
        }
        other => {
            let pos = other.position();
            (other, if pos.is_none() { outer } else { pos })
        }
    }
}
