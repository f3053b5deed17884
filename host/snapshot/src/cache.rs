//! An in-process cache of small blob contents, keyed by object id.
//!
//! Generations mostly share their files, and the same content is written out
//! again and again (the parent for each child, the committed child for its
//! evaluation checkout). Reading a blob through libgit2 costs inflating it and
//! re-hashing it with collision-detecting SHA-1 (strict verification, which we
//! keep: it is what catches a tampered object file before it reaches an
//! evaluation checkout); a cache hit costs a hash-map lookup.
//!
//! Entries are trustworthy by construction: they come either from libgit2
//! reads (hash verified) or from bytes the snapshot hashed itself.

use std::collections::HashMap;

use git2::Oid;

/// Blobs larger than this are not cached (they are rare in agent sources).
const MAX_BLOB: usize = 1 << 20;
/// Total cached bytes; on overflow the cache starts over (cheap, no LRU
/// bookkeeping, and a working set that fits is refilled in one checkout).
const MAX_TOTAL: usize = 64 << 20;

#[derive(Default)]
pub(crate) struct BlobCache {
    map: HashMap<Oid, Box<[u8]>>,
    bytes: usize,
}

impl BlobCache {
    pub fn get(&self, id: &Oid) -> Option<&[u8]> {
        self.map.get(id).map(|b| &b[..])
    }

    pub fn insert(&mut self, id: Oid, data: &[u8]) {
        if data.len() > MAX_BLOB || self.map.contains_key(&id) {
            return;
        }
        if self.bytes + data.len() > MAX_TOTAL {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += data.len();
        self.map.insert(id, data.into());
    }
}
