//! The certified event archive of an evolve experiment.
//!
//! The modules form layers that depend one way only (a test, `src/layers.rs`, keeps it so):
//!
//! - [`canonical`]: RFC 8785 canonical JSON and SHA-256; every digest uses them.
//! - [`keys`]: the per-experiment signing key (outside the workspace) and its public half;
//!   [`RunLock`] ([`lock`]): one run per workspace.
//! - [`event`]: the event envelope (one typed reader for every line), [`STAMPED_FIELDS`] and
//!   the value checks.
//! - [`body`]: one serde struct per event body ([`GateBody`], [`StatusBody`], …), the one
//!   reader of archive lines, and [`check_stamp`]. A task vector is summarized while it is
//!   read, never built as a `serde_json::Value` tree.
//! - [`chain`]: the structural check shared by the writer's open and the audit (lines, hash
//!   chain, sequence, receipts, signatures).
//! - [`fold()`]: one [`Row`] per genid; [`pending()`] (what a resumed run has to finish).
//! - [`eligibility()`] and [`champion()`].
//! - [`Archive`] ([`log`]): the single writer of `archive.jsonl` (append-only, hash-chained,
//!   fsynced) and `receipts.jsonl` (one Ed25519 receipt per event), with torn-tail repair; it
//!   keeps its rows folded as it appends ([`Archive::rows_cached`]). [`verify()`]: the
//!   integrity audit behind `evolve verify`, the same reader plus the canonical-form check.
//!
//! See `docs/archive.md` for the file formats and the threat model.

pub mod body;
pub mod canonical;
pub mod chain;
pub mod eligibility;
pub mod event;
pub mod fold;
pub mod keys;
#[cfg(test)]
mod layers;
pub mod lock;
pub mod log;
#[cfg(test)]
mod readers_tests;
pub mod verify;

pub use body::{
    AcceptanceBody, ChangeKind, DriverRevisionBody, EventBody, GateBody, GenerationBody,
    GenesisBody, OtherBody, PathChange, PlaybookBody, RecordBody, RepairBody, ReusedTrial,
    SelectBody, SelectFallback, StatusBody, UsageClaim, check_stamp,
};
pub use canonical::{canonical_bytes, canonical_sha256, sha256_hex};
pub use eligibility::{
    Champion, Eligibility, FixedIdentity, Ineligible, champion, eligibility, fixed_identity,
    ineligibility, valid_parents,
};
pub use event::{
    Event, FRAMEWORK_FIELDS, GENESIS_GENID, LoggedEvent, OUTCOMES, PURPOSES, STAMPED_FIELDS,
    Status, TERMINAL_STATUSES, genesis_anchor, types,
};
pub use fold::{
    ANNOTATION_ALLOWLIST, Evaluation, Pending, Row, Stamp, annotation_allowed, fold, pending,
    total_cost_usd,
};
pub use keys::{ExperimentKey, KeyError, PublicKey};
pub use lock::{LockError, RunLock};
pub use log::{
    ARCHIVE_FILE, AppendedEvent, Archive, ArchiveError, RECEIPTS_FILE, Recovery, receipts_path_for,
};
pub use verify::{Finding, FindingKind, Receipt, Report, Source, TornTail, untracked_tags, verify};

// The writer and its rows may move between threads (e.g. into a blocking task).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Archive>();
    send_sync::<Row>();
    send_sync::<Stamp>();
};
