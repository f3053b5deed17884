//! The glue between a stage world's generated exports and the author's traits.
//!
//! [`crate::export!`] expands, in the operator's crate, to the world's bindings plus
//! one small adapter type whose trait impls call the functions below. Keeping the logic
//! here (not in the macro) means it is compiled, tested and documented once.

use crate::config::Violation;
use crate::types::{ConfigViolation, Stage};
use crate::{Context, Operator};
use serde_json::Value;

/// The fields of `meta.description`, before the world-specific record is built.
pub struct Described {
    pub stage: Stage,
    pub name: String,
    pub summary: String,
    pub config_schema: String,
}

/// Describe operator `T` serving `stage`.
///
/// A broken declaration (bad name, invalid schema) is the author's bug, not an input
/// error: it panics with a precise message, which the host reports as a contract
/// violation naming the component.
pub fn describe<T: Operator>(stage: Stage) -> Described {
    if let Err(msg) = check_name(T::NAME) {
        panic!("evolve operator contract: {msg}");
    }
    let schema = build_schema::<T>();
    Described {
        stage,
        name: T::NAME.to_string(),
        summary: T::SUMMARY.trim().to_string(),
        config_schema: schema.describe().to_string(),
    }
}

/// Normalize a raw configuration with `T`'s schema.
pub fn normalize_config<T: Operator>(raw: &str) -> Result<String, Vec<ConfigViolation>> {
    build_schema::<T>()
        .normalize(raw)
        .map(|map| Value::Object(map).to_string())
        .map_err(|violations| violations.into_iter().map(to_wit).collect())
}

/// Run a stage function with the parsed context.
pub fn with_context<R>(
    ctx: crate::types::CallContext,
    f: impl FnOnce(&Context) -> Result<R, String>,
) -> Result<R, String> {
    let ctx = Context::from_wit(ctx)?;
    f(&ctx)
}

/// Serialize record annotations.
pub fn annotations(
    result: Result<serde_json::Map<String, Value>, String>,
) -> Result<String, String> {
    result.map(|map| Value::Object(map).to_string())
}

fn build_schema<T: Operator>() -> crate::config::Schema {
    match T::config().build() {
        Ok(schema) => schema,
        Err(errors) => {
            let list: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            panic!(
                "evolve operator contract: the configuration schema of `{}` is invalid: {}",
                T::NAME,
                list.join("; ")
            )
        }
    }
}

fn to_wit(v: Violation) -> ConfigViolation {
    ConfigViolation {
        path: v.path,
        message: v.message,
    }
}

/// Operator names are path segments and CLI arguments: keep them boring.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "operator name {name:?} must be 1-64 characters of [a-z0-9_]"
        ))
    }
}

/// Export an operator type as the component for one stage.
///
/// ```ignore
/// evolve_operator_sdk::export!(select: Greedy);
/// ```
///
/// The stage is one of `select`, `rollout`, `analyze`, `mutate`, `validate`,
/// `novelty`, `gate`, `record`, `reflect` (or `driver`, the agent driver), and the type must implement [`Operator`]
/// and that stage's trait. Use it once per crate.
#[macro_export]
macro_rules! export {
    ($stage:ident : $ty:ty) => {
        // The component glue exists only in the wasm build; natively (unit tests, docs)
        // the crate is plain Rust, but the trait bound is still checked.
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        #[allow(warnings, clippy::all)]
        mod __evolve_world {
            $crate::__generate_world!($stage);
        }
        #[cfg(target_arch = "wasm32")]
        $crate::__export_stage!($stage, $ty);
        $crate::__assert_stage!($stage, $ty);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __assert_stage {
    (select, $ty:ty) => { $crate::__assert_stage!(@ Select, $ty); };
    (rollout, $ty:ty) => { $crate::__assert_stage!(@ Rollout, $ty); };
    (analyze, $ty:ty) => { $crate::__assert_stage!(@ Analyze, $ty); };
    (mutate, $ty:ty) => { $crate::__assert_stage!(@ Mutate, $ty); };
    (validate, $ty:ty) => { $crate::__assert_stage!(@ Validate, $ty); };
    (novelty, $ty:ty) => { $crate::__assert_stage!(@ Novelty, $ty); };
    (gate, $ty:ty) => { $crate::__assert_stage!(@ Gate, $ty); };
    (record, $ty:ty) => { $crate::__assert_stage!(@ Record, $ty); };
    (reflect, $ty:ty) => { $crate::__assert_stage!(@ Reflect, $ty); };
    (driver, $ty:ty) => { $crate::__assert_stage!(@ Driver, $ty); };
    (@ $trait:ident, $ty:ty) => {
        const _: fn() = || {
            fn implements<T: $crate::$trait>() {}
            implements::<$ty>();
        };
    };
    ($other:ident, $ty:ty) => {
        compile_error!(concat!(
            "evolve_operator_sdk::export!: unknown stage `",
            stringify!($other),
            "`; expected one of select, rollout, analyze, mutate, validate, novelty, gate, record, reflect, driver"
        ));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_meta {
    ($stage:ident, $variant:ident, $ty:ty) => {
        impl __evolve_world::exports::evolve::operator::meta::Guest for __EvolveOperator {
            fn describe() -> __evolve_world::exports::evolve::operator::meta::Description {
                let d = $crate::__private::describe::<$ty>($crate::types::Stage::$variant);
                __evolve_world::exports::evolve::operator::meta::Description {
                    stage: d.stage,
                    name: d.name,
                    summary: d.summary,
                    config_schema: d.config_schema,
                }
            }
            fn normalize_config(
                raw: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                ::std::vec::Vec<$crate::types::ConfigViolation>,
            > {
                $crate::__private::normalize_config::<$ty>(&raw)
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_stage {
    (select, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String, vec::Vec};
            struct __EvolveOperator;
            $crate::__export_meta!(select, Select, $ty);
            impl __evolve_world::exports::evolve::operator::select::Guest for __EvolveOperator {
                fn select(ctx: CallContext, archive: ArchiveView) -> Result<Vec<String>, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Select>::select(c, &archive)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (rollout, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(rollout, Rollout, $ty);
            impl __evolve_world::exports::evolve::operator::rollout::Guest for __EvolveOperator {
                fn rollout(ctx: CallContext, parent: ArchiveRow) -> Result<Evidence, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Rollout>::rollout(c, &parent)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (analyze, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(analyze, Analyze, $ty);
            impl __evolve_world::exports::evolve::operator::analyze::Guest for __EvolveOperator {
                fn analyze(ctx: CallContext, rollout: Evidence) -> Result<Evidence, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Analyze>::analyze(c, &rollout)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (mutate, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(mutate, Mutate, $ty);
            impl __evolve_world::exports::evolve::operator::mutate::Guest for __EvolveOperator {
                fn mutate(ctx: CallContext, observation: Observation) -> Result<Proposal, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Mutate>::mutate(c, &observation)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (validate, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String, vec::Vec};
            struct __EvolveOperator;
            $crate::__export_meta!(validate, Validate, $ty);
            impl __evolve_world::exports::evolve::operator::validate::Guest for __EvolveOperator {
                fn validate(ctx: CallContext, changed: Vec<String>, rollout: Option<Evidence>) -> Result<Validation, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Validate>::validate(c, &changed, rollout.as_ref())
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (novelty, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(novelty, Novelty, $ty);
            impl __evolve_world::exports::evolve::operator::novelty::Guest for __EvolveOperator {
                fn assess(ctx: CallContext, diff: CandidateDiff) -> Result<NoveltyVerdict, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Novelty>::assess(c, &diff)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (gate, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{option::Option, result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(gate, Gate, $ty);
            impl __evolve_world::exports::evolve::operator::gate::Guest for __EvolveOperator {
                fn decide(
                    ctx: CallContext,
                    child: ArchiveRow,
                    parent: Option<ArchiveRow>,
                    archive: ArchiveView,
                    diff: Option<CandidateDiff>,
                ) -> Result<GateDecision, String> {
                    let input = $crate::GateInput { archive: &archive, diff: diff.as_ref() };
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Gate>::decide(c, &child, parent.as_ref(), &input)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (record, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(record, Record, $ty);
            impl __evolve_world::exports::evolve::operator::record::Guest for __EvolveOperator {
                fn annotate(
                    ctx: CallContext,
                    child: ArchiveRow,
                    diff: Option<CandidateDiff>,
                ) -> Result<String, String> {
                    $crate::__private::annotations($crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Record>::annotate(c, &child, diff.as_ref())
                    }))
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (reflect, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{result::Result, string::String, vec::Vec};
            struct __EvolveOperator;
            $crate::__export_meta!(reflect, Reflect, $ty);
            impl __evolve_world::exports::evolve::operator::reflect::Guest for __EvolveOperator {
                fn reflect(
                    ctx: CallContext,
                    archive: ArchiveView,
                    playbook: Vec<PlaybookEntry>,
                ) -> Result<Vec<PlaybookOp>, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Reflect>::reflect(c, &archive, &playbook)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    (driver, $ty:ty) => {
        const _: () = {
            use $crate::types::*;
            use ::std::{option::Option, result::Result, string::String};
            struct __EvolveOperator;
            $crate::__export_meta!(driver, Driver, $ty);
            impl __evolve_world::exports::evolve::operator::driver::Guest for __EvolveOperator {
                fn revise(
                    ctx: CallContext,
                    feedback: DriverFeedback,
                ) -> Result<Option<Revision>, String> {
                    $crate::__private::with_context(ctx, |c| {
                        <$ty as $crate::Driver>::revise(c, &feedback)
                    })
                }
            }
            __evolve_world::export!(__EvolveOperator with_types_in __evolve_world);
        };
    };
    ($other:ident, $ty:ty) => {
        compile_error!(concat!(
            "evolve_operator_sdk::export!: unknown stage `",
            stringify!($other),
            "`; expected one of select, rollout, analyze, mutate, validate, novelty, gate, record, reflect, driver"
        ));
    };
}
