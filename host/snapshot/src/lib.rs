//! Git-backed candidate trees for evolve.
//!
//! The workspace is a git repository whose commits hold the evolvable target and
//! the framework-owned files (`evaluator/`, `keys/`, `recipe.yaml`, ...). A child
//! candidate is *materialized* as a plain directory from its parent's commit,
//! mutated by sandboxed operators, then *snapshotted* back into a tree object;
//! the resulting commit is reachable only through a lightweight `gen/<id>` tag,
//! so the workspace's own branch never moves for children.
//!
//! Everything an operator wrote is treated as hostile: the snapshot walks the
//! directory with `openat(O_NOFOLLOW)` relative to directory descriptors, never
//! follows a symlink, reports nested `.git` entries, special files and
//! undecodable names as changes (so the [`Surface`] check rejects them) instead
//! of storing them, and bounds entries, file sizes and total bytes.
//!
//! Unix only (the host runs on Linux; macOS works too).

mod cache;
mod error;
mod firstpack;
mod materialize;
mod pack;
mod snapshot;
mod statcache;
mod surface;
mod tagcache;
mod tree;

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use git2::{ObjectType, Repository, RepositoryOpenFlags, Signature};

pub use error::Error;
use error::{git, io};
pub use firstpack::{FirstCommit, NewFile};
/// Object ids are git's; re-exported so callers need not depend on `git2`.
pub use git2::Oid;
pub use materialize::Reconciled;
pub use surface::{Surface, Violation};
pub use tagcache::ctime_settled;

/// How deep directories may nest (in snapshots, materialized trees and diffs).
/// The walkers recurse, so this bounds stack use on hostile trees.
pub const MAX_DEPTH: usize = 256;

/// What happened to a path between two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// What a path is (for `Deleted`, what it was).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Regular file, mode 100644.
    File,
    /// Regular file, mode 100755.
    Executable,
    /// Symbolic link (mode 120000) with its target as stored.
    Symlink { target: String },
    /// A gitlink entry, or a nested `.git` directory/file found by a snapshot
    /// (which is never stored).
    Submodule,
    /// Something a tree cannot hold: fifo, socket, device, a non-UTF-8 name or
    /// symlink target, or an unknown tree mode. Never stored by a snapshot.
    Special,
}

/// One changed leaf path. Directories are not reported themselves: a deleted
/// directory shows as every leaf below it deleted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// Relative, '/'-separated (lossy UTF-8 for undecodable names).
    pub path: String,
    pub kind: ChangeKind,
    pub entry: EntryKind,
}

/// The result of [`Store::snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The written tree (the directory's content plus the parent's skipped
    /// top-level entries).
    pub tree: Oid,
    /// Changes against the parent tree, sorted by path (a `Deleted` before an
    /// `Added` of the same path), including entries that were *not* stored
    /// (`Submodule`, `Special`), so the surface check sees them.
    pub changes: Vec<Change>,
}

/// Bounds on what a snapshot will read; exceeding one is
/// [`Error::LimitExceeded`] naming the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Directory entries visited (files, directories, links, specials).
    pub max_entries: usize,
    /// Size of one file or symlink target.
    pub max_file_bytes: u64,
    /// Sum of all file and symlink target sizes.
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entries: 200_000,
            max_file_bytes: 256 << 20,
            max_total_bytes: 2 << 30,
        }
    }
}

/// The workspace repository. Only the object database and refs are used: there
/// is no index and no checkout, so nothing here ever moves files in the
/// workspace itself.
///
/// A store keeps a bounded in-memory cache of small blob contents (64 MiB),
/// so keep one store for the life of a run: repeated checkouts and snapshots
/// of similar trees then skip most object reads and hashing. It also
/// remembers the `lstat` of every file [`Store::materialize`] wrote (for the
/// last 64 directories), so a [`Store::snapshot`] of such a directory reads
/// only the files whose `lstat` changed (see [`Store::materialize`]).
/// `Send` but not `Sync` (neither is `git2::Repository`): use it from one
/// thread at a time.
pub struct Store {
    repo: Repository,
    dir: PathBuf,
    /// Recently seen small blobs, so repeated checkouts skip libgit2 reads.
    cache: RefCell<cache::BlobCache>,
    /// What `materialize` wrote, by destination path.
    stats: RefCell<statcache::StatCache>,
    /// Files snapshots took from `stats` without reading them.
    stat_hits: Cell<u64>,
    /// Loose tags already read, by the `lstat` of their file.
    tags: RefCell<tagcache::TagCache>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

/// The configuration of a new store: repository format 0, modes tracked, bare.
const REPOSITORY_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n";

impl Store {
    /// Create a repository in `dir` (created if absent) with `HEAD` on an
    /// unborn `main` branch, marked bare (`core.bare`: the store keeps no index
    /// and no working tree). Refuses when `dir/.git` exists in any form.
    ///
    /// The repository is laid out here, as gitrepository-layout(5) gives the
    /// minimum git recognizes (`objects/`, `refs/`, `HEAD`) plus the config, and
    /// opened with libgit2: its init writes a template (description, sample
    /// hooks, excludes) and probes the file system's symlink, case and mode
    /// handling for a working tree, three times the files for nothing a bare
    /// store uses. A fixed branch name, not whatever `init.defaultBranch` a user
    /// configured. Bare, in `dir/.git`: `git status` in `dir` says there is no
    /// working tree instead of listing every committed file as deleted.
    pub fn init(dir: &Path) -> Result<Store, Error> {
        let dotgit = dir.join(".git");
        if dotgit.symlink_metadata().is_ok() {
            return Err(Error::AlreadyInitialized(dotgit));
        }
        std::fs::create_dir_all(dir).map_err(io(dir, "creating"))?;
        // create_dir, not create_dir_all: a `.git` that appeared meanwhile is refused.
        std::fs::create_dir(&dotgit).map_err(io(&dotgit, "creating"))?;
        for sub in ["objects", "objects/pack", "refs", "refs/heads", "refs/tags"] {
            let path = dotgit.join(sub);
            std::fs::create_dir(&path).map_err(io(&path, "creating"))?;
        }
        let config = dotgit.join("config");
        std::fs::write(&config, REPOSITORY_CONFIG).map_err(io(&config, "writing"))?;
        // HEAD last: until it exists, git does not take the directory for a repository.
        let head = dotgit.join("HEAD");
        std::fs::write(&head, "ref: refs/heads/main\n").map_err(io(&head, "writing"))?;
        let repo = Repository::open_bare(&dotgit).map_err(git(format!(
            "opening the repository just created in {}",
            dir.display()
        )))?;
        Ok(Store {
            repo,
            dir: dir.to_path_buf(),
            cache: RefCell::default(),
            stats: RefCell::default(),
            stat_hits: Cell::new(0),
            tags: RefCell::default(),
        })
    }

    /// Open the repository at `dir/.git` (no search in parent directories).
    pub fn open(dir: &Path) -> Result<Store, Error> {
        let repo = Repository::open_ext(dir, RepositoryOpenFlags::NO_SEARCH, [] as [&str; 0])
            .map_err(|source| Error::NotARepository {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(Store {
            repo,
            dir: dir.to_path_buf(),
            cache: RefCell::default(),
            stats: RefCell::default(),
            stat_hits: Cell::new(0),
            tags: RefCell::default(),
        })
    }

    /// The workspace directory this store was opened on.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Snapshot the tree under `dir` into the object database (blobs and
    /// trees, no commit), relative to the optional `parent` commit.
    ///
    /// Top-level names for which `skip(name)` is true are neither read nor
    /// reported; the parent's entries of those names are carried over
    /// unchanged. Symlinks are stored as links (never followed), the user
    /// executable bit selects 100755 over 100644, empty directories are
    /// omitted (git cannot hold them). Only blobs that differ from the
    /// parent's entry are written, and unchanged directories reuse the
    /// parent's tree id.
    ///
    /// When this store materialized `dir` (the same path, as given), files
    /// whose `lstat` (size, mtime and ctime to the ns, inode, device, mode)
    /// still matches what was written are not read: their blob id is the one
    /// written. The result is the same as without those records (which a
    /// fresh store, e.g. in a resumed run, does not have).
    pub fn snapshot(
        &self,
        dir: &Path,
        parent: Option<Oid>,
        limits: &Limits,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<Snapshot, Error> {
        let parent_tree = match parent {
            Some(c) => Some(self.commit_tree(c)?),
            None => None,
        };
        let mut stats = self.stats.borrow_mut();
        let (snapshot, hits) = snapshot::snapshot(
            &self.repo,
            &self.cache,
            stats.get(dir),
            dir,
            parent_tree.as_ref(),
            limits,
            skip,
        )?;
        self.stat_hits.set(self.stat_hits.get() + hits);
        Ok(snapshot)
    }

    /// The repository's first commit, of a tree given in memory: `files`
    /// (every file of it; directories follow from the paths, empty ones do not
    /// exist in git). [`Store::prepare_first`] then [`Store::write_first`].
    /// Returns the tree and the commit. For a repository nothing uses yet (see
    /// `write_first`).
    pub fn commit_first(&self, files: &[NewFile<'_>], message: &str) -> Result<(Oid, Oid), Error> {
        let first = Store::prepare_first(files, message)?;
        self.write_first(&first)?;
        Ok((first.tree(), first.commit()))
    }

    /// Assemble a first commit of `files` with `message` in memory, by
    /// `evolve <evolve@localhost>` now: blobs, trees and the commit, all
    /// hashed and encoded as packs (blobs of 64 KiB or more in one of their own,
    /// on a second core), nothing written. Refuses unclean paths, any-case `.git`
    /// components and a path given twice or as both a file and a directory.
    pub fn prepare_first<'a>(
        files: &'a [NewFile<'_>],
        message: &str,
    ) -> Result<FirstCommit<'a>, Error> {
        let sig = Signature::now("evolve", "evolve@localhost")
            .map_err(git("building the commit signature"))?;
        firstpack::prepare(files, message, &sig)
    }

    /// Write a prepared first commit: its packs, synced (see `firstpack.rs` for
    /// why this store writes them itself), then `HEAD`'s branch names the commit.
    /// Nothing is written in the workspace itself. The packs are written under
    /// their final names and synced together, in no order: this is for a
    /// repository nothing uses until the caller has marked it complete (`evolve
    /// init` tags `gen/0` last), not for one in use.
    pub fn write_first(&self, first: &FirstCommit<'_>) -> Result<(), Error> {
        firstpack::write(&self.repo.path().join("objects"), first)?;
        self.repo
            .odb()
            .and_then(|o| o.refresh())
            .map_err(git("rescanning packs"))?;
        let branch = self
            .repo
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().map(str::to_string))
            .unwrap_or_else(|| "refs/heads/main".into());
        self.repo
            .reference(&branch, first.commit(), false, "evolve: first commit")
            .map_err(git(format!("pointing {branch} at the first commit")))?;
        Ok(())
    }

    /// How many files snapshots of this store have taken from the records
    /// of [`Store::materialize`] instead of reading them (for tests and
    /// benchmarks).
    pub fn stat_cache_hits(&self) -> u64 {
        self.stat_hits.get()
    }

    /// Drop what [`Store::materialize`] recorded about `dir` (e.g. once it
    /// is removed); later snapshots of it read every file.
    pub fn forget_worktree(&self, dir: &Path) {
        self.stats.borrow_mut().remove(dir);
    }

    /// Write a commit of `tree` with the optional `parent`, signed by
    /// `evolve <evolve@localhost>` at the current time. With `update_head` the
    /// current branch advances (libgit2 refuses unless `parent` is its tip);
    /// otherwise the commit is reachable only once tagged.
    pub fn commit(
        &self,
        tree: Oid,
        parent: Option<Oid>,
        message: &str,
        update_head: bool,
    ) -> Result<Oid, Error> {
        write_commit(
            &self.repo,
            tree,
            parent,
            message,
            update_head.then_some("HEAD"),
        )
    }

    /// Write `commit`'s tree into `dest`, which must be absent (it is created,
    /// with missing parents) or an empty real directory. Files get 0644/0755
    /// regardless of the umask, symlinks are created as symlinks, directories
    /// 0755. Gitlink entries, unknown modes and unsafe names (empty, `.`, `..`,
    /// containing `/`, any case of `.git`) are errors; `dest` may then be
    /// partially written and is left for the caller to inspect or remove.
    ///
    /// On ext2/3/4, XFS and Btrfs, the store remembers (in memory only, never
    /// in `dest`) each written file's `lstat` with its blob id, and sets
    /// `dest`'s own times once done, as a timestamp fence: a later
    /// [`Store::snapshot`] of `dest` skips reading files whose `lstat` is
    /// unchanged. Any change to a file's content changes its ctime, which
    /// unprivileged processes cannot set; the reasoning, and why tmpfs is
    /// excluded, is in `statcache.rs`. This relies on nothing else writing to
    /// `dest` while this call runs.
    pub fn materialize(&self, commit: Oid, dest: &Path) -> Result<(), Error> {
        self.stats.borrow_mut().remove(dest);
        let tree = self.commit_tree(commit)?;
        if let Some(records) = materialize::materialize(&self.repo, &self.cache, &tree, dest)? {
            self.stats.borrow_mut().insert(dest, records);
        }
        Ok(())
    }

    /// Turn the existing real directory `dir` into exactly `commit`'s tree,
    /// as [`Store::materialize`] would have written it into an empty one,
    /// at the cost of the differences rather than of the whole tree.
    ///
    /// Every name the tree does not hold is removed (whole directories, never
    /// through a link); directories the tree holds are kept and set to 0755;
    /// every other entry is rewritten from the object database unless it is
    /// a regular file whose `lstat` matches, to the ns and the inode, what
    /// this store recorded when it wrote that very blob there with the wanted
    /// mode, and that has no other hard link. Those are exactly the files a
    /// snapshot would take from its records unread (see `statcache.rs`), so
    /// whatever was done to `dir` since (edits, renames, links, modes, files
    /// added, a directory swapped for a link) is undone. Afterwards the store
    /// holds records for `dir` as after `materialize`.
    ///
    /// Without records for `dir` (another process wrote it, or a filesystem
    /// without trustworthy ctimes) every entry is rewritten, which is still
    /// exact. Like `materialize`, this relies on nothing else writing to
    /// `dir` while it runs. On error `dir` is left partly converted; remove
    /// it (or `materialize` elsewhere).
    pub fn reconcile(&self, commit: Oid, dir: &Path) -> Result<Reconciled, Error> {
        let old = self.stats.borrow_mut().take(dir);
        let tree = self.commit_tree(commit)?;
        let (records, done) = materialize::reconcile(&self.repo, &self.cache, old, &tree, dir)?;
        if let Some(records) = records {
            self.stats.borrow_mut().insert(dir, records);
        }
        Ok(done)
    }

    /// Rename the directory `from` to `to` (which must not exist; same
    /// filesystem), keeping what this store recorded about it, so a later
    /// [`Store::reconcile`] or [`Store::snapshot`] of `to` can use it.
    pub fn move_worktree(&self, from: &Path, to: &Path) -> Result<(), Error> {
        if to.symlink_metadata().is_ok() {
            return Err(Error::DestinationNotEmpty(to.to_path_buf()));
        }
        let records = self.stats.borrow_mut().take(from);
        std::fs::rename(from, to).map_err(io(from, "moving"))?;
        if let Some(records) = records {
            self.stats.borrow_mut().insert(to, records);
        }
        Ok(())
    }

    /// Create the lightweight tag `refs/tags/<name>` naming `commit`.
    pub fn tag(&self, name: &str, commit: Oid) -> Result<(), Error> {
        let refname = tag_ref(name)?;
        if self.repo.find_reference(&refname).is_ok() {
            return Err(Error::TagExists(name.to_string()));
        }
        let obj = self.find_commit(commit)?.into_object();
        self.repo
            .tag_lightweight(name, &obj, false)
            .map_err(|e| match e.code() {
                // Lost a race with another writer: same meaning as above.
                git2::ErrorCode::Exists => Error::TagExists(name.to_string()),
                _ => Error::Git {
                    context: format!("creating tag {name}"),
                    source: e,
                },
            })?;
        Ok(())
    }

    /// Point `refs/evolve/<name>` at `commit`, creating or moving it. These refs keep
    /// commits that are no generation (a rejected candidate's proposed tree) reachable:
    /// they live outside `refs/tags/`, so no tag listing, eligibility or verification of
    /// `gen/*` tags ever sees them.
    pub fn set_evolve_ref(&self, name: &str, commit: Oid) -> Result<(), Error> {
        let refname = evolve_ref(name)?;
        self.find_commit(commit)?;
        self.repo
            .reference(&refname, commit, true, "evolve: keep a proposed tree")
            .map_err(git(format!("writing {refname}")))?;
        Ok(())
    }

    /// The commit `refs/evolve/<name>` names, or `None` if absent.
    pub fn evolve_ref_target(&self, name: &str) -> Result<Option<Oid>, Error> {
        let refname = evolve_ref(name)?;
        let reference = match self.repo.find_reference(&refname) {
            Ok(r) => r,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(git(format!("reading {refname}"))(e)),
        };
        let commit = reference
            .peel_to_commit()
            .map_err(|_| Error::NotFound(format!("a commit behind {refname}")))?;
        Ok(Some(commit.id()))
    }

    /// The commit a tag names (annotated tags are peeled), or `None` if absent.
    pub fn tag_target(&self, name: &str) -> Result<Option<Oid>, Error> {
        let refname = tag_ref(name)?;
        // A loose tag file whose lstat is unchanged since it was read names the
        // same commit (see `tagcache.rs`); reading it again costs four system
        // calls and a commit lookup, for every row, every time the driver
        // recomputes eligibility.
        let loose = self.repo.path().join(&refname);
        let stat = tagcache::TagStat::of(&loose);
        if let Some(id) = stat.and_then(|st| self.tags.borrow().get(&refname, &st)) {
            return Ok(Some(id));
        }
        let found = self.tag_target_uncached(name, &refname)?;
        if let (Some(st), Some(id)) = (stat, found) {
            self.tags.borrow_mut().insert(refname, st, id);
        }
        Ok(found)
    }

    fn tag_target_uncached(&self, name: &str, refname: &str) -> Result<Option<Oid>, Error> {
        let reference = match self.repo.find_reference(refname) {
            Ok(r) => r,
            Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(git(format!("reading tag {name}"))(e)),
        };
        let commit = reference
            .peel_to_commit()
            .map_err(|_| Error::NotFound(format!("a commit behind tag {name}")))?;
        Ok(Some(commit.id()))
    }

    /// Every tag whose name starts with `prefix` (e.g. `"gen/"`) with its
    /// commit, sorted by name bytewise. Tags not naming a commit are errors.
    pub fn tags(&self, prefix: &str) -> Result<Vec<(String, Oid)>, Error> {
        let refs = self.repo.references().map_err(git("listing references"))?;
        let mut out = Vec::new();
        for r in refs {
            let r = r.map_err(git("listing references"))?;
            let Some(name) = r
                .name()
                .and_then(|n| n.strip_prefix("refs/tags/"))
                .filter(|n| n.starts_with(prefix))
            else {
                continue;
            };
            let commit = r
                .peel_to_commit()
                .map_err(|_| Error::NotFound(format!("a commit behind tag {name}")))?;
            out.push((name.to_string(), commit.id()));
        }
        out.sort();
        Ok(out)
    }

    /// The tree id of `commit`.
    pub fn tree_of(&self, commit: Oid) -> Result<Oid, Error> {
        Ok(self.find_commit(commit)?.tree_id())
    }

    /// The tree id at `path` (e.g. `"evaluator"`) in `commit`; `None` when the
    /// path is absent or not a directory. `""` names the root tree.
    pub fn subtree(&self, commit: Oid, path: &str) -> Result<Option<Oid>, Error> {
        let tree = self.commit_tree(commit)?;
        if path.is_empty() {
            return Ok(Some(tree.id()));
        }
        Ok(self
            .entry_at(&tree, path)?
            .filter(|e| e.kind() == Some(ObjectType::Tree))
            .map(|e| e.id()))
    }

    /// Leaf changes from `from_commit`'s tree to `to_commit`'s, sorted by path.
    pub fn diff(&self, from_commit: Oid, to_commit: Oid) -> Result<Vec<Change>, Error> {
        let from = self.commit_tree(from_commit)?;
        let to = self.commit_tree(to_commit)?;
        let mut out = Vec::new();
        tree::diff_trees(&self.repo, Some(&from), Some(&to), "", 0, &mut out)?;
        tree::sort_changes(&mut out);
        Ok(out)
    }

    /// Unified diff text (git's patch format, 3 lines of context) from
    /// `from_tree` to `to_tree`, only for paths `keep` accepts, at most
    /// `max_bytes` long: when cut, the text ends with a
    /// `[diff truncated ...]` line that fits within the budget.
    pub fn unified_diff(
        &self,
        from_tree: Oid,
        to_tree: Oid,
        keep: &dyn Fn(&str) -> bool,
        max_bytes: usize,
    ) -> Result<String, Error> {
        tree::unified_diff(&self.repo, from_tree, to_tree, keep, max_bytes)
    }

    /// Added and removed lines per changed file from `from_tree` to
    /// `to_tree`, for the paths `keep` accepts, keyed by [`Change::path`]
    /// (a binary file counts 0 and 0). Counted by libgit2 per file, never
    /// read back from the patch text: see `tree::line_counts`.
    pub fn line_counts(
        &self,
        from_tree: Oid,
        to_tree: Oid,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<std::collections::BTreeMap<String, (usize, usize)>, Error> {
        tree::line_counts(&self.repo, from_tree, to_tree, keep)
    }

    /// Move every loose object into one new pack (fsynced before the loose
    /// copies are deleted); returns how many were packed. Reading a pack
    /// costs no system call per object, so checkouts get several times
    /// cheaper: call this after the genesis commit, and again when many
    /// generations have added loose objects (each adds a handful). It takes
    /// on the order of 100 ms per thousand objects (delta search).
    pub fn pack_objects(&self) -> Result<usize, Error> {
        pack::pack_loose(&self.repo)
    }

    /// The commit `HEAD` names, or `None` while the branch is unborn.
    pub fn head(&self) -> Result<Option<Oid>, Error> {
        match self.repo.head() {
            Ok(r) => {
                let c = r
                    .peel_to_commit()
                    .map_err(git("resolving HEAD to a commit"))?;
                Ok(Some(c.id()))
            }
            Err(e)
                if matches!(
                    e.code(),
                    git2::ErrorCode::UnbornBranch | git2::ErrorCode::NotFound
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(git("reading HEAD")(e)),
        }
    }

    /// The content of the regular file at `path` in `commit`; `None` when
    /// absent, [`Error::NotAFile`] for a directory, symlink or gitlink, and
    /// [`Error::LimitExceeded`] when larger than `max_bytes` (checked before
    /// the content is loaded).
    pub fn read_blob(
        &self,
        commit: Oid,
        path: &str,
        max_bytes: usize,
    ) -> Result<Option<Vec<u8>>, Error> {
        let tree = self.commit_tree(commit)?;
        let Some(entry) = self.entry_at(&tree, path)? else {
            return Ok(None);
        };
        let mode = entry.filemode();
        if !tree::is_regular(mode) {
            let found = match mode {
                tree::MODE_TREE => "directory",
                tree::MODE_LINK => "symlink",
                tree::MODE_GITLINK => "gitlink (submodule)",
                _ => "entry of unknown mode",
            };
            return Err(Error::NotAFile {
                path: path.to_string(),
                found,
            });
        }
        let odb = self
            .repo
            .odb()
            .map_err(git("opening the object database"))?;
        let (size, _) = odb
            .read_header(entry.id())
            .map_err(git(format!("reading {path} in {commit}")))?;
        if size > max_bytes {
            return Err(Error::LimitExceeded {
                path: path.to_string(),
                limit: "read size",
                max: max_bytes as u64,
            });
        }
        let obj = odb
            .read(entry.id())
            .map_err(git(format!("reading {path} in {commit}")))?;
        Ok(Some(obj.data().to_vec()))
    }

    fn find_commit(&self, commit: Oid) -> Result<git2::Commit<'_>, Error> {
        self.repo
            .find_commit(commit)
            .map_err(|_| Error::NotFound(format!("commit {commit}")))
    }

    fn commit_tree(&self, commit: Oid) -> Result<git2::Tree<'_>, Error> {
        self.find_commit(commit)?
            .tree()
            .map_err(git(format!("reading the tree of commit {commit}")))
    }

    /// Tree entry at a clean relative path, `None` when absent.
    fn entry_at(
        &self,
        tree: &git2::Tree<'_>,
        path: &str,
    ) -> Result<Option<git2::TreeEntry<'static>>, Error> {
        if !is_clean_path(path) {
            return Err(Error::InvalidPath(path.to_string()));
        }
        match tree.get_path(Path::new(path)) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git(format!("looking up {path}"))(e)),
        }
    }
}

/// `refs/tags/<name>`, if that is a valid reference name.
fn tag_ref(name: &str) -> Result<String, Error> {
    let refname = format!("refs/tags/{name}");
    if name.is_empty() || !git2::Reference::is_valid_name(&refname) {
        return Err(Error::InvalidTagName(name.to_string()));
    }
    Ok(refname)
}

/// `refs/evolve/<name>`, if that is a valid reference name.
fn evolve_ref(name: &str) -> Result<String, Error> {
    let refname = format!("refs/evolve/{name}");
    if name.is_empty() || !git2::Reference::is_valid_name(&refname) {
        return Err(Error::InvalidTagName(name.to_string()));
    }
    Ok(refname)
}

/// Write a commit of `tree` in `repo`, signed by `evolve <evolve@localhost>`
/// now, advancing `update_ref` if given.
fn write_commit(
    repo: &Repository,
    tree: Oid,
    parent: Option<Oid>,
    message: &str,
    update_ref: Option<&str>,
) -> Result<Oid, Error> {
    let tree_obj = repo
        .find_tree(tree)
        .map_err(|_| Error::NotFound(format!("tree {tree}")))?;
    let parent_obj = match parent {
        Some(p) => Some(
            repo.find_commit(p)
                .map_err(|_| Error::NotFound(format!("commit {p}")))?,
        ),
        None => None,
    };
    let sig = Signature::now("evolve", "evolve@localhost")
        .map_err(git("building the commit signature"))?;
    let parents: Vec<&git2::Commit<'_>> = parent_obj.iter().collect();
    repo.commit(update_ref, &sig, &sig, message, &tree_obj, &parents)
        .map_err(git(format!("committing tree {tree}")))
}

/// Non-empty, relative, '/'-separated, no empty, `.` or `..` components.
pub(crate) fn is_clean_path(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// How every walk opens a directory: never through a symlink (`ELOOP`), and
/// only a directory (`ENOTDIR`).
pub(crate) fn dir_flags() -> rustix::fs::OFlags {
    use rustix::fs::OFlags;
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// `prefix/name`, or `name` at the root.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        let mut s = String::with_capacity(prefix.len() + 1 + name.len());
        s.push_str(prefix);
        s.push('/');
        s.push_str(name);
        s
    }
}
