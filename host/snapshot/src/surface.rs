//! The mutable surface: which paths a candidate may change, checked against the
//! actual change list of a snapshot (never against what an operator claims).

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use crate::error::Error;
use crate::{Change, ChangeKind, EntryKind, is_clean_path};

/// One reason a change list is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Violation {
    pub path: String,
    pub reason: String,
}

/// Include/exclude globs plus the implicit, non-overridable excludes.
///
/// `*` matches within one path segment, `**` across segments. An exclude
/// `X/**` also excludes `X` itself, so a file planted where a protected
/// directory was (e.g. a file named `evaluator`) is still outside the surface.
#[derive(Debug, Clone)]
pub struct Surface {
    include: GlobSet,
    include_segments: Vec<Vec<Segment>>,
    /// Explicit excludes (with `X/**` expanded); `exclude_src[i]` is the
    /// pattern glob `i` came from, for messages.
    exclude: GlobSet,
    exclude_src: Vec<String>,
    implicit: GlobSet,
    implicit_src: Vec<String>,
    /// Globs for directories whose whole content is excluded (`X` and `X/**`
    /// of every `X/**` exclude, explicit or implicit).
    excluded_dirs: GlobSet,
    /// Literal leading part of every exclude, with a trailing `/` when the
    /// rest is a glob: a symlink to an ancestor of one of these would alias
    /// excluded paths.
    excluded_prefixes: Vec<(String, String)>,
}

/// One '/'-separated piece of an include pattern, for `includes_dir`.
#[derive(Debug, Clone)]
enum Segment {
    /// `**`, or anything we cannot reason about per segment (conservative).
    Any,
    One(GlobMatcher),
}

impl Surface {
    /// Framework-owned paths no include can reach: the one list the guest SDK's edit
    /// parser also checks (`evolve-framework-paths`).
    pub const IMPLICIT_EXCLUDES: &'static [&'static str] =
        evolve_framework_paths::IMPLICIT_EXCLUDES;

    /// Compile the globs; a bad one is [`Error::InvalidGlob`] naming it. An
    /// empty include list allows nothing.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Surface, Error> {
        let mut inc = GlobSetBuilder::new();
        let mut include_segments = Vec::new();
        for p in include {
            inc.add(glob(p)?);
            include_segments.push(segments(p));
        }
        let mut dirs = GlobSetBuilder::new();
        let mut prefixes = Vec::new();
        let (exclude, exclude_src) =
            expanded(exclude.iter().map(String::as_str), &mut dirs, &mut prefixes)?;
        let (implicit, implicit_src) = expanded(
            Self::IMPLICIT_EXCLUDES.iter().copied(),
            &mut dirs,
            &mut prefixes,
        )?;
        Ok(Surface {
            include: set(inc)?,
            include_segments,
            exclude,
            exclude_src,
            implicit,
            implicit_src,
            excluded_dirs: set(dirs)?,
            excluded_prefixes: prefixes,
        })
    }

    /// Whether a change at `path` is allowed: a clean relative path without a
    /// `.git` component, matched by an include, and by no exclude (explicit
    /// or implicit).
    pub fn allows(&self, path: &str) -> bool {
        self.deny_reason(path).is_none()
    }

    /// Whether anything under directory `dir` (e.g. `"operators/"`) could be
    /// allowed. Conservative: it may answer true for a directory where no
    /// path turns out allowed (the change check still decides), but never
    /// false where one could be.
    pub fn includes_dir(&self, dir: &str) -> bool {
        let d = dir.trim_end_matches('/');
        if d.is_empty() {
            return !self.include_segments.is_empty();
        }
        if !is_clean_path(d) || has_dotgit(d) {
            return false;
        }
        let segs: Vec<&str> = d.split('/').collect();
        let fully_excluded =
            (1..=segs.len()).any(|n| self.excluded_dirs.is_match(segs[..n].join("/")));
        !fully_excluded
            && self
                .include_segments
                .iter()
                .any(|p| could_match_below(p, &segs))
    }

    /// Every violation in `changes`: paths the surface does not allow,
    /// submodules and nested repositories, special files, and symlinks that
    /// are absolute, escape the root, cannot be resolved lexically, or land
    /// on (or alias a directory holding) a path the surface does not allow.
    pub fn check(&self, changes: &[Change]) -> Vec<Violation> {
        let mut out = Vec::new();
        for c in changes {
            let live = c.kind != ChangeKind::Deleted;
            let reason = match &c.entry {
                EntryKind::Submodule if live => {
                    Some("submodule or nested repository (.git); not allowed in a candidate".into())
                }
                EntryKind::Special if live => Some(
                    "special file (fifo, socket or device) or undecodable name; only files, \
                     symlinks and directories are allowed"
                        .into(),
                ),
                _ => None,
            }
            .or_else(|| self.deny_reason(&c.path))
            .or_else(|| match &c.entry {
                EntryKind::Symlink { target } if live => self.symlink_reason(&c.path, target),
                _ => None,
            });
            if let Some(reason) = reason {
                out.push(Violation {
                    path: c.path.clone(),
                    reason,
                });
            }
        }
        out
    }

    /// Why `path` is not allowed, or `None` when it is.
    fn deny_reason(&self, path: &str) -> Option<String> {
        if !is_clean_path(path) {
            return Some("not a clean relative path".into());
        }
        if has_dotgit(path) {
            return Some("contains a .git component (nested repository)".into());
        }
        if let Some(i) = self.implicit.matches(path).first() {
            let p = self.implicit_src.get(*i).map(String::as_str).unwrap_or("?");
            return Some(format!("framework-owned (implicit exclude {p})"));
        }
        if !self.include.is_match(path) {
            return Some("outside the surface (matched by no include pattern)".into());
        }
        if let Some(i) = self.exclude.matches(path).first() {
            let p = self.exclude_src.get(*i).map(String::as_str).unwrap_or("?");
            return Some(format!("outside the surface (exclude {p})"));
        }
        None
    }

    /// Why a symlink at `link` with `target` is not allowed. Resolution is
    /// lexical from the link's directory, which is sound only while `..`
    /// crosses real directories: a `..` after a normal component might
    /// climb out of a symlinked directory, so it is refused.
    fn symlink_reason(&self, link: &str, target: &str) -> Option<String> {
        if target.is_empty() {
            return Some("symlink with an empty target".into());
        }
        if target.starts_with('/') {
            return Some(format!("symlink to absolute path {target}"));
        }
        let mut parts: Vec<&str> = link.split('/').collect();
        parts.pop();
        let mut descended = false;
        for comp in target.split('/') {
            match comp {
                "" | "." => {}
                ".." if descended => {
                    return Some(format!(
                        "symlink target {target} has '..' after a path component, which may \
                         itself be a symlink; cannot be checked"
                    ));
                }
                ".." => {
                    if parts.pop().is_none() {
                        return Some(format!(
                            "symlink target {target} escapes the workspace root"
                        ));
                    }
                }
                c => {
                    descended = true;
                    parts.push(c);
                }
            }
        }
        if parts.is_empty() {
            return Some(format!(
                "symlink target {target} resolves to the workspace root"
            ));
        }
        let resolved = parts.join("/");
        if let Some(r) = self.deny_reason(&resolved) {
            return Some(format!(
                "symlink target {target} resolves to {resolved}: {r}"
            ));
        }
        let dir = format!("{resolved}/");
        if let Some((_, src)) = self
            .excluded_prefixes
            .iter()
            .find(|(p, _)| p.starts_with(&dir))
        {
            return Some(format!(
                "symlink target {target} resolves to directory {resolved}, which holds \
                 excluded paths ({src})"
            ));
        }
        None
    }
}

fn glob(p: &str) -> Result<Glob, Error> {
    GlobBuilder::new(p)
        .literal_separator(true)
        .build()
        .map_err(|e| Error::InvalidGlob {
            pattern: p.to_string(),
            message: e.kind().to_string(),
        })
}

fn set(b: GlobSetBuilder) -> Result<GlobSet, Error> {
    b.build().map_err(|e| Error::InvalidGlob {
        pattern: e.glob().unwrap_or("").to_string(),
        message: e.kind().to_string(),
    })
}

/// An exclude set where `X/**` also matches `X`, the source pattern of each
/// glob, and (through `dirs`/`prefixes`) the directory facts for
/// `includes_dir` and the symlink alias check.
fn expanded<'a>(
    patterns: impl Iterator<Item = &'a str>,
    dirs: &mut GlobSetBuilder,
    prefixes: &mut Vec<(String, String)>,
) -> Result<(GlobSet, Vec<String>), Error> {
    let mut b = GlobSetBuilder::new();
    let mut src = Vec::new();
    for p in patterns {
        b.add(glob(p)?);
        src.push(p.to_string());
        if let Some(base) = p.strip_suffix("/**").filter(|b| !b.is_empty()) {
            b.add(glob(base)?);
            src.push(p.to_string());
            dirs.add(glob(base)?);
            dirs.add(glob(p)?);
        }
        let lit = literal_prefix(p);
        if !lit.is_empty() {
            prefixes.push((lit, p.to_string()));
        }
    }
    Ok((set(b)?, src))
}

/// The leading segments of `p` without glob syntax; with a trailing `/` when
/// a glob follows (the prefix is then a directory).
fn literal_prefix(p: &str) -> String {
    let segs: Vec<&str> = p.split('/').collect();
    let n = segs.iter().take_while(|s| !is_glob(s)).count();
    let mut out = segs[..n].join("/");
    if n < segs.len() && !out.is_empty() {
        out.push('/');
    }
    out
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

fn segments(p: &str) -> Vec<Segment> {
    // Braces may hold '/', so per-segment reasoning would be wrong: match anything.
    if p.contains(['{', '}']) {
        return vec![Segment::Any];
    }
    p.split('/')
        .map(|s| match s {
            "**" => Segment::Any,
            s => GlobBuilder::new(s)
                .literal_separator(true)
                .build()
                .map(|g| Segment::One(g.compile_matcher()))
                .unwrap_or(Segment::Any),
        })
        .collect()
}

/// Whether a pattern could match some path strictly below directory `dir`.
fn could_match_below(pat: &[Segment], dir: &[&str]) -> bool {
    match (pat.first(), dir.first()) {
        (None, _) => false,
        (Some(Segment::Any), _) => true,
        (Some(_), None) => true,
        (Some(Segment::One(m)), Some(d)) => {
            m.is_match(d) && could_match_below(&pat[1..], &dir[1..])
        }
    }
}

fn has_dotgit(path: &str) -> bool {
    path.split('/').any(|c| c.eq_ignore_ascii_case(".git"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path each glob of the list matches: `**` and `*` filled in.
    fn example(glob: &str) -> String {
        glob.replace("**", "x/y").replace('*', "x")
    }

    /// The check uses the shared list itself, not a copy: every path of it stays
    /// framework-owned even under a surface that includes everything, so an entry added
    /// to `evolve-framework-paths` and missing here fails this test.
    #[test]
    fn every_shared_implicit_exclude_is_framework_owned() {
        assert_eq!(
            Surface::IMPLICIT_EXCLUDES,
            evolve_framework_paths::IMPLICIT_EXCLUDES
        );
        let s = Surface::new(&["**".into()], &[]).unwrap();
        for glob in evolve_framework_paths::IMPLICIT_EXCLUDES {
            let path = example(glob);
            let reason = s
                .deny_reason(&path)
                .unwrap_or_else(|| panic!("{path} allowed"));
            // `.git` is refused as a nested repository before the list is consulted.
            if !glob.starts_with(".git/") {
                assert_eq!(reason, format!("framework-owned (implicit exclude {glob})"));
            }
            if let Some(dir) = glob.strip_suffix("/**") {
                assert!(!s.allows(dir), "{dir} itself must stay framework-owned");
            }
        }
    }

    #[test]
    fn literal_prefixes_mark_directories() {
        assert_eq!(literal_prefix("target/secret/**"), "target/secret/");
        assert_eq!(
            literal_prefix("operators/manifest.json"),
            "operators/manifest.json"
        );
        assert_eq!(literal_prefix("target/*.lock"), "target/");
        assert_eq!(literal_prefix("**/*.key"), "");
    }

    #[test]
    fn symlink_to_a_directory_holding_excluded_paths_is_refused() {
        let s = Surface::new(&["**".into()], &["target/secret/**".into()]).unwrap();
        let reason = s.symlink_reason("target/a/link", "..").unwrap();
        assert!(reason.contains("target/secret/**"), "{reason}");
        assert_eq!(s.symlink_reason("target/a/link", "../b"), None);
        assert_eq!(s.symlink_reason("target/link", "a/./b/"), None);
    }
}
