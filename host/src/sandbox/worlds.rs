//! What each world is given: the one table of the contract's security rules.
//!
//! Every rule about what a stage's operator can reach is a row of [`WORLDS`]: the host
//! capabilities its world imports and the directories a call is granted. The linker
//! (`build_linker` in `mod.rs`), the import check (`contract.rs`), the preopens
//! ([`Grants::for_stage`](super::Grants::for_stage)), `evolve operator describe` and the
//! model check (`model/needs.rs`) all read it. The tests below hold `wit/operator.wit`
//! (each world's imports and its `Grants:` line), the grant table of `docs/security.md`
//! and the guest SDK's list of worlds (`sdk-rust/build.rs`) to it, so none of them can
//! drift from the code.
//!
//! Adding a capability: a [`Capability`] variant (the compiler then asks for its
//! linker arm in `build_linker`), its interface in `wit/host.wit` and backend in
//! `capabilities.rs`, and its name in the rows that import it here; the tests name every
//! text still to update.

use super::bindings::types::Stage;

/// A host capability a world can import (`wit/host.wit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Chat completion, metered by the host.
    Model,
    /// Trials of the calling stage's candidate on train tasks.
    Tasks,
}

impl Capability {
    pub const ALL: [Capability; 2] = [Capability::Model, Capability::Tasks];

    /// The WIT interface name, e.g. `model` (as in `evolve:operator/model@0.1.0`).
    pub fn name(self) -> &'static str {
        match self {
            Capability::Model => "model",
            Capability::Tasks => "tasks",
        }
    }

    /// The capability whose WIT interface is `name`, if one is.
    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// A directory a call can be granted, as a WASI preopen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// The candidate's `target/` tree.
    Target,
    /// The candidate's `operators/` tree, only when the recipe's surface includes
    /// `operators/**`.
    Operators,
    /// A fresh, empty directory for this call only.
    Scratch,
    /// The train feedback bundle (analyze's or mutate's), when one was assembled.
    Feedback,
}

impl Dir {
    /// Where the guest sees it.
    pub fn guest(self) -> &'static str {
        match self {
            Dir::Target => "/target",
            Dir::Operators => "/operators",
            Dir::Scratch => "/scratch",
            Dir::Feedback => "/feedback",
        }
    }
}

/// One directory of a world's grants and whether the call may write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirGrant {
    pub dir: Dir,
    pub writable: bool,
}

/// One world of the contract: the stage it serves, what it imports, what it is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    pub stage: Stage,
    /// Its name in `wit/operator.wit`, e.g. `mutate-operator`.
    pub wit_name: &'static str,
    /// The host capabilities it imports; a call's linker holds these and nothing more.
    pub imports: &'static [Capability],
    /// The directories a stage call is granted, in preopen order.
    pub grants: &'static [DirGrant],
}

const fn read(dir: Dir) -> DirGrant {
    DirGrant {
        dir,
        writable: false,
    }
}

const fn write(dir: Dir) -> DirGrant {
    DirGrant {
        dir,
        writable: true,
    }
}

/// What every stage but analyze, mutate and the driver is granted: the candidate to read, and
/// its own scratch.
const READ_CANDIDATE: &[DirGrant] = &[read(Dir::Target), read(Dir::Operators), write(Dir::Scratch)];

const fn world(
    stage: Stage,
    wit_name: &'static str,
    imports: &'static [Capability],
    grants: &'static [DirGrant],
) -> World {
    World {
        stage,
        wit_name,
        imports,
        grants,
    }
}

use Capability::{Model, Tasks};

/// Every world, in [`Stage`] order (so a stage's row is `WORLDS[stage as usize]`).
pub const WORLDS: [World; 10] = [
    world(Stage::Select, "select-operator", &[], READ_CANDIDATE),
    world(Stage::Rollout, "rollout-operator", &[Tasks], READ_CANDIDATE),
    // Analyze reads this generation's train trajectories (and rollout evidence) in a
    // feedback bundle of its own; it edits nothing.
    world(
        Stage::Analyze,
        "analyze-operator",
        &[Model],
        &[
            read(Dir::Target),
            read(Dir::Operators),
            write(Dir::Scratch),
            read(Dir::Feedback),
        ],
    ),
    // The only world that edits the candidate.
    world(
        Stage::Mutate,
        "mutate-operator",
        &[Model, Tasks],
        &[
            write(Dir::Target),
            write(Dir::Operators),
            write(Dir::Scratch),
            read(Dir::Feedback),
        ],
    ),
    world(
        Stage::Validate,
        "validate-operator",
        &[Tasks],
        READ_CANDIDATE,
    ),
    world(Stage::Novelty, "novelty-operator", &[], READ_CANDIDATE),
    world(Stage::Gate, "gate-operator", &[], READ_CANDIDATE),
    world(Stage::Record, "record-operator", &[], READ_CANDIDATE),
    world(Stage::Reflect, "reflect-operator", &[Model], READ_CANDIDATE),
    // The agent driver sees no candidate at all: its feedback arrives as data.
    world(
        Stage::Driver,
        "driver-operator",
        &[Model],
        &[write(Dir::Scratch)],
    ),
];

const _: () = {
    let mut i = 0;
    while i < WORLDS.len() {
        assert!(
            WORLDS[i].stage as usize == i,
            "WORLDS must be in Stage order"
        );
        i += 1;
    }
};

/// The row of `stage`'s world.
pub fn of(stage: Stage) -> &'static World {
    &WORLDS[stage as usize]
}

/// The host capabilities `stage`'s world imports.
pub fn granted_capabilities(stage: Stage) -> &'static [Capability] {
    of(stage).imports
}

#[cfg(test)]
mod tests;
