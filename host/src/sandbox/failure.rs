//! Every way an operator call can fail, as one typed value.

use super::contract::ContractError;
use super::quota::QuotaBreach;
use std::fmt;
use std::time::Duration;

/// Why an operator could not be loaded for a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// What was being loaded: a path in a checkout, or `builtin:<stage>/<name>`.
    pub origin: String,
    pub kind: LoadErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadErrorKind {
    /// The file could not be read safely inside the checkout.
    Unreadable(String),
    /// It is not a component that fits the stage's world.
    Contract(ContractError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            LoadErrorKind::Unreadable(why) => {
                write!(f, "operator {}: cannot be read: {why}", self.origin)
            }
            LoadErrorKind::Contract(e) => write!(f, "operator {} {e}", self.origin),
        }
    }
}

impl std::error::Error for LoadError {}

/// How a call that started went wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum OperatorFailure {
    /// The operator returned an error through its interface.
    Reported(String),
    /// The guest trapped; `panic` is the guest's panic message when it printed one.
    Trap {
        trap: String,
        panic: Option<String>,
    },
    /// It ran past its deadline (in wasm code, or blocked in a host call).
    Timeout {
        limit: Duration,
        in_host_call: bool,
    },
    /// It tried to grow its memory past the cap.
    OutOfMemory {
        limit: usize,
    },
    StackOverflow,
    /// It used up its fuel (instruction budget).
    OutOfFuel,
    /// It wrote more to a writable grant than its disk quota allows (see `quota.rs`);
    /// what it wrote there was removed.
    QuotaExceeded(QuotaBreach),
    /// It returned something the contract does not allow.
    MalformedResult(String),
    /// It loaded but does not behave as the contract says (e.g. describes another stage).
    ContractMismatch(String),
    /// The host could not set the call up (e.g. a granted directory is missing).
    Host(String),
    /// The user stopped the run while the call was in flight (or before it started).
    Cancelled,
}

impl OperatorFailure {
    /// A stable snake_case name for archives and JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            OperatorFailure::Reported(_) => "reported_error",
            OperatorFailure::Trap { .. } => "trap",
            OperatorFailure::Timeout { .. } => "timeout",
            OperatorFailure::OutOfMemory { .. } => "out_of_memory",
            OperatorFailure::StackOverflow => "stack_overflow",
            OperatorFailure::OutOfFuel => "out_of_fuel",
            OperatorFailure::QuotaExceeded(_) => "quota_exceeded",
            OperatorFailure::MalformedResult(_) => "malformed_result",
            OperatorFailure::ContractMismatch(_) => "contract_mismatch",
            OperatorFailure::Host(_) => "host_error",
            OperatorFailure::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for OperatorFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OperatorFailure::Reported(m) => write!(f, "the operator reported an error: {m}"),
            OperatorFailure::Trap {
                trap,
                panic: Some(p),
            } => write!(f, "the operator panicked: {p} ({trap})"),
            OperatorFailure::Trap { trap, panic: None } => {
                write!(f, "the operator trapped: {trap}")
            }
            OperatorFailure::Timeout {
                limit,
                in_host_call,
            } => write!(
                f,
                "the operator ran past its {:.1} s deadline{}",
                limit.as_secs_f64(),
                if *in_host_call {
                    " (while blocked in a host call)"
                } else {
                    ""
                }
            ),
            OperatorFailure::OutOfMemory { limit } => {
                write!(
                    f,
                    "the operator exceeded its memory cap of {} MiB",
                    limit >> 20
                )
            }
            OperatorFailure::StackOverflow => write!(f, "the operator overflowed its stack"),
            OperatorFailure::OutOfFuel => write!(f, "the operator used up its fuel"),
            OperatorFailure::QuotaExceeded(b) => {
                let at_least = if b.at_least { "at least " } else { "" };
                let what = if let Some(why) = &b.unwalkable {
                    format!("it made a directory the host cannot walk ({why})")
                } else if b.files > b.limit_files {
                    format!("it added {at_least}{} files", b.files)
                } else {
                    format!("it added {at_least}{} bytes", b.bytes)
                };
                write!(
                    f,
                    "the operator went over its disk quota in {}: {what}; the quota is {} \
                     bytes and {} files; what it wrote there was removed",
                    b.grant, b.limit_bytes, b.limit_files
                )
            }
            OperatorFailure::MalformedResult(m) => {
                write!(f, "the operator returned a malformed result: {m}")
            }
            OperatorFailure::ContractMismatch(m) => {
                write!(f, "the operator breaks the contract: {m}")
            }
            OperatorFailure::Host(m) => write!(f, "the host could not run the operator: {m}"),
            OperatorFailure::Cancelled => write!(f, "the call was cancelled (the run was stopped)"),
        }
    }
}

/// Turn a wasmtime error from instantiate/call into a typed failure.
pub(crate) fn classify(
    err: &wasmtime::Error,
    memory_refused: bool,
    limits: &super::Limits,
    stderr: &[u8],
) -> OperatorFailure {
    use wasmtime::Trap;
    let (memory_cap, timeout) = (limits.memory_bytes, limits.timeout);
    let trap = err.downcast_ref::<Trap>();
    match trap {
        Some(Trap::Interrupt) => {
            return OperatorFailure::Timeout {
                limit: timeout,
                in_host_call: false,
            };
        }
        Some(Trap::OutOfFuel) => return OperatorFailure::OutOfFuel,
        Some(Trap::StackOverflow) => return OperatorFailure::StackOverflow,
        Some(Trap::MemoryOutOfBounds) if shadow_stack_wrapped(err) => {
            return OperatorFailure::StackOverflow;
        }
        _ => {}
    }
    // wasmtime's own bound on the data one value carries from the guest to the host
    // (`Store::set_hostcall_fuel`, set per call in `state.rs`): its error type is
    // private, so it is recognised by its message, which wasmtime =48.0.8 fixes. The
    // value is a result or a host call's argument; either way it is too big to accept.
    if trap.is_none() && format!("{err:#}").contains(HOSTCALL_FUEL_MESSAGE) {
        return OperatorFailure::MalformedResult(format!(
            "the operator passed the host more than {} bytes in one value (its result, or \
             the argument of a host call), and the result limit is {} bytes",
            super::state::hostcall_fuel(limits),
            limits.result_bytes
        ));
    }
    // A Rust guest whose allocation is refused aborts (an `unreachable` trap) after
    // printing "memory allocation of N bytes failed"; the limiter's flag says why.
    if memory_refused {
        return OperatorFailure::OutOfMemory { limit: memory_cap };
    }
    match trap {
        Some(t) => OperatorFailure::Trap {
            trap: t.to_string(),
            panic: panic_message(stderr),
        },
        None => OperatorFailure::Trap {
            trap: format!("{err:#}"),
            panic: panic_message(stderr),
        },
    }
}

/// Whether an out-of-bounds trap is a linear-memory (shadow) stack running off address 0.
///
/// rustc and clang put a wasm32 module's shadow stack at the bottom of linear memory,
/// growing down toward address 0, and keep its pointer in the `__stack_pointer` global.
/// Components do not export that global, but wasmtime attaches the fault to the error
/// (its `WasmFault` context, not re-exported, so read through its display, fixed in
/// wasmtime =48.0.8: "memory fault at wasm address 0x… in linear memory of size 0x…").
/// A stack pointer decremented past 0 wraps to just under 4 GiB, so the overflowing
/// frame's first store faults within a frame's size of the 4 GiB mark (the effective
/// address is 33 bits: pointer plus offset). An ordinary wild access lands there only
/// by chance; no memory reaches it (the sandbox caps memory far below 4 GiB).
fn shadow_stack_wrapped(err: &wasmtime::Error) -> bool {
    const FOUR_GIB: u64 = 1 << 32;
    const FRAME: u64 = 1 << 20;
    err.chain().any(|cause| {
        let text = cause.to_string();
        let Some(rest) = text.strip_prefix("memory fault at wasm address 0x") else {
            return false;
        };
        let Some((addr, size)) = rest.split_once(" in linear memory of size 0x") else {
            return false;
        };
        match (u64::from_str_radix(addr, 16), u64::from_str_radix(size, 16)) {
            (Ok(addr), Ok(size)) => {
                size < FOUR_GIB - FRAME && (FOUR_GIB - FRAME..FOUR_GIB + FRAME).contains(&addr)
            }
            _ => false,
        }
    })
}

/// What wasmtime 48 says when a value from the guest exhausts the hostcall fuel.
const HOSTCALL_FUEL_MESSAGE: &str = "fuel allocated for hostcalls has been exhausted";

/// The message of a Rust panic as the default hook prints it:
/// `thread '<unnamed>' panicked at src/lib.rs:10:5:\n<message>\nnote: ...`.
pub fn panic_message(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let start = text.find("panicked at ")?;
    let after = &text[start..];
    let body = after.split_once('\n').map(|(_, rest)| rest)?;
    let msg: Vec<&str> = body
        .lines()
        .take_while(|l| !l.starts_with("note: "))
        .collect();
    let msg = msg.join("\n").trim().to_string();
    let location = after
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("panicked at ")
        .trim_end_matches(':');
    Some(if location.is_empty() {
        msg
    } else {
        format!("{msg} (at {location})")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_extracted_with_location() {
        let stderr = b"\nthread '<unnamed>' (1) panicked at src/lib.rs:60:24:\nguest panicked on purpose\nnote: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("guest panicked on purpose (at src/lib.rs:60:24)")
        );
        assert_eq!(panic_message(b"just logging\n"), None);
    }
}
