//! Edit blocks for model-driven mutate operators (`mutate/harness`, `mutate/hyperagents`):
//! the strict text format the model answers in, the path and surface
//! checks, applying blocks to the guest file system, and the file listing the model
//! is shown. Pure functions of their inputs (the file system is reached through a
//! `root` that stands for the guest's `/`), so they are tested natively.
//!
//! The format, one block per edit, anything outside a block being commentary:
//!
//! ```text
//! <<<<<<< SEARCH target/path/file
//! exact existing text (whole lines)
//! =======
//! replacement text
//! >>>>>>> REPLACE
//!
//! <<<<<<< WRITE target/path/file
//! the complete new content
//! >>>>>>> END
//! ```
//!
//! Markers are whole lines (a trailing `\r` is ignored). Inside a block, any other line
//! starting `<<<<<<< ` or `>>>>>>> ` is a format error that drops the block, so a
//! forgotten closer cannot swallow the next block; a SEARCH text cannot itself contain
//! a `=======` line. A line `DONE` outside blocks says the change is complete.

use std::path::Path;

use crate::prelude::*;

pub const SEARCH_OPEN: &str = "<<<<<<< SEARCH ";
pub const WRITE_OPEN: &str = "<<<<<<< WRITE ";
pub const DIVIDER: &str = "=======";
pub const REPLACE_CLOSE: &str = ">>>>>>> REPLACE";
pub const WRITE_CLOSE: &str = ">>>>>>> END";
pub const DONE: &str = "DONE";

/// The framework-owned paths no surface can open: the one list the host's surface
/// check also uses (`evolve-framework-paths`).
pub use evolve_framework_paths::IMPLICIT_EXCLUDES;

/// How the model is told to write edits (part of every system prompt).
pub const FORMAT: &str = "\
Edit format (strict; everything outside a block is read as your notes):

<<<<<<< SEARCH target/path/to/file
exact existing lines
=======
replacement lines
>>>>>>> REPLACE

<<<<<<< WRITE target/path/to/file
the complete new content of the file
>>>>>>> END

- Paths are relative to the workspace root (e.g. target/params.json).
- A SEARCH text must occur exactly once in the file, whitespace included; add \
surrounding lines to make it unique. An empty replacement deletes the lines.
- WRITE creates a file or replaces a whole file.
- Marker lines stand alone; do not put them inside code fences.
- Only text files inside the mutable surface can be edited; binary files (e.g. .wasm) cannot.";

/// One edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Replace { search: String, replace: String },
    Write { content: String },
}

/// One block as parsed, with the 1-based line its opening marker is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub path: String,
    pub edit: Edit,
    pub line: usize,
}

impl Block {
    pub fn kind(&self) -> &'static str {
        match self.edit {
            Edit::Replace { .. } => "replace",
            Edit::Write { .. } => "write",
        }
    }
}

/// A parsed answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    pub blocks: Vec<Block>,
    /// Format errors, `line N: …`, in order.
    pub errors: Vec<String>,
    /// The text outside blocks (code-fence lines and `DONE` removed), trimmed.
    pub commentary: String,
    /// Whether a `DONE` line appeared outside blocks.
    pub done: bool,
}

enum State {
    Outside,
    Search {
        path: String,
        line: usize,
        search: Vec<String>,
    },
    Replace {
        path: String,
        line: usize,
        search: Vec<String>,
        replace: Vec<String>,
    },
    Write {
        path: String,
        line: usize,
        content: Vec<String>,
    },
}

fn opener(line: &str) -> Option<(bool, String)> {
    if let Some(p) = line.strip_prefix(SEARCH_OPEN) {
        Some((true, p.trim().to_string()))
    } else if let Some(p) = line.strip_prefix(WRITE_OPEN) {
        Some((false, p.trim().to_string()))
    } else if line == SEARCH_OPEN.trim_end() || line == WRITE_OPEN.trim_end() {
        Some((line == SEARCH_OPEN.trim_end(), String::new()))
    } else {
        None
    }
}

/// Parse a model answer into blocks, format errors and commentary.
pub fn parse(answer: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut notes: Vec<&str> = Vec::new();
    let mut state = State::Outside;
    let lines: Vec<&str> = answer
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    for (i, &line) in lines.iter().enumerate() {
        let n = i + 1;
        let open = opener(line);
        state = match state {
            State::Outside => match open {
                Some((true, path)) => State::Search {
                    path,
                    line: n,
                    search: vec![],
                },
                Some((false, path)) => State::Write {
                    path,
                    line: n,
                    content: vec![],
                },
                None => {
                    if line.trim() == DONE {
                        out.done = true;
                    } else if !line.trim_start().starts_with("```") {
                        notes.push(line);
                    }
                    State::Outside
                }
            },
            State::Search {
                path,
                line: at,
                mut search,
            } => {
                if line == DIVIDER {
                    State::Replace {
                        path,
                        line: at,
                        search,
                        replace: vec![],
                    }
                } else if is_marker(line) {
                    out.errors.push(format!(
                        "line {n}: the SEARCH block opened at line {at} has no `{DIVIDER}` line before this marker"
                    ));
                    reopen(open, n)
                } else {
                    search.push(line.to_string());
                    State::Search {
                        path,
                        line: at,
                        search,
                    }
                }
            }
            State::Replace {
                path,
                line: at,
                search,
                mut replace,
            } => {
                if line == REPLACE_CLOSE {
                    finish(&mut out, path, at, Some(search), replace);
                    State::Outside
                } else if is_marker(line) {
                    out.errors.push(format!(
                        "line {n}: the SEARCH block opened at line {at} must end with `{REPLACE_CLOSE}`"
                    ));
                    reopen(open, n)
                } else {
                    replace.push(line.to_string());
                    State::Replace {
                        path,
                        line: at,
                        search,
                        replace,
                    }
                }
            }
            State::Write {
                path,
                line: at,
                mut content,
            } => {
                if line == WRITE_CLOSE {
                    finish(&mut out, path, at, None, content);
                    State::Outside
                } else if is_marker(line) {
                    out.errors.push(format!(
                        "line {n}: the WRITE block opened at line {at} must end with `{WRITE_CLOSE}`"
                    ));
                    reopen(open, n)
                } else {
                    content.push(line.to_string());
                    State::Write {
                        path,
                        line: at,
                        content,
                    }
                }
            }
        };
    }
    match state {
        State::Outside => {}
        State::Search { line, .. } | State::Replace { line, .. } | State::Write { line, .. } => {
            out.errors
                .push(format!("line {line}: this block is never closed"));
        }
    }
    out.commentary = notes.join("\n").trim().to_string();
    out
}

fn is_marker(line: &str) -> bool {
    line.starts_with("<<<<<<< ")
        || line.starts_with(">>>>>>> ")
        || line == SEARCH_OPEN.trim_end()
        || line == WRITE_OPEN.trim_end()
}

/// After a format error on a marker line: a new block when the marker opens one.
fn reopen(open: Option<(bool, String)>, n: usize) -> State {
    match open {
        Some((true, path)) => State::Search {
            path,
            line: n,
            search: vec![],
        },
        Some((false, path)) => State::Write {
            path,
            line: n,
            content: vec![],
        },
        None => State::Outside,
    }
}

fn finish(
    out: &mut Parsed,
    path: String,
    line: usize,
    search: Option<Vec<String>>,
    body: Vec<String>,
) {
    let kind = if search.is_some() { "SEARCH" } else { "WRITE" };
    if path.is_empty() {
        out.errors
            .push(format!("line {line}: the {kind} marker names no file"));
        return;
    }
    let edit = match search {
        Some(s) => {
            if s.iter().all(|l| l.trim().is_empty()) {
                out.errors.push(format!(
                    "line {line}: the SEARCH text for {path} is empty (use a WRITE block for a whole file)"
                ));
                return;
            }
            Edit::Replace {
                search: s.join("\n"),
                replace: body.join("\n"),
            }
        }
        None => Edit::Write {
            content: body.join("\n"),
        },
    };
    out.blocks.push(Block { path, edit, line });
}

/// What edits may touch: top-level directories, the surface, and optionally a cap on
/// the number of distinct files one proposal changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub roots: Vec<String>,
    pub includes: Vec<String>,
    pub excludes: Vec<String>,
    pub max_files: Option<usize>,
}

impl Policy {
    /// Whether `path` (already clean) is inside the surface (for the file listing).
    pub fn editable(&self, path: &str) -> bool {
        check_path(path, self).is_ok()
    }
}

/// Glob match: `*` and `?` stay within one `/`-separated segment, a `**` segment
/// matches any number of segments (including none).
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    segments_match(&p, &s)
}

fn segments_match(p: &[&str], s: &[&str]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((&"**", rest)) => (0..=s.len()).any(|i| segments_match(rest, &s[i..])),
        Some((seg, rest)) => {
            !s.is_empty() && segment_match(seg.as_bytes(), s[0].as_bytes()) && {
                segments_match(rest, &s[1..])
            }
        }
    }
}

/// `*` (any run) and `?` (one byte) within one segment; everything else literal.
fn segment_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

/// Whether some include could match a path below the directory `dir` (one segment).
pub fn includes_under(includes: &[String], dir: &str) -> bool {
    includes.iter().any(|inc| {
        let mut segs = inc.split('/');
        match segs.next() {
            Some("**") => true,
            Some(first) => segment_match(first.as_bytes(), dir.as_bytes()) && segs.next().is_some(),
            None => false,
        }
    })
}

/// Check a block's path and return it normalized (`/target/x` → `target/x`).
pub fn check_path(path: &str, policy: &Policy) -> Result<String, String> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let segs: Vec<&str> = rel.split('/').collect();
    if rel.is_empty()
        || segs
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == ".." || s.contains(['\\', '\0']))
    {
        return Err("not a clean relative path (no empty, `.` or `..` segments)".into());
    }
    if segs.contains(&".git") {
        return Err("a `.git` path (nested repositories are not allowed)".into());
    }
    if segs.len() < 2 || !policy.roots.iter().any(|r| r == segs[0]) {
        let roots: Vec<String> = policy.roots.iter().map(|r| format!("{r}/")).collect();
        return Err(format!("outside the editable roots ({})", roots.join(", ")));
    }
    if rel.ends_with(".wasm") {
        return Err(
            "a WebAssembly component (.wasm) is binary and cannot be edited as text".into(),
        );
    }
    if let Some(g) = IMPLICIT_EXCLUDES.iter().find(|g| glob_match(g, rel)) {
        return Err(format!("framework-owned (`{g}`)"));
    }
    if let Some(g) = policy.excludes.iter().find(|g| glob_match(g, rel)) {
        return Err(format!("outside the surface: excluded by `{g}`"));
    }
    if !policy.includes.iter().any(|g| glob_match(g, rel)) {
        return Err(format!(
            "outside the surface: matches no include ({})",
            policy
                .includes
                .iter()
                .map(|g| format!("`{g}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(rel.to_string())
}

/// What happened to one block.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub path: String,
    pub kind: &'static str,
    pub applied: bool,
    pub message: String,
}

impl Outcome {
    /// `applied: target/x: …` / `refused: target/x: …`, for the model and the notes.
    pub fn line(&self) -> String {
        let verdict = if self.applied { "applied" } else { "refused" };
        format!("{verdict} ({}) {}: {}", self.kind, self.path, self.message)
    }

    pub fn to_json(&self) -> Value {
        json!({"path": self.path, "kind": self.kind, "applied": self.applied,
               "message": self.message})
    }
}

/// Apply `blocks` in order under `root` (the guest's `/`); every changed path is
/// added once to `changed`, in the order first changed.
pub fn apply(
    blocks: &[Block],
    root: &Path,
    policy: &Policy,
    changed: &mut Vec<String>,
) -> Vec<Outcome> {
    blocks
        .iter()
        .map(|b| {
            let result = apply_one(b, root, policy, changed);
            Outcome {
                path: b.path.clone(),
                kind: b.kind(),
                applied: result.is_ok(),
                message: result.unwrap_or_else(|e| e),
            }
        })
        .collect()
}

fn apply_one(
    block: &Block,
    root: &Path,
    policy: &Policy,
    changed: &mut Vec<String>,
) -> Result<String, String> {
    let rel = check_path(&block.path, policy)?;
    let segs: Vec<&str> = rel.split('/').collect();
    let mut p = root.to_path_buf();
    for s in &segs {
        p.push(s);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err("the path goes through a symbolic link".into());
        }
    }
    if p.is_dir() {
        return Err("is a directory".into());
    }
    let existing = match std::fs::read(&p) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(s) if !s.contains('\0') => Some(s),
            _ => return Err("a binary file; only text files can be edited".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("cannot read: {e}")),
    };
    let (new, message) = match &block.edit {
        Edit::Replace { search, replace } => {
            let text = existing
                .as_deref()
                .ok_or("does not exist (create it with a WRITE block)".to_string())?;
            let (new, line) = replace_once(text, search, replace)?;
            let count = |s: &str| {
                if s.is_empty() {
                    0
                } else {
                    s.split('\n').count()
                }
            };
            (
                new,
                format!(
                    "replaced {} line(s) at line {line} with {} line(s)",
                    count(search),
                    count(replace)
                ),
            )
        }
        Edit::Write { content } => {
            let mut new = content.clone();
            if !new.is_empty() && !new.ends_with('\n') {
                new.push('\n');
            }
            let what = if existing.is_some() {
                "replaced the whole file"
            } else {
                "created the file"
            };
            let lines = new.lines().count();
            (new, format!("{what} ({lines} line(s))"))
        }
    };
    if existing.as_deref() == Some(new.as_str()) {
        return Err("the edit changes nothing".into());
    }
    if let Some(max) = policy.max_files
        && !changed.contains(&rel)
        && changed.len() >= max
    {
        return Err(format!(
            "this proposal already changes {max} files (max_files)"
        ));
    }
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create its directory: {e}"))?;
    }
    std::fs::write(&p, new).map_err(|e| format!("cannot write: {e}"))?;
    if !changed.contains(&rel) {
        changed.push(rel);
    }
    Ok(message)
}

/// Replace the one occurrence of `search` in `text`; the 1-based line it starts on.
/// When the match starts a line, is followed by a newline and the replacement is
/// empty, that newline goes too (whole lines are deleted, not blanked).
pub fn replace_once(text: &str, search: &str, replace: &str) -> Result<(String, usize), String> {
    let n = text.matches(search).count();
    if n == 0 {
        return Err(
            "the SEARCH text was not found (it must match the file exactly, whitespace included)"
                .into(),
        );
    }
    if n > 1 {
        return Err(format!(
            "the SEARCH text occurs {n} times; add surrounding lines to make it unique"
        ));
    }
    let start = text.find(search).unwrap_or(0);
    let mut end = start + search.len();
    let line_start = start == 0 || text[..start].ends_with('\n');
    if replace.is_empty() && line_start && text[end..].starts_with('\n') {
        end += 1;
    }
    let line = text[..start].matches('\n').count() + 1;
    Ok((format!("{}{replace}{}", &text[..start], &text[end..]), line))
}

/// One file of the listing shown to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    /// The content, or `None` for a binary (non-UTF-8 or NUL-holding) file.
    pub text: Option<String>,
}

/// Regular files under `root/dir`, recursively, sorted by path, skipping symlinks and
/// `.git`; at most `limit`.
pub fn list_files(root: &Path, dir: &str, limit: usize) -> Vec<FileEntry> {
    let mut out = Vec::new();
    walk(root, dir, limit, &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn walk(root: &Path, rel: &str, limit: usize, out: &mut Vec<FileEntry>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n != ".git")
        .collect();
    names.sort();
    for name in names {
        if out.len() >= limit {
            return;
        }
        let path = format!("{rel}/{name}");
        let Ok(meta) = std::fs::symlink_metadata(root.join(&path)) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &path, limit, out);
        } else if meta.is_file() {
            let text = std::fs::read(root.join(&path))
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .filter(|s| !s.contains('\0'));
            out.push(FileEntry {
                path,
                size: meta.len(),
                text,
            });
        }
    }
}

/// The listing as prompt text: every file with a header saying whether it is
/// editable, and the contents of text files while `budget` characters last (a file
/// that does not fit is cut, and marked so).
pub fn files_context(entries: &[FileEntry], policy: &Policy, budget: usize) -> String {
    let mut left = budget;
    let mut out = String::new();
    for e in entries {
        let access = if policy.editable(&e.path) {
            "editable"
        } else {
            "read-only"
        };
        match &e.text {
            None => out.push_str(&format!(
                "--- file: {} ({} bytes, binary; not editable as text) ---\n",
                e.path, e.size
            )),
            Some(_) if left == 0 => out.push_str(&format!(
                "--- file: {} ({access}, {} bytes; content not shown: context budget spent) ---\n",
                e.path, e.size
            )),
            Some(text) => {
                let n = text.chars().count();
                let shown: String = text.chars().take(left).collect();
                left -= shown.chars().count();
                out.push_str(&format!("--- file: {} ({access}) ---\n{shown}", e.path));
                if !shown.ends_with('\n') {
                    out.push('\n');
                }
                if n > shown.chars().count() {
                    out.push_str(&format!(
                        "[... {} more characters not shown]\n",
                        n - shown.chars().count()
                    ));
                }
                out.push_str(&format!("--- end of {} ---\n", e.path));
            }
        }
    }
    if out.is_empty() {
        out.push_str("(no files)\n");
    }
    out
}

/// At most `n` characters of `s`, with a marker when something was cut.
pub fn cut(s: &str, n: usize) -> String {
    let total = s.chars().count();
    if total <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n).collect();
    out.push_str(&format!(" [... {} more characters]", total - n));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parser refuses every path of the shared list (the one the host's surface
    /// check uses), under a policy that would otherwise allow it: an entry added to
    /// `evolve-framework-paths` and missing here fails this test.
    #[test]
    fn every_shared_implicit_exclude_is_refused() {
        for glob in evolve_framework_paths::IMPLICIT_EXCLUDES {
            let path = glob.replace("**", "x/y").replace('*', "x");
            let root = path.split('/').next().unwrap_or_default().to_string();
            // A one-segment path (`recipe.yaml`) is outside every editable root anyway,
            // and `.git` is refused as a nested repository before the list is read.
            if !path.contains('/') || root == ".git" {
                assert!(check_path(&path, &policy(&["**"], &[])).is_err(), "{path}");
                continue;
            }
            let everything = Policy {
                roots: vec![root],
                ..policy(&["**"], &[])
            };
            assert_eq!(
                check_path(&path, &everything),
                Err(format!("framework-owned (`{glob}`)")),
                "{path}"
            );
        }
    }

    fn policy(includes: &[&str], excludes: &[&str]) -> Policy {
        Policy {
            roots: vec!["target".into(), "operators".into()],
            includes: includes.iter().map(|s| s.to_string()).collect(),
            excludes: excludes.iter().map(|s| s.to_string()).collect(),
            max_files: None,
        }
    }

    #[test]
    fn parses_replace_and_write_blocks_with_commentary() {
        let answer = "The slope is too small.\n```\n<<<<<<< SEARCH target/params.json\n  \"slope\": 1.0,\r\n=======\n  \"slope\": 2.0,\n>>>>>>> REPLACE\n```\n<<<<<<< WRITE /target/notes.md\n# Notes\n\nline\n>>>>>>> END\nDONE\n";
        let p = parse(answer);
        assert_eq!(p.errors, Vec::<String>::new());
        assert!(p.done);
        assert_eq!(p.commentary, "The slope is too small.");
        assert_eq!(
            p.blocks,
            vec![
                Block {
                    path: "target/params.json".into(),
                    edit: Edit::Replace {
                        search: "  \"slope\": 1.0,".into(),
                        replace: "  \"slope\": 2.0,".into()
                    },
                    line: 3
                },
                Block {
                    path: "/target/notes.md".into(),
                    edit: Edit::Write {
                        content: "# Notes\n\nline".into()
                    },
                    line: 9
                },
            ]
        );
    }

    #[test]
    fn format_errors_name_their_lines_and_do_not_swallow_the_next_block() {
        let answer = "<<<<<<< SEARCH target/a\nx\n>>>>>>> REPLACE\n<<<<<<< WRITE target/b\nnew\n>>>>>>> REPLACE\n<<<<<<< SEARCH target/c\n\n=======\ny\n>>>>>>> REPLACE\n<<<<<<< WRITE\nz\n>>>>>>> END\n<<<<<<< WRITE target/d\nok\n>>>>>>> END\n<<<<<<< SEARCH target/e\nq\n";
        let p = parse(answer);
        assert_eq!(
            p.errors,
            vec![
                "line 3: the SEARCH block opened at line 1 has no `=======` line before this marker",
                "line 6: the WRITE block opened at line 4 must end with `>>>>>>> END`",
                "line 7: the SEARCH text for target/c is empty (use a WRITE block for a whole file)",
                "line 12: the WRITE marker names no file",
                "line 18: this block is never closed",
            ]
        );
        assert_eq!(p.blocks.len(), 1);
        assert_eq!(p.blocks[0].path, "target/d");
        assert!(!p.done);
        assert_eq!(p.commentary, "");
    }

    #[test]
    fn globs_keep_single_stars_within_a_segment() {
        assert!(glob_match("target/**", "target/a/b.txt"));
        assert!(glob_match("target/*.json", "target/params.json"));
        assert!(!glob_match("target/*.json", "target/sub/params.json"));
        assert!(glob_match("**/*.md", "operators/policy.md"));
        assert!(glob_match("**/*.md", "a.md"));
        assert!(glob_match("target/**/x?.txt", "target/x1.txt"));
        assert!(glob_match("evaluator/**", "evaluator"));
        assert!(!glob_match("target/params.json", "target/params.jsonx"));
        assert!(glob_match("t*t/*a*b*", "target/xaybz"));
        assert!(!glob_match("t*t/*a*b", "target/xaybz"));
        assert!(includes_under(&["operators/**".into()], "operators"));
        assert!(includes_under(&["**".into()], "operators"));
        assert!(includes_under(&["op*/x".into()], "operators"));
        assert!(!includes_under(&["target/**".into()], "operators"));
        assert!(!includes_under(&["operators".into()], "operators"));
    }

    #[test]
    fn paths_are_checked_against_roots_and_the_surface() {
        let p = policy(&["target/**", "operators/**"], &["target/secret/**"]);
        assert_eq!(check_path("/target/a.txt", &p).unwrap(), "target/a.txt");
        assert_eq!(
            check_path("operators/policy.md", &p).unwrap(),
            "operators/policy.md"
        );
        let err = |path: &str, p: &Policy| check_path(path, p).unwrap_err();
        assert_eq!(
            err("target/../keys/x", &p),
            "not a clean relative path (no empty, `.` or `..` segments)"
        );
        assert_eq!(
            err("target//a", &p),
            "not a clean relative path (no empty, `.` or `..` segments)"
        );
        assert_eq!(
            err("target/.git/config", &p),
            "a `.git` path (nested repositories are not allowed)"
        );
        assert_eq!(
            err("evaluator/tasks/x", &p),
            "outside the editable roots (target/, operators/)"
        );
        assert_eq!(
            err("target", &p),
            "outside the editable roots (target/, operators/)"
        );
        assert_eq!(
            err("operators/mutate.wasm", &p),
            "a WebAssembly component (.wasm) is binary and cannot be edited as text"
        );
        assert_eq!(
            err("operators/manifest.json", &p),
            "framework-owned (`operators/manifest.json`)"
        );
        assert_eq!(
            err("target/secret/k", &p),
            "outside the surface: excluded by `target/secret/**`"
        );
        let narrow = policy(&["target/params.json"], &[]);
        assert_eq!(
            err("target/agent.toml", &narrow),
            "outside the surface: matches no include (`target/params.json`)"
        );
    }

    #[test]
    fn replace_once_needs_exactly_one_match_and_deletes_whole_lines() {
        assert_eq!(
            replace_once("a\nb\nc\n", "b", "B1\nB2").unwrap(),
            ("a\nB1\nB2\nc\n".into(), 2)
        );
        assert_eq!(
            replace_once("a\nb\nc\n", "b", "").unwrap(),
            ("a\nc\n".into(), 2)
        );
        assert_eq!(
            replace_once("x b\nc", "b", "").unwrap(),
            ("x \nc".into(), 1)
        );
        assert_eq!(
            replace_once("a\nb\na\n", "a", "z").unwrap_err(),
            "the SEARCH text occurs 2 times; add surrounding lines to make it unique"
        );
        assert!(
            replace_once("a", "q", "z")
                .unwrap_err()
                .starts_with("the SEARCH text was not found")
        );
    }

    #[test]
    fn apply_edits_files_and_reports_each_block() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("target")).unwrap();
        std::fs::write(d.path().join("target/p.txt"), "one\ntwo\n").unwrap();
        std::fs::write(d.path().join("target/bin.dat"), [0u8, 159, 146]).unwrap();
        let mut p = policy(&["target/**"], &[]);
        p.max_files = Some(2);
        let parsed = parse(
            "<<<<<<< SEARCH target/p.txt\ntwo\n=======\n2\n>>>>>>> REPLACE\n\
             <<<<<<< WRITE target/sub/new.txt\nhello\n>>>>>>> END\n\
             <<<<<<< WRITE target/third.txt\nx\n>>>>>>> END\n\
             <<<<<<< SEARCH target/p.txt\none\n=======\n1\n>>>>>>> REPLACE\n\
             <<<<<<< SEARCH target/missing.txt\nx\n=======\ny\n>>>>>>> REPLACE\n\
             <<<<<<< WRITE target/bin.dat\nx\n>>>>>>> END\n\
             <<<<<<< WRITE operators/x.md\nx\n>>>>>>> END\n\
             <<<<<<< WRITE target/sub/new.txt\nhello\n>>>>>>> END\n",
        );
        let mut changed = vec![];
        let out = apply(&parsed.blocks, d.path(), &p, &mut changed);
        let lines: Vec<String> = out.iter().map(Outcome::line).collect();
        assert_eq!(
            lines,
            vec![
                "applied (replace) target/p.txt: replaced 1 line(s) at line 2 with 1 line(s)",
                "applied (write) target/sub/new.txt: created the file (1 line(s))",
                "refused (write) target/third.txt: this proposal already changes 2 files (max_files)",
                "applied (replace) target/p.txt: replaced 1 line(s) at line 1 with 1 line(s)",
                "refused (replace) target/missing.txt: does not exist (create it with a WRITE block)",
                "refused (write) target/bin.dat: a binary file; only text files can be edited",
                "refused (write) operators/x.md: outside the surface: matches no include (`target/**`)",
                "refused (write) target/sub/new.txt: the edit changes nothing",
            ]
        );
        assert_eq!(changed, vec!["target/p.txt", "target/sub/new.txt"]);
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/p.txt")).unwrap(),
            "1\n2\n"
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/sub/new.txt")).unwrap(),
            "hello\n"
        );
        assert!(!d.path().join("target/third.txt").exists());
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("target")).unwrap();
        std::fs::create_dir_all(d.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(d.path().join("elsewhere"), d.path().join("target/link"))
            .unwrap();
        let parsed = parse("<<<<<<< WRITE target/link/x\nx\n>>>>>>> END\n");
        let out = apply(
            &parsed.blocks,
            d.path(),
            &policy(&["target/**"], &[]),
            &mut vec![],
        );
        assert_eq!(out[0].message, "the path goes through a symbolic link");
        assert!(!d.path().join("elsewhere/x").exists());
    }

    #[test]
    fn the_listing_marks_access_and_spends_a_budget() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("target/sub")).unwrap();
        std::fs::write(d.path().join("target/a.txt"), "abcdef\n").unwrap();
        std::fs::write(d.path().join("target/sub/b.txt"), "bbb").unwrap();
        std::fs::write(d.path().join("target/agent.wasm"), [0u8, 97, 115, 109]).unwrap();
        std::fs::write(d.path().join("target/z.txt"), "zz").unwrap();
        let files = list_files(d.path(), "target", 100);
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "target/a.txt",
                "target/agent.wasm",
                "target/sub/b.txt",
                "target/z.txt"
            ]
        );
        let p = policy(&["target/*.txt"], &[]);
        assert_eq!(
            files_context(&files, &p, 9),
            "--- file: target/a.txt (editable) ---\nabcdef\n--- end of target/a.txt ---\n\
             --- file: target/agent.wasm (4 bytes, binary; not editable as text) ---\n\
             --- file: target/sub/b.txt (read-only) ---\nbb\n[... 1 more characters not shown]\n--- end of target/sub/b.txt ---\n\
             --- file: target/z.txt (editable, 2 bytes; content not shown: context budget spent) ---\n"
        );
        assert_eq!(list_files(d.path(), "target", 2).len(), 2);
        assert_eq!(files_context(&[], &p, 10), "(no files)\n");
    }

    #[test]
    fn cut_marks_what_it_drops() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcdé", 2), "ab [... 3 more characters]");
    }
}
