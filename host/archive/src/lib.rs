//! The certified event archive of an evolve experiment.
//!
//! - [`canonical`]: RFC 8785 canonical JSON and SHA-256; every digest uses them.
//! - [`event`]: the event envelope, [`STAMPED_FIELDS`] and their validation.
//! - [`Archive`]: the single writer of `archive.jsonl` (append-only, hash-chained, fsynced)
//!   and `receipts.jsonl` (one Ed25519 receipt per event), with torn-tail repair.
//! - [`keys`]: the per-experiment signing key (outside the workspace) and its public half.
//! - [`fold()`]: one [`Row`] per genid; [`eligibility()`] and [`champion()`]; [`pending()`]
//!   (what a resumed run has to finish). The writer keeps its rows folded as it appends
//!   ([`Archive::rows_cached`]).
//! - [`verify()`]: the integrity audit behind `evolve verify`.
//! - [`RunLock`]: one run per workspace.
//!
//! See `docs/archive.md` for the file formats and the threat model.

pub mod canonical;
pub mod eligibility;
#[cfg(test)]
mod equivalence_tests;
pub mod event;
pub mod fold;
pub mod keys;
mod lite;
pub mod lock;
pub mod log;
#[cfg(test)]
mod reference;
pub mod verify;

pub use canonical::{canonical_bytes, canonical_sha256, sha256_hex};
pub use eligibility::{
    Champion, Eligibility, FixedIdentity, Ineligible, champion, eligibility, fixed_identity,
    ineligibility, valid_parents,
};
pub use event::{
    Event, FRAMEWORK_FIELDS, GENESIS_GENID, OUTCOMES, PURPOSES, STAMPED_FIELDS, TERMINAL_STATUSES,
    check_stamp, genesis_anchor, types,
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
pub use verify::{
    Finding, FindingKind, LoggedEvent, Receipt, Report, Source, TornTail, untracked_tags, verify,
};

// The writer and its rows may move between threads (e.g. into a blocking task).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Archive>();
    send_sync::<Row>();
    send_sync::<Stamp>();
};
