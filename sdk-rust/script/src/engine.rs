//! The interpreter: one Rhai engine per call, configured so that a script can compute
//! and nothing else. No module loading, no clock, no `eval`; every loop iteration and
//! call counts against an operation budget; strings, arrays and maps are size-capped; a
//! memory meter stops a script that holds more than its budget. Float comparisons are
//! exact IEEE comparisons, as in the compiled operators (Rhai's defaults compare within
//! an epsilon, which would make a script disagree with its Rust twin on near-ties).

use crate::convert::{self, Returned};
use crate::{Grants, Limits, error, grants, meter};
use evolve_operator_sdk::serde_json::Value;
use evolve_operator_sdk::{Context, Rng, Script};
use rhai::{AST, Array, CallFnOptions, Dynamic, Engine, FLOAT, INT, Position, Scope};
use std::cell::Cell;
use std::rc::Rc;

/// Bytes of one string (and of all strings inside one value).
pub const MAX_STRING: usize = 1 << 20;
/// Items of one array (nested arrays included). The interpreter re-measures an array on
/// every change, so the cost of growing one to the limit is quadratic in the limit.
pub const MAX_ARRAY: usize = 10_000;
/// Entries of one object map (nested maps included).
pub const MAX_MAP: usize = 10_000;
/// Nested function calls.
pub const MAX_CALL_LEVELS: usize = 64;

/// A compiled script, ready to call its stage function.
pub struct Session {
    engine: Engine,
    ast: AST,
    script: Script,
    limits: Limits,
    baseline: Rc<Cell<isize>>,
    /// Where the script was last seen running (see `track_position`).
    last: Rc<Cell<Position>>,
    /// What the script changed and spent through its grants.
    pub(crate) tracked: grants::Tracked,
}

impl Session {
    /// Compile the script the host passed in `ctx`, with `grants` registered.
    pub fn open(ctx: &Context, grants: Grants) -> Result<Session, String> {
        let script = checked_script(ctx)?;
        let limits = Limits::from_config(&ctx.config);
        let baseline = Rc::new(Cell::new(meter::live_bytes()));
        let last = Rc::new(Cell::new(Position::NONE));
        let mut engine = base_engine(&limits, baseline.clone());
        track_position(&mut engine, last.clone());
        register_helpers(&mut engine, ctx.seed);
        let tracked = grants::Tracked::default();
        grants::register(&mut engine, grants, &tracked);
        let ast = engine
            .compile(&script.text)
            .map_err(|e| error::parse(&script.path, &e))?;
        Ok(Session {
            engine,
            ast,
            script,
            limits,
            baseline,
            last,
            tracked,
        })
    }

    /// Call the script's `function` with `args` and read its result as JSON. `params`
    /// names the parameters for the message when the script does not define it.
    pub fn call<'a>(
        &self,
        function: &'a str,
        params: &str,
        args: Vec<Dynamic>,
    ) -> Result<Returned<'a>, String> {
        if !self.defines(function, args.len()) {
            return Err(error::at(
                &self.script.path,
                Position::NONE,
                &format!("defines no function `{function}({params})`, which this stage calls"),
            ));
        }
        let mut scope = Scope::new();
        self.baseline.set(meter::live_bytes());
        let out = self
            .engine
            .call_fn_with_options::<Dynamic>(
                CallFnOptions::new().eval_ast(true),
                &mut scope,
                &self.ast,
                function,
                args,
            )
            .map_err(|e| error::runtime(&self.script.path, &e, &self.limits, self.last.get()))?;
        let value = convert::from_dynamic(&out, &format!("{function}()'s result"))
            .map_err(|e| error::at(&self.script.path, Position::NONE, &e))?;
        Ok(Returned { function, value })
    }

    /// Whether the script defines `function` with `arity` parameters.
    pub fn defines(&self, function: &str, arity: usize) -> bool {
        self.ast
            .iter_functions()
            .any(|f| f.name == function && f.params.len() == arity)
    }

    /// The path of the script, for messages.
    pub fn path(&self) -> &str {
        &self.script.path
    }
}

/// The script from the context, checked against its digest and the configured source.
fn checked_script(ctx: &Context) -> Result<Script, String> {
    let script = ctx.script.clone().ok_or(
        "no script was passed: a script operator runs the file its binding names in \
         config.source, which the host reads from the stage's checkout",
    )?;
    if let Some(source) = ctx.str("source")
        && source != script.path
    {
        return Err(format!(
            "the host passed script {} but config.source is {source}",
            script.path
        ));
    }
    let digest = crate::sha256_hex(script.text.as_bytes());
    if digest != script.sha256 {
        return Err(format!(
            "script {}: its text does not match its SHA-256 {}",
            script.path, script.sha256
        ));
    }
    Ok(script)
}

fn base_engine(limits: &Limits, baseline: Rc<Cell<isize>>) -> Engine {
    let mut engine = Engine::new();
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(MAX_CALL_LEVELS)
        .set_max_expr_depths(128, 64)
        .set_max_string_size(MAX_STRING)
        .set_max_array_size(MAX_ARRAY)
        .set_max_map_size(MAX_MAP)
        .set_max_variables(10_000)
        .set_max_functions(1_000)
        .set_strict_variables(true)
        // Registered operator overloads (the exact comparisons below) must win over the
        // built-in fast paths.
        .set_fast_operators(false);
    engine.disable_symbol("eval");
    engine.on_print(|s| eprintln!("{s}"));
    engine.on_debug(|s, _, pos| match pos.line() {
        Some(line) => eprintln!("[line {line}] {s}"),
        None => eprintln!("{s}"),
    });
    let max = limits.max_memory_bytes as isize;
    engine.on_progress(move |_| {
        (meter::live_bytes() - baseline.get() > max).then(|| Dynamic::from("memory limit"))
    });
    exact_comparisons(&mut engine);
    engine
}

/// Record the position of every step the script takes. The interpreter reports a limit
/// (operations, sizes, call depth, the memory meter) at the position of the outermost
/// call, which for the stage function is none; this is how such an error still names
/// the line that was running.
fn track_position(engine: &mut Engine, last: Rc<Cell<Position>>) {
    // `register_debugger` is marked volatile, not deprecated; the version is pinned.
    #[allow(deprecated)]
    engine.register_debugger(
        |_, debugger| debugger,
        move |_, event, _, _, pos| {
            if matches!(event, rhai::debugger::DebuggerEvent::Step) && !pos.is_none() {
                last.set(pos);
            }
            Ok(rhai::debugger::DebuggerCommand::StepInto)
        },
    );
}

/// IEEE comparisons for every mix of integer and float operands.
fn exact_comparisons(engine: &mut Engine) {
    macro_rules! ops {
        ($($op:tt)*) => {$(
            engine.register_fn(stringify!($op), |a: FLOAT, b: FLOAT| a $op b);
            engine.register_fn(stringify!($op), |a: FLOAT, b: INT| a $op (b as FLOAT));
            engine.register_fn(stringify!($op), |a: INT, b: FLOAT| (a as FLOAT) $op b);
        )*};
    }
    ops!(== != < <= > >=);
}

/// Pure helpers every script may use: number formatting as the compiled operators
/// print numbers, JSON, the call's deterministic random generator, and the shared
/// train-task selection.
fn register_helpers(engine: &mut Engine, seed: u64) {
    engine.register_fn("fmt", |x: FLOAT| format!("{x}"));
    engine.register_fn("fmt", |x: INT| format!("{x}"));
    engine.register_fn("fmt_fixed", |x: FLOAT, digits: INT| {
        format!("{x:.*}", digits.clamp(0, 17) as usize)
    });
    engine.register_fn("fmt_signed", |x: FLOAT, digits: INT| {
        format!("{x:+.*}", digits.clamp(0, 17) as usize)
    });
    engine.register_fn(
        "parse_json",
        |text: &str| -> Result<Dynamic, Box<rhai::EvalAltResult>> {
            evolve_operator_sdk::serde_json::from_str::<Value>(text)
                .map(|v| convert::to_dynamic(&v))
                .map_err(|e| format!("parse_json: not JSON: {e}").into())
        },
    );
    engine.register_fn(
        "to_json",
        |v: Dynamic| -> Result<String, Box<rhai::EvalAltResult>> {
            convert::from_dynamic(&v, "to_json's value")
                .map(|v| v.to_string())
                .map_err(Into::into)
        },
    );
    engine.register_fn("select_tasks", select_tasks);
    engine
        .register_type_with_name::<Rng>("Rng")
        .register_fn("rng", move || Rng::new(seed))
        .register_fn("next_float", |r: &mut Rng| r.next_f64() as FLOAT)
        .register_fn("below", |r: &mut Rng, n: INT| -> Dynamic {
            match u64::try_from(n).ok().and_then(|n| r.below(n)) {
                Some(i) => (i as INT).into(),
                None => Dynamic::UNIT,
            }
        })
        .register_fn(
            "weighted_index",
            |r: &mut Rng, weights: Array| -> Result<Dynamic, Box<rhai::EvalAltResult>> {
                let w = numbers(&weights, "weighted_index's weights")?;
                Ok(r.weighted_index(&w)
                    .map_or(Dynamic::UNIT, |i| (i as INT).into()))
            },
        );
}

/// rollout/train's task selection (`static` or `generation_shuffle`), so a script
/// validator can repeat it exactly.
fn select_tasks(
    train: Array,
    budget: INT,
    sampling: &str,
    seed: INT,
    generation_id: &str,
) -> Result<Array, Box<rhai::EvalAltResult>> {
    use evolve_operator_sdk::sampling::{Sampling, select_tasks};
    let names: Vec<String> = train
        .iter()
        .map(|t| t.clone().into_string())
        .collect::<Result<_, _>>()
        .map_err(|_| "select_tasks: the train list must hold task name strings".to_string())?;
    if budget < 1 {
        return Err("select_tasks: budget must be >= 1".to_string().into());
    }
    let sampling = Sampling::parse(sampling).map_err(|e| format!("select_tasks: {e}"))?;
    Ok(
        select_tasks(&names, budget as usize, sampling, seed, generation_id)
            .into_iter()
            .map(Dynamic::from)
            .collect(),
    )
}

/// An array of numbers (integers or floats) as floats.
pub(crate) fn numbers(items: &Array, what: &str) -> Result<Vec<f64>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_float()
                .or_else(|_| x.as_int().map(|i| i as FLOAT))
                .map_err(|_| format!("{what}[{i}] is a {}, not a number", x.type_name()))
        })
        .collect()
}
