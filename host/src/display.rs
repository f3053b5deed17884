//! Text that evolved code or a candidate tree chose, made safe to print on a terminal.
//!
//! File names in a candidate tree, operator notes, gate reasons, annotations, operator
//! stderr, task names and archive fields are all written by the code being evolved (or by
//! a model it asked). Printed raw, a newline in a file name prints a line of its own
//! (`modified evaluator/task-set.json`), a carriage return moves back over the line so far
//! and overwrites it (`verify: ok`), an escape sequence recolours or clears the screen,
//! and a bidi override shows `target/\u{202E}fdp.exe` as `target/exe.pdf`. So every print
//! site of such text goes through one of these functions:
//!
//! - [`text`]: one line of free text (a reason, a note, a genid, a JSON rendering);
//! - [`lines`]: multi-line free text (operator stderr), one escaped line at a time;
//! - [`path`]: a file name, quoted the way git quotes it (`core.quotePath`);
//! - [`patch`]: a unified diff, line by line, keeping its tabs;
//! - [`shell`]: a word of a command the user is told to run (a workspace path in a hint).
//!
//! `--json` output needs none of this: serde_json escapes control characters, and a
//! program reads it, not a terminal.

use std::borrow::Cow;

/// Whether `c` is a Unicode bidi formatting character: the embeddings and overrides
/// (U+202A–U+202E), the isolates (U+2066–U+2069), the marks (U+200E, U+200F and the
/// Arabic letter mark U+061C). Each reorders or hides the text around it without showing
/// itself, which is what makes `exe.pdf` out of `\u{202E}fdp.exe`.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` is shown as an escape instead of itself: a control character (C0,
/// including newline, carriage return, tab and ESC; DEL; C1), a bidi formatting character,
/// or one of the two Unicode line and paragraph separators (U+2028, U+2029), which some
/// terminals and pagers break a line at.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `s` as one line, every character [`needs_escape`] names written as a visible escape:
/// `\n`, `\r`, `\t`; `\xNN` for the other ASCII controls (`\x1b` for ESC, `\x7f` for DEL);
/// `\u{XXXX}` for the rest (`\u{202E}`, `\u{85}`). Borrowed when nothing needed escaping.
///
/// A backslash is left as it is: free text stays readable, and a backslash alone can
/// neither break a line nor move the cursor, so a literal `\n` in a note is only text.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` split at its newlines, each line as [`text`] renders it (a carriage return inside
/// a line is escaped like any control, so no line can overwrite another).
pub fn lines(s: &str) -> impl Iterator<Item = Cow<'_, str>> {
    s.split('\n').map(text)
}

/// A unified diff (libgit2's patch text) for a terminal: each line escaped as [`text`]
/// does, except that tabs are kept (code is indented with them, and a tab only moves the
/// cursor forward, so it cannot hide or overwrite anything). The file headers need no
/// more than that: libgit2 already quotes an odd path in them exactly as [`path`] does.
pub fn patch(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&escape(line, true));
    }
    out
}

/// A file name for a terminal, quoted the way git (and libgit2's patch headers) quote one
/// with `core.quotePath` on: a name with a double quote, a backslash, a control character
/// or any byte outside printable ASCII is wrapped in double quotes, with `\a \b \t \n \v
/// \f \r \" \\` for those characters and three octal digits (`\342\200\256` for U+202E)
/// for every other byte. Any other name is printed as it is (spaces included, as git
/// does). Quoting every non-ASCII byte, not only the dangerous ones, is git's default and
/// leaves nothing for a terminal to interpret.
pub fn path(s: &str) -> Cow<'_, str> {
    if !s.bytes().any(needs_quoting) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    out.push('"');
    for b in s.bytes() {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// A word for a POSIX shell command line (a workspace path in a hint such as `evolve
/// repair WS`): as it is when it holds only characters no shell treats specially, else
/// in single quotes, each `'` written `'\''`. The result can still hold a control
/// character: print it through [`text`], which makes that visible.
pub fn shell(s: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("'{}'", s.replace('\'', "'\\''")))
}

/// The bytes that make git quote a path (libgit2's `git_str_quote`).
fn needs_quoting(b: u8) -> bool {
    b == b'"' || b == b'\\' || !(b' '..=b'~').contains(&b)
}

fn escape(s: &str, keep_tabs: bool) -> Cow<'_, str> {
    let keep = |c: char| !needs_escape(c) || (keep_tabs && c == '\t');
    if s.chars().all(keep) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            _ if keep(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            _ if c.is_ascii() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            _ => out.push_str(&format!("\\u{{{:X}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every character a terminal would act on instead of showing.
    fn raw_controls(s: &str) -> Vec<char> {
        s.chars().filter(|c| needs_escape(*c)).collect()
    }

    #[test]
    fn text_escapes_c0_del_c1_and_the_line_separators() {
        assert_eq!(text("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(text("\x1b[2Jclear"), "\\x1b[2Jclear");
        assert_eq!(text("nul\0 bel\x07 del\x7f"), "nul\\x00 bel\\x07 del\\x7f");
        assert_eq!(text("c1 \u{85} \u{9b}31m"), "c1 \\u{85} \\u{9B}31m");
        assert_eq!(text("ls\u{2028}ps\u{2029}"), "ls\\u{2028}ps\\u{2029}");
    }

    #[test]
    fn text_escapes_every_bidi_formatting_character() {
        let all = [
            '\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
            '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}',
        ];
        for c in all {
            let shown = text(&format!("x{c}y")).into_owned();
            assert_eq!(shown, format!("x\\u{{{:X}}}y", u32::from(c)));
            assert!(raw_controls(&shown).is_empty(), "{shown:?}");
        }
        assert_eq!(text("target/\u{202E}fdp.exe"), "target/\\u{202E}fdp.exe");
    }

    #[test]
    fn plain_text_is_borrowed_unchanged_even_when_not_ascii() {
        for s in [
            "gen 3: gate keep: better",
            "naïve café → 0.5 · 日本語",
            "a\\nb",
            "",
        ] {
            assert!(matches!(text(s), Cow::Borrowed(b) if b == s), "{s:?}");
        }
    }

    #[test]
    fn lines_escape_each_line_so_a_carriage_return_cannot_overwrite_one() {
        let got: Vec<String> = lines("ok\nfake\rverify: ok\n\x1b[1Ared")
            .map(Cow::into_owned)
            .collect();
        assert_eq!(got, ["ok", "fake\\rverify: ok", "\\x1b[1Ared"]);
    }

    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        assert_eq!(path("target/a.txt"), "target/a.txt");
        assert_eq!(path("target/a b.txt"), "target/a b.txt");
        assert_eq!(
            path("target/x\nmodified evaluator/task-set.json"),
            "\"target/x\\nmodified evaluator/task-set.json\""
        );
        assert_eq!(path("t/a\"b\\c\td\re"), "\"t/a\\\"b\\\\c\\td\\re\"");
        assert_eq!(path("t/\x07\x08\x0b\x0c"), "\"t/\\a\\b\\v\\f\"");
        assert_eq!(path("t/\x1b\x7f"), "\"t/\\033\\177\"");
        assert_eq!(path("t/\u{202E}fdp.exe"), "\"t/\\342\\200\\256fdp.exe\"");
        assert_eq!(path("t/é"), "\"t/\\303\\251\"");
    }

    /// The same quoting git itself prints, when git is installed.
    #[test]
    fn path_quoting_agrees_with_git() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(dir.path())
                .output()
        };
        if git(&["init", "-q"]).is_err() {
            eprintln!("git not runnable: skipped the comparison with git");
            return;
        }
        let name = "we\"ird \\ name\t\r\u{202E}fdp.exe\u{7f}é";
        std::fs::write(dir.path().join(name), "x\n").unwrap();
        let out = git(&["-c", "core.quotePath=true", "ls-files", "--others"]).unwrap();
        let listed = String::from_utf8(out.stdout).unwrap();
        assert_eq!(listed.trim_end_matches('\n'), path(name));
    }

    #[test]
    fn shell_words_are_quoted_only_when_a_shell_would_read_them_differently() {
        assert_eq!(shell("ws"), "ws");
        assert_eq!(shell("../runs/ws-2.1"), "../runs/ws-2.1");
        assert!(matches!(shell("ws"), Cow::Borrowed(_)));
        assert_eq!(shell("my ws"), "'my ws'");
        assert_eq!(shell("it's"), "'it'\\''s'");
        assert_eq!(shell("$HOME;rm"), "'$HOME;rm'");
        assert_eq!(shell(""), "''");
    }

    #[test]
    fn a_patch_keeps_its_lines_and_tabs_and_escapes_the_rest() {
        let p =
            "diff --git \"a/t/x\\ny\" \"b/t/x\\ny\"\n@@ -1 +1 @@\n-\told\n+new\r\x1b[2K\u{202E}\n";
        assert_eq!(
            patch(p),
            "diff --git \"a/t/x\\ny\" \"b/t/x\\ny\"\n@@ -1 +1 @@\n-\told\n+new\\r\\x1b[2K\\u{202E}\n"
        );
        assert_eq!(patch(""), "");
    }
}
