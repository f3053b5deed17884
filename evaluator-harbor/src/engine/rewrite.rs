//! Path rewriting for the local engine: the virtual container paths (`/app`, `/logs/...`,
//! `/tests`, `/solution`) become the trial's host folders in scripts and environment values.
//!
//! A prefix matches only as a whole path: preceded by start of text or a character that
//! cannot be part of a path (whitespace, quote, `=`, `:`, `;`, `(`, `,`, `>`, `<`, `|`, `&`,
//! `` ` ``, `$(`), and followed by end, `/` or such a character. Longest prefix wins.
//! Known limits (documented): paths built at run time, paths in binaries, `cd /; cat app/x`.

use std::path::{Path, PathBuf};

/// A list of (virtual prefix, host path), longest prefix first.
#[derive(Debug, Clone)]
pub struct PathMap {
    pairs: Vec<(String, String)>,
}

fn boundary_before(c: char) -> bool {
    c.is_whitespace() || "\"'=:;(,<>|&`{[".contains(c)
}

fn boundary_after(c: char) -> bool {
    c == '/' || c.is_whitespace() || "\"'=:;),<>|&`}]\\".contains(c)
}

impl PathMap {
    pub fn new(mut pairs: Vec<(String, PathBuf)>) -> PathMap {
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.0 == b.0);
        PathMap {
            pairs: pairs
                .into_iter()
                .map(|(v, h)| (v, h.to_string_lossy().into_owned()))
                .collect(),
        }
    }

    /// Rewrite every whole-path occurrence of a virtual prefix in `text`.
    pub fn rewrite(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let bytes = text.as_bytes();
        'outer: while i < text.len() {
            if bytes[i] == b'/' {
                let prev_ok = i == 0 || text[..i].chars().next_back().is_some_and(boundary_before);
                if prev_ok {
                    for (v, h) in &self.pairs {
                        if text[i..].starts_with(v.as_str()) {
                            let after = text[i + v.len()..].chars().next();
                            if after.is_none_or(boundary_after) {
                                out.push_str(h);
                                i += v.len();
                                continue 'outer;
                            }
                        }
                    }
                }
            }
            let c = text[i..].chars().next().unwrap_or('\0');
            out.push(c);
            i += c.len_utf8().max(1);
        }
        out
    }

    /// Map an environment value that *is* a virtual path (or starts with one).
    pub fn map_value(&self, v: &str) -> String {
        self.rewrite(v)
    }
}

/// Copy `src` to `dst` (created), rewriting text files (UTF-8, no NUL) through `map`.
/// Symlinks are never followed; those escaping the tree are refused.
pub fn copy_rewritten(src: &Path, dst: &Path, map: &PathMap) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for ent in std::fs::read_dir(src)? {
        let ent = ent?;
        let from = ent.path();
        let to = dst.join(ent.file_name());
        let meta = std::fs::symlink_metadata(&from)?;
        let ft = meta.file_type();
        if ft.is_dir() {
            copy_rewritten(&from, &to, map)?;
        } else if ft.is_symlink() {
            let t = std::fs::read_link(&from)?;
            if t.is_absolute() {
                return Err(std::io::Error::other(format!(
                    "absolute symlink {} refused",
                    from.display()
                )));
            }
            std::os::unix::fs::symlink(t, &to)?;
        } else if ft.is_file() {
            let bytes = std::fs::read(&from)?;
            match std::str::from_utf8(&bytes) {
                Ok(s) if !s.contains('\0') => std::fs::write(&to, map.rewrite(s))?,
                _ => std::fs::write(&to, &bytes)?,
            }
            std::fs::set_permissions(&to, meta.permissions())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_whole_paths_only() {
        let m = PathMap::new(vec![
            ("/logs".into(), PathBuf::from("/t/logs")),
            ("/logs/verifier".into(), PathBuf::from("/t/v")),
            ("/app".into(), PathBuf::from("/t/app")),
        ]);
        assert_eq!(
            m.rewrite(
                "echo 1 > /logs/verifier/reward.txt; cat /app/x \"/app\" /apple /x/app cd=/app"
            ),
            "echo 1 > /t/v/reward.txt; cat /t/app/x \"/t/app\" /apple /x/app cd=/t/app"
        );
        assert_eq!(m.rewrite("/logs"), "/t/logs");
        assert_eq!(m.rewrite("$(cat /app/a)é"), "$(cat /t/app/a)é");
    }
}
