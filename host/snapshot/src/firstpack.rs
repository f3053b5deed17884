//! A first commit written straight from memory, as packs.
//!
//! `evolve init` knows every file of generation 0 before anything is on disk. Staging
//! them as a working copy only to snapshot it back costs a file creation per file, and
//! libgit2 can write a pack only through its pack builder, which always runs a delta
//! search and deflates at zlib's default level: over the megabyte of operator
//! components that is most of an init. Here the blobs, the trees and the commit are
//! hashed by libgit2 (so ids are exactly what git computes, collision detection
//! included), unless the caller already knows a blob's id (an embedded component's,
//! from build time), all before anything is written, so a caller knows every id
//! first. They are then written as version-2 packs whose zlib streams are stored, not
//! compressed, each with its version-2 index: the file formats every git reads. Blobs
//! of 64 KiB or more go into a pack of their own, hashed and encoded on a second core
//! while the rest are (see [`LARGE_BLOB`]). Stored
//! streams make the pack about as large as its contents (a `git gc` recompresses it);
//! deflating that megabyte at zlib's fastest level (about 10 ms here) would cost more
//! than the whole write.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use git2::{ObjectType, Oid};
use sha1::{Digest, Sha1};

use crate::error::{Error, io};
use crate::tree;

/// One file of a tree given in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFile<'a> {
    /// Relative, '/'-separated; no empty, `.`, `..` or any-case `.git` component.
    pub path: String,
    /// Stored as mode 100755 when set, 100644 otherwise.
    pub executable: bool,
    /// Borrowed when the caller holds them anyway (an embedded component's bytes).
    pub bytes: Cow<'a, [u8]>,
    /// The blob id of `bytes` when the caller already knows it (an embedded
    /// component's, computed at build time); `None`: hashed here. A wrong id would
    /// name the wrong object, so only ids derived from these very bytes belong here
    /// (debug builds check each).
    pub id: Option<Oid>,
}

/// Pack object types (the pack format's numbers).
const OBJ_COMMIT: u8 = 1;
const OBJ_TREE: u8 = 2;
const OBJ_BLOB: u8 = 3;

/// A directory of the tree being built: names to files (by blob id) or directories.
#[derive(Default)]
struct Dir<'a> {
    entries: BTreeMap<&'a str, Node<'a>>,
}

enum Node<'a> {
    File { executable: bool, id: Oid },
    Dir(Dir<'a>),
}

/// The objects of the pack, each once, in the order they were made.
#[derive(Default)]
struct Objects<'a> {
    seen: HashSet<Oid>,
    list: Vec<(Oid, u8, Cow<'a, [u8]>)>,
}

impl<'a> Objects<'a> {
    fn add(&mut self, id: Oid, kind: u8, data: Cow<'a, [u8]>) {
        if self.seen.insert(id) {
            self.list.push((id, kind, data));
        }
    }
}

/// Generation 0 assembled in memory by [`Store::prepare_first`](crate::Store::prepare_first):
/// its blobs, trees and commit, each id known before anything is written, so a caller can
/// record them elsewhere while [`Store::write_first`](crate::Store::write_first) makes
/// them durable. The objects are already encoded as the packs to write.
pub struct FirstCommit<'a> {
    tree: Oid,
    commit: Oid,
    /// The root tree's entries: name to id.
    top: BTreeMap<&'a str, Oid>,
    packs: Vec<Encoded>,
}

impl FirstCommit<'_> {
    /// The root tree.
    pub fn tree(&self) -> Oid {
        self.tree
    }

    /// The commit.
    pub fn commit(&self) -> Oid {
        self.commit
    }

    /// The id of the root tree's entry `name` (a subtree or a file), if it has one.
    pub fn entry(&self, name: &str) -> Option<Oid> {
        self.top.get(name).copied()
    }
}

/// One pack and its index, as written.
struct Encoded {
    pack: Vec<u8>,
    index: Vec<u8>,
}

/// Blobs of at least this many bytes go into a pack of their own, hashed and encoded on
/// a second thread while the rest of the tree is hashed and built on the first. Over a
/// megabyte of operator components and a thousand small target files, the two sides
/// take about as long as each other; one pack would put the SHA-1 of the whole
/// megabyte (its trailer) after the last tree. Any git reads a repository of several
/// packs.
const LARGE_BLOB: usize = 64 << 10;

/// Build and hash the tree of `files` and a parentless commit of it with `message`,
/// authored and committed by `signature`, and encode them as packs. Nothing is written.
pub(crate) fn prepare<'a>(
    files: &'a [NewFile<'_>],
    message: &str,
    signature: &git2::Signature<'_>,
) -> Result<FirstCommit<'a>, Error> {
    prepare_on(files, message, signature, threads())
}

/// [`prepare`] on `threads` cores: the large blobs get a thread of their own only with
/// two or more.
fn prepare_on<'a>(
    files: &'a [NewFile<'_>],
    message: &str,
    signature: &git2::Signature<'_>,
    threads: usize,
) -> Result<FirstCommit<'a>, Error> {
    let (large, small): (Vec<&NewFile<'_>>, Vec<&NewFile<'_>>) =
        files.iter().partition(|f| f.bytes.len() >= LARGE_BLOB);
    if large.is_empty() || threads < 2 {
        let large_ids = blob_ids(&large)?;
        let large_pack = blob_pack(&large, &large_ids)?;
        return assemble(&small, &large, &large_ids, large_pack, message, signature);
    }
    std::thread::scope(|s| {
        let (send_ids, large_ids) = std::sync::mpsc::sync_channel(1);
        let large = &large;
        let encoder = s.spawn(move || {
            let ids = blob_ids(large);
            let known = ids.as_ref().ok().cloned();
            let _ = send_ids.send(ids);
            known.map(|ids| blob_pack(large, &ids))
        });
        // A panic on the other side is re-raised here, as if on this thread.
        let rejoin = |encoder: std::thread::ScopedJoinHandle<'_, _>| {
            encoder
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        };
        let Ok(large_ids) = large_ids.recv() else {
            let _: Option<Result<Option<Encoded>, Error>> = rejoin(encoder);
            unreachable!("the encoder sends its ids before it returns");
        };
        let large_ids = large_ids?;
        let mut first = assemble(&small, large, &large_ids, None, message, signature)?;
        if let Some(large_pack) = rejoin(encoder).transpose()?.flatten() {
            first.packs.push(large_pack);
        }
        Ok(first)
    })
}

/// The tree of `small` and `large` (whose blob ids are `large_ids`), its commit, and
/// the pack of `small`'s blobs, the trees and the commit; `large_pack` (if any) joins it.
fn assemble<'a>(
    small: &[&'a NewFile<'_>],
    large: &[&'a NewFile<'_>],
    large_ids: &[Oid],
    large_pack: Option<Encoded>,
    message: &str,
    signature: &git2::Signature<'_>,
) -> Result<FirstCommit<'a>, Error> {
    let small_ids = blob_ids(small)?;
    let mut objects = Objects::default();
    let mut root = Dir::default();
    for (file, id) in small.iter().zip(small_ids) {
        objects.add(id, OBJ_BLOB, Cow::Borrowed(&file.bytes));
        insert(&mut root, file, id)?;
    }
    for (file, id) in large.iter().zip(large_ids) {
        insert(&mut root, file, *id)?;
    }
    let (tree, top) = write_dir(&root, &mut objects)?;
    let body = commit_body(tree, message, signature);
    let commit = Oid::hash_object(ObjectType::Commit, &body)
        .map_err(crate::error::git("hashing the commit"))?;
    objects.add(commit, OBJ_COMMIT, Cow::Owned(body));
    let mut packs = vec![encode(&objects.list)?];
    packs.extend(large_pack);
    Ok(FirstCommit {
        tree,
        commit,
        top,
        packs,
    })
}

/// The pack of `files`' blobs (ids `ids`), each once; `None` for no files.
fn blob_pack(files: &[&NewFile<'_>], ids: &[Oid]) -> Result<Option<Encoded>, Error> {
    if files.is_empty() {
        return Ok(None);
    }
    let mut objects = Objects::default();
    for (file, id) in files.iter().zip(ids) {
        objects.add(*id, OBJ_BLOB, Cow::Borrowed(&file.bytes));
    }
    encode(&objects.list).map(Some)
}

/// Cores available: with two or more, the large blobs are encoded on a second one.
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Write `first`'s packs and their indexes, durably, into `objects_dir/pack`.
///
/// Each file goes straight under its final name, and the disk starts on it as soon as it
/// is written; then all are synced, then the directory. Nothing here orders the files'
/// durability (a pack under temporary names, renamed once synced, its index last, is
/// what a repository in use needs): the first commit goes into a repository nobody
/// uses yet, and `evolve init` marks it a workspace (the `gen/0` tag) only once this
/// has returned. Until then an interrupted write leaves a directory that is visibly
/// not a workspace.
pub(crate) fn write(objects_dir: &Path, first: &FirstCommit<'_>) -> Result<(), Error> {
    let pack_dir = objects_dir.join("pack");
    let mut packs: Vec<&Encoded> = first.packs.iter().collect();
    // The largest first: it is on its way to the disk while the rest are written.
    packs.sort_by_key(|p| std::cmp::Reverse(p.pack.len()));
    let mut written = Vec::with_capacity(2 * packs.len());
    for encoded in packs {
        let name = encoded.name();
        for (ext, bytes) in [("pack", &encoded.pack), ("idx", &encoded.index)] {
            let path = pack_dir.join(format!("{name}.{ext}"));
            let file = write_unsynced(&path, bytes)?;
            written.push((path, file));
        }
    }
    for (path, file) in &written {
        file.sync_all().map_err(io(path, "syncing"))?;
    }
    File::open(&pack_dir)
        .and_then(|d| d.sync_all())
        .map_err(io(&pack_dir, "syncing"))
}

/// A commit object's body (git's format): its tree, no parent, author and committer
/// lines (`name <email> seconds ±hhmm`), a blank line, the message.
fn commit_body(tree: Oid, message: &str, signature: &git2::Signature<'_>) -> Vec<u8> {
    let when = signature.when();
    let offset = when.offset_minutes().unsigned_abs();
    let person = format!(
        "{} <{}> {} {}{:02}{:02}",
        String::from_utf8_lossy(signature.name_bytes()),
        String::from_utf8_lossy(signature.email_bytes()),
        when.seconds(),
        if when.offset_minutes() < 0 { '-' } else { '+' },
        offset / 60,
        offset % 60
    );
    format!("tree {tree}\nauthor {person}\ncommitter {person}\n\n{message}").into_bytes()
}

/// The blob id of each file, in order: the one it carries, or hashed.
fn blob_ids(files: &[&NewFile<'_>]) -> Result<Vec<Oid>, Error> {
    files
        .iter()
        .map(|f| {
            if let Some(id) = f.id {
                debug_assert_eq!(Oid::hash_object(ObjectType::Blob, &f.bytes).ok(), Some(id));
                return Ok(id);
            }
            Oid::hash_object(ObjectType::Blob, &f.bytes)
                .map_err(crate::error::git(format!("hashing {}", f.path)))
        })
        .collect()
}

/// Put `file` (blob `id`) into the directory tree under `root`.
fn insert<'a>(root: &mut Dir<'a>, file: &'a NewFile<'_>, id: Oid) -> Result<(), Error> {
    if !crate::is_clean_path(&file.path) {
        return Err(Error::InvalidPath(file.path.clone()));
    }
    let mut parts = file.path.split('/').peekable();
    let mut dir = root;
    while let Some(name) = parts.next() {
        if name.eq_ignore_ascii_case(".git") {
            return Err(Error::UnsafeName {
                path: file.path.clone(),
                name: name.to_string(),
            });
        }
        let conflict = || Error::PathConflict(file.path.clone());
        if parts.peek().is_none() {
            let leaf = Node::File {
                executable: file.executable,
                id,
            };
            if dir.entries.insert(name, leaf).is_some() {
                return Err(conflict());
            }
            return Ok(());
        }
        let node = dir
            .entries
            .entry(name)
            .or_insert_with(|| Node::Dir(Dir::default()));
        dir = match node {
            Node::Dir(d) => d,
            Node::File { .. } => return Err(conflict()),
        };
    }
    Ok(())
}

/// Serialize `dir` (children first) as a git tree object; returns its id and its
/// entries' ids by name.
fn write_dir<'a>(
    dir: &Dir<'a>,
    objects: &mut Objects<'a>,
) -> Result<(Oid, BTreeMap<&'a str, Oid>), Error> {
    let mut entries = Vec::with_capacity(dir.entries.len());
    let mut ids = BTreeMap::new();
    for (name, node) in &dir.entries {
        let (mode, id) = match node {
            Node::File {
                executable: true,
                id,
            } => (tree::MODE_EXEC, *id),
            Node::File { id, .. } => (tree::MODE_FILE, *id),
            Node::Dir(sub) => (tree::MODE_TREE, write_dir(sub, objects)?.0),
        };
        ids.insert(*name, id);
        entries.push(tree::Entry {
            name: name.as_bytes().to_vec(),
            mode,
            id,
        });
    }
    let body = tree::serialize(&mut entries);
    let id =
        Oid::hash_object(ObjectType::Tree, &body).map_err(crate::error::git("hashing a tree"))?;
    objects.add(id, OBJ_TREE, Cow::Owned(body));
    Ok((id, ids))
}

impl Encoded {
    /// `pack-<checksum>`: git's name for the pack and its index.
    fn name(&self) -> String {
        let mut name = String::from("pack-");
        for b in &self.pack[self.pack.len() - 20..] {
            let _ = write!(name, "{b:02x}");
        }
        name
    }
}

/// Create `path` (read-only, as git keeps packs) with `bytes`, and have the kernel start
/// writing it to the disk without waiting for it: the caller syncs it later, by when
/// most of it is written.
fn write_unsynced(path: &Path, bytes: &[u8]) -> Result<File, Error> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(path)
        .map_err(io(path, "creating"))?;
    file.write_all(bytes).map_err(io(path, "writing"))?;
    // SAFETY: a valid open descriptor; SYNC_FILE_RANGE_WRITE only starts writeback of
    // the file's dirty pages (offset 0, length 0: to the end). It is a hint: a failure
    // changes nothing, since the caller's fsync writes and waits for everything anyway.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
    Ok(file)
}

/// The pack (version 2) and its index (version 2) for `objects`.
fn encode(objects: &[(Oid, u8, Cow<'_, [u8]>)]) -> Result<Encoded, Error> {
    let size: usize = objects
        .iter()
        .map(|(_, _, d)| 10 + stored_len(d.len()))
        .sum();
    let mut pack = Vec::with_capacity(12 + size + 20);
    pack.extend_from_slice(b"PACK");
    pack.extend_from_slice(&2u32.to_be_bytes());
    let count = u32::try_from(objects.len()).map_err(|_| too_big("objects in one pack"))?;
    pack.extend_from_slice(&count.to_be_bytes());
    // (id, crc32 of the entry, offset of the entry)
    let mut entries: Vec<(Oid, u32, u64)> = Vec::with_capacity(objects.len());
    for (id, kind, data) in objects {
        let start = pack.len();
        entry_header(&mut pack, *kind, data.len() as u64);
        store_zlib(data, &mut pack);
        entries.push((*id, crc32fast::hash(&pack[start..]), start as u64));
    }
    let sum: [u8; 20] = Sha1::digest(&pack).into();
    pack.extend_from_slice(&sum);
    entries.sort_by_key(|e| e.0);
    let index = index(&entries, &sum);
    Ok(Encoded { pack, index })
}

/// The largest stored deflate block (its length field has 16 bits).
const STORED_BLOCK: usize = 0xffff;

/// How long `len` bytes are as a zlib stream of stored blocks: 2 bytes of header, 5
/// per block (at least one), the bytes, a 4-byte checksum.
fn stored_len(len: usize) -> usize {
    2 + 5 * len.div_ceil(STORED_BLOCK).max(1) + len + 4
}

/// Append `data` as one zlib stream (RFC 1950) of stored deflate blocks (RFC 1951,
/// 3.2.4): what any inflater reads back byte for byte. Written here, not through a
/// zlib binding: the framing is a few bytes, while a binding resets a compressor's
/// 64 KiB hash table for each stream, which over a thousand small objects costs more
/// than the rest of the pack.
fn store_zlib(data: &[u8], out: &mut Vec<u8>) {
    // CMF 0x78: deflate with a 32 KiB window; FLG 0x01: no dictionary, the fastest
    // level, and the check bits that make 0x7801 a multiple of 31.
    out.extend_from_slice(&[0x78, 0x01]);
    let mut blocks = data.chunks(STORED_BLOCK).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
    }
    while let Some(block) = blocks.next() {
        let last = u8::from(blocks.peek().is_none());
        let len = block.len() as u16;
        out.push(last); // BFINAL, then BTYPE 00 (stored), padded to the byte
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    let mut adler = simd_adler32::Adler32::new();
    adler.write(data);
    out.extend_from_slice(&adler.finish().to_be_bytes());
}

/// An entry's header: the type and the size, 4 bits then 7 per byte, low bits first
/// (at most 10 bytes).
fn entry_header(out: &mut Vec<u8>, kind: u8, mut size: u64) {
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size != 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
}

/// The version-2 index of a pack: fan-out table, sorted ids, CRC-32s, offsets
/// (with the 64-bit table for offsets past 2 GiB), the pack's checksum, its own.
fn index(sorted: &[(Oid, u32, u64)], pack_sum: &[u8; 20]) -> Vec<u8> {
    let mut idx = Vec::with_capacity(8 + 1024 + sorted.len() * 28 + 40);
    idx.extend_from_slice(&[0xff, b't', b'O', b'c']);
    idx.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for (id, _, _) in sorted {
        fanout[id.as_bytes()[0] as usize] += 1;
    }
    let mut running = 0u32;
    for n in fanout {
        running += n;
        idx.extend_from_slice(&running.to_be_bytes());
    }
    for (id, _, _) in sorted {
        idx.extend_from_slice(id.as_bytes());
    }
    for (_, crc, _) in sorted {
        idx.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, _, offset) in sorted {
        let small = match u32::try_from(*offset) {
            Ok(o) if o < 0x8000_0000 => o,
            _ => {
                large.push(*offset);
                0x8000_0000 | (large.len() as u32 - 1)
            }
        };
        idx.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        idx.extend_from_slice(&offset.to_be_bytes());
    }
    idx.extend_from_slice(pack_sum);
    let own: [u8; 20] = Sha1::digest(&idx).into();
    idx.extend_from_slice(&own);
    idx
}

fn too_big(what: &'static str) -> Error {
    Error::LimitExceeded {
        path: String::new(),
        limit: what,
        max: u64::from(u32::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        FirstCommit, LARGE_BLOB, NewFile, entry_header, prepare_on, store_zlib, stored_len,
    };
    use std::borrow::Cow;

    #[test]
    fn one_core_and_two_prepare_the_same_ids_and_packs() {
        let file = |path: &str, bytes: Vec<u8>| NewFile {
            path: path.into(),
            executable: false,
            bytes: Cow::Owned(bytes),
            id: None,
        };
        let large: Vec<u8> = (0..LARGE_BLOB + 10).map(|i| (i % 251) as u8).collect();
        let files = vec![
            file("a/large.bin", large.clone()),
            file("a/small.txt", b"small\n".to_vec()),
            file("b/same-large.bin", large),
            file("b/exactly.bin", vec![1; LARGE_BLOB]),
            file("c.txt", b"c\n".to_vec()),
        ];
        let when = git2::Time::new(1_700_000_000, 60);
        let sig = git2::Signature::new("evolve", "evolve@localhost", &when).unwrap();
        let packs = |first: &FirstCommit<'_>| {
            let mut all: Vec<(Vec<u8>, Vec<u8>)> = first
                .packs
                .iter()
                .map(|p| (p.pack.clone(), p.index.clone()))
                .collect();
            all.sort();
            all
        };
        let one = prepare_on(&files, "gen 0", &sig, 1).unwrap();
        let two = prepare_on(&files, "gen 0", &sig, 2).unwrap();
        assert_eq!((one.tree, one.commit), (two.tree, two.commit));
        assert_eq!(one.top, two.top);
        assert_eq!(packs(&one), packs(&two));
        assert_eq!(two.packs.len(), 2, "the large blobs in a pack of their own");
    }

    #[test]
    fn stored_zlib_streams_have_the_framing_rfc_1950_and_1951_give() {
        // Empty: header, one empty final block, adler32 of nothing (1).
        let mut out = Vec::new();
        store_zlib(b"", &mut out);
        assert_eq!(out, [0x78, 0x01, 0x01, 0, 0, 0xff, 0xff, 0, 0, 0, 1]);
        assert_eq!(out.len(), stored_len(0));
        // "Wikipedia": the usual worked example of Adler-32 (0x11E60398).
        out.clear();
        store_zlib(b"Wikipedia", &mut out);
        assert_eq!(&out[..7], [0x78, 0x01, 0x01, 9, 0, 0xf6, 0xff]);
        assert_eq!(&out[7..16], b"Wikipedia");
        assert_eq!(&out[16..], [0x11, 0xe6, 0x03, 0x98]);
        // Block boundaries: only the last block is final; lengths as predicted.
        for len in [0xffff, 0x10000, 3 * 0xffff + 1] {
            let data = vec![0xabu8; len];
            out.clear();
            store_zlib(&data, &mut out);
            assert_eq!(out.len(), stored_len(len), "length of {len}");
            let blocks = len.div_ceil(0xffff);
            let finals: Vec<u8> = (0..blocks).map(|i| out[2 + i * (0xffff + 5)]).collect();
            assert_eq!(finals.last(), Some(&1));
            assert!(finals[..blocks - 1].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn entry_headers_carry_type_and_size_in_little_endian_groups() {
        let header = |kind, size| {
            let mut out = Vec::new();
            entry_header(&mut out, kind, size);
            out
        };
        assert_eq!(header(3, 5), [0x35]);
        assert_eq!(header(3, 16), [0xb0, 0x01]);
        // 1,000,000 = 0xF4240: the low nibble 0, then 62,500 as 7-bit groups 36, 104, 3.
        assert_eq!(header(2, 1_000_000), [0xa0, 0xa4, 0xe8, 0x03]);
        // The largest size takes the 10 bytes the pack leaves room for.
        assert_eq!(header(3, u64::MAX).len(), 10);
    }
}
