//! Seeds and task sets from anywhere: a local directory or a git repository.
//!
//! `evolve init --seed PATH|GIT_URL[@REV]` and the recipe's `target: {git: URL, rev: REV}`
//! (docs/seeds.md, "Seeds from git"). A git source is cloned with the `git` CLI once, at
//! init; the revision is resolved to its commit, and that commit is what the normalized
//! recipe in `gen/0` records (`target.rev`, and `URL@COMMIT` for a dataset). The files are
//! then frozen into generation 0 like any other target, so a later run needs neither the
//! network nor the repository.
//!
//! A source is a *seed layout* when it has `seed.toml` and `target/` (the built-in seeds'
//! layout, `tasks/` optional); else, for a git repository, its root must be a target
//! (`agent.toml`). The tree is read by the same hostile-tree checks as `target.path`
//! (regular files only: a link anywhere, pointing in or out, is refused).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// A git source as written: the URL and the revision asked for (`None`: `HEAD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    pub url: String,
    pub rev: Option<String>,
}

/// Whether `s` names a git repository rather than a local path: a URL with a scheme git
/// speaks, or scp-like `user@host:path`.
pub fn is_git_url(s: &str) -> bool {
    const SCHEMES: [&str; 6] = [
        "file://",
        "https://",
        "http://",
        "ssh://",
        "git://",
        "git+ssh://",
    ];
    if SCHEMES.iter().any(|p| s.starts_with(p)) {
        return true;
    }
    // `git@github.com:owner/repo.git`: a user, a host, a colon before any slash.
    match (s.find('@'), s.find(':'), s.find('/')) {
        (Some(at), Some(colon), slash) => at < colon && slash.is_none_or(|sl| colon < sl),
        _ => false,
    }
}

/// Split `GIT_URL[@REV]`. The revision is what follows the last `@`, when that part has
/// no `/` or `:` (so `git@host:repo` and `https://user@host/repo` keep their `@`).
pub fn parse_git(s: &str) -> GitSource {
    if let Some(at) = s.rfind('@') {
        let (url, rev) = (&s[..at], &s[at + 1..]);
        if !rev.is_empty() && !rev.contains(['/', ':']) && is_git_url(url) {
            return GitSource {
                url: url.to_string(),
                rev: Some(rev.to_string()),
            };
        }
    }
    GitSource {
        url: s.to_string(),
        rev: None,
    }
}

/// A checked-out revision of a git source.
#[derive(Debug)]
pub struct Checkout {
    /// The full commit the revision resolved to.
    pub commit: String,
    /// The work tree (removed when the process's last user drops it).
    dir: tempfile::TempDir,
}

impl Checkout {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

/// Clone `src` and check out its revision, once per process and (URL, revision): the
/// target and the task set of one seed share a clone. Errors name the URL and show
/// git's last line.
pub fn checkout(src: &GitSource) -> Result<Arc<Checkout>, String> {
    let key = (src.url.clone(), src.rev.clone());
    let clones = clones();
    if let Some(done) = clones.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(done.clone());
    }
    let made = Arc::new(clone(src)?);
    clones
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, made.clone());
    Ok(made)
}

type Clones = Mutex<HashMap<(String, Option<String>), Arc<Checkout>>>;

fn clones() -> &'static Clones {
    static CLONES: OnceLock<Clones> = OnceLock::new();
    CLONES.get_or_init(Mutex::default)
}

/// Remove the clones made so far (once their files are read): a static is never dropped,
/// so without this every clone would outlive the process in the temporary directory.
pub fn forget_clones() {
    clones().lock().unwrap_or_else(|p| p.into_inner()).clear();
}

fn git(dir: Option<&Path>) -> Command {
    let mut c = Command::new("git");
    if let Some(d) = dir {
        c.arg("-C").arg(d);
    }
    // Never a password prompt or an editor: init is not interactive, and a prompt would
    // hang it. No user or system config changes what is fetched or checked out.
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null());
    c
}

/// git's reason: its first `fatal:` or `error:` line (the advice after it, "Please make
/// sure you have the correct access rights…", says nothing about this URL), else its last
/// non-empty line of stderr, else the exit status.
fn last_line(out: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find(|l| l.starts_with("fatal:") || l.starts_with("error:"))
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| format!("git exited with {}", out.status))
}

fn clone(src: &GitSource) -> Result<Checkout, String> {
    let dir = tempfile::Builder::new()
        .prefix("evolve-seed-")
        .tempdir()
        .map_err(|e| format!("cannot make a directory to clone {} into: {e}", src.url))?;
    let out = git(None)
        .args(["clone", "--quiet", "--no-checkout", "--"])
        .arg(&src.url)
        .arg(dir.path())
        .output()
        .map_err(|e| {
            format!(
                "cannot run `git` to clone {}: {e} (is git installed?)",
                src.url
            )
        })?;
    if !out.status.success() {
        return Err(format!("cannot clone {}: {}", src.url, last_line(&out)));
    }
    let rev = src.rev.as_deref().unwrap_or("HEAD");
    // `--end-of-options`: a revision is never an option, whatever it starts with.
    let out = git(Some(dir.path()))
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .map_err(|e| {
            format!(
                "cannot run `git rev-parse` in the clone of {}: {e}",
                src.url
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "{} has no revision `{rev}` (a branch, tag or commit of the repository was expected)",
            src.url
        ));
    }
    let commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = git(Some(dir.path()))
        .args([
            "-c",
            "advice.detachedHead=false",
            "checkout",
            "--quiet",
            "--detach",
        ])
        .arg(&commit)
        .output()
        .map_err(|e| format!("cannot run `git checkout` in the clone of {}: {e}", src.url))?;
    if !out.status.success() {
        return Err(format!(
            "cannot check out {commit} of {}: {}",
            src.url,
            last_line(&out)
        ));
    }
    Ok(Checkout { commit, dir })
}

/// What a source directory holds: a seed layout's `target/` and `tasks/`, or (`bare`) a
/// directory that is itself the target.
#[derive(Debug, Clone)]
pub struct Layout {
    pub target: PathBuf,
    pub tasks: Option<PathBuf>,
}

/// The seed layout of `root`, if it has one (`seed.toml` and a `target/` directory).
pub fn seed_layout(root: &Path) -> Option<Layout> {
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !is_file(&root.join("seed.toml")) || !is_dir(&root.join("target")) {
        return None;
    }
    let tasks = root.join("tasks");
    Some(Layout {
        target: root.join("target"),
        tasks: is_dir(&tasks).then_some(tasks),
    })
}

/// The target directory of a cloned repository: its seed layout's `target/`, else its
/// root when that holds `agent.toml`.
pub fn git_target(src: &GitSource, co: &Checkout) -> Result<PathBuf, String> {
    if let Some(layout) = seed_layout(co.root()) {
        return Ok(layout.target);
    }
    if std::fs::symlink_metadata(co.root().join("agent.toml")).is_ok_and(|m| m.is_file()) {
        return Ok(co.root().to_path_buf());
    }
    Err(format!(
        "{} at {} is not a seed: expected seed.toml with target/ (and optionally tasks/), as the built-in seeds have, or an agent.toml at the repository's root",
        src.url, co.commit
    ))
}

/// The task directory of a cloned repository: its seed layout's `tasks/`.
pub fn git_tasks(src: &GitSource, co: &Checkout) -> Result<PathBuf, String> {
    match seed_layout(co.root()) {
        Some(Layout { tasks: Some(t), .. }) => Ok(t),
        _ => Err(format!(
            "{} at {} has no task set: expected seed.toml with target/ and tasks/ (the built-in seeds' layout)",
            src.url, co.commit
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_revisions_are_told_apart_from_paths() {
        assert!(is_git_url("file:///tmp/repo"));
        assert!(is_git_url("https://example.org/a/b.git"));
        assert!(is_git_url("git@example.org:a/b.git"));
        assert!(!is_git_url("./my_agent"));
        assert!(!is_git_url("/abs/dir"));
        assert!(!is_git_url("dir/with@at:colon"));
        assert_eq!(
            parse_git("https://example.org/a/b.git@v1.2"),
            GitSource {
                url: "https://example.org/a/b.git".into(),
                rev: Some("v1.2".into())
            }
        );
        assert_eq!(parse_git("git@example.org:a/b.git").rev, None);
        assert_eq!(parse_git("https://u@example.org/a/b").rev, None);
        assert_eq!(
            parse_git("git@example.org:a/b.git@main").rev.as_deref(),
            Some("main")
        );
    }
}
