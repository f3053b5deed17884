//! Reading files that evolved code wrote (the candidate's target directory, a trial's logs)
//! without ever following a link, and writing into such a directory without writing
//! through one ([`write_new`]).
//!
//! Every component of a relative name is opened with `O_NOFOLLOW` from its parent's
//! descriptor, so a planted link, at any depth, refuses the open instead of leading the host
//! somewhere else. The caller learns only that the name was refused, never why: a link to a
//! missing file and a link to an existing one look the same.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// Why a name could not be read as a regular file.
#[derive(Debug)]
pub enum NotRegular {
    /// A link, a directory, a special file or a missing name, at any component.
    Refused,
    /// Larger than the caller's cap.
    TooLarge,
    /// Reading the opened regular file failed.
    Io(std::io::Error),
}

/// A directory held open, whose names are read without following links.
pub struct Beneath {
    dir: OwnedFd,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Beneath {
    /// Open `dir` itself, refusing a link.
    pub fn open(dir: &Path) -> std::io::Result<Beneath> {
        let dir = rustix::fs::open(dir, DIR_FLAGS, Mode::empty())?;
        Ok(Beneath { dir })
    }

    /// The regular file `rel` (`a/b/c`, no `.` or `..`), opened with `O_NOFOLLOW` at every
    /// component.
    fn open_file(&self, rel: &str) -> Result<(OwnedFd, rustix::fs::Stat), NotRegular> {
        let mut parts = rel.split('/').filter(|p| !p.is_empty()).peekable();
        let mut held: Option<OwnedFd> = None;
        while let Some(part) = parts.next() {
            if part == "." || part == ".." {
                return Err(NotRegular::Refused);
            }
            let parent = held.as_ref().unwrap_or(&self.dir);
            if parts.peek().is_some() {
                let next = rustix::fs::openat(parent, part, DIR_FLAGS, Mode::empty())
                    .map_err(|_| NotRegular::Refused)?;
                held = Some(next);
            } else {
                let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(parent, part, flags, Mode::empty())
                    .map_err(|_| NotRegular::Refused)?;
                let st = rustix::fs::fstat(&fd).map_err(|e| NotRegular::Io(e.into()))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(NotRegular::Refused);
                }
                return Ok((fd, st));
            }
        }
        Err(NotRegular::Refused)
    }

    /// The bytes of the regular file `rel`, at most `cap` of them.
    pub fn read(&self, rel: &str, cap: u64) -> Result<Vec<u8>, NotRegular> {
        let (fd, st) = self.open_file(rel)?;
        if st.st_size as u64 > cap {
            return Err(NotRegular::TooLarge);
        }
        let mut buf = Vec::with_capacity(st.st_size.max(0) as usize);
        std::fs::File::from(fd)
            .take(cap + 1)
            .read_to_end(&mut buf)
            .map_err(NotRegular::Io)?;
        if buf.len() as u64 > cap {
            return Err(NotRegular::TooLarge);
        }
        Ok(buf)
    }

    /// Whether the regular file `rel` has an execute bit.
    pub fn executable(&self, rel: &str) -> Result<bool, NotRegular> {
        let (_, st) = self.open_file(rel)?;
        Ok(st.st_mode & 0o111 != 0)
    }
}

/// The regular file `name` of `dir`, read without following a link (either of them), at most
/// `cap` bytes; `None` when it is missing, a link, not regular or too large.
pub fn read_regular(dir: &Path, name: &str, cap: u64) -> Option<Vec<u8>> {
    Beneath::open(dir).ok()?.read(name, cap).ok()
}

/// Write `name` in a directory evolved code could write to, never through a link it
/// planted there: the old name is unlinked (which never follows a link) and the file is
/// created anew with `O_EXCL` (which refuses one).
pub fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let p = dir.join(name);
    match std::fs::remove_file(&p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)?
        .write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_refused_at_every_depth_and_look_alike() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/ok.txt"), "fine").unwrap();
        std::fs::write(root.join("secret"), "s3cret").unwrap();
        std::os::unix::fs::symlink(root.join("secret"), root.join("to-existing")).unwrap();
        std::os::unix::fs::symlink(root.join("missing"), root.join("to-missing")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("linked-dir")).unwrap();
        let b = Beneath::open(root).unwrap();
        assert_eq!(b.read("sub/ok.txt", 100).unwrap(), b"fine");
        for name in [
            "to-existing",
            "to-missing",
            "linked-dir/ok.txt",
            "sub",
            "nope",
            "../x",
            "sub/../secret",
        ] {
            assert!(
                matches!(b.read(name, 100), Err(NotRegular::Refused)),
                "{name} should be refused"
            );
        }
        assert!(matches!(b.read("secret", 3), Err(NotRegular::TooLarge)));
        // The directory itself as a link is refused too.
        std::os::unix::fs::symlink(root.join("sub"), root.join("dirlink")).unwrap();
        assert!(Beneath::open(&root.join("dirlink")).is_err());
    }
}
