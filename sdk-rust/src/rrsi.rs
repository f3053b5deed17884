//! Regularized recursive self-improvement (RRSI): the acceptance rules as pure
//! functions, shared by `validate/rrsi_screen`, `gate/rrsi`, `record/rrsi_component`
//! and `mutate/rrsi` (docs/rrsi.md has the method; the golden tests below pin it).
//!
//! * **Floor.** A candidate is admissible only if `score ≥ S* − δ`, where `S*`
//!   ([`best_certified`]) is the best certified score of a kept row of the archive view.
//!   Kept rows never leave the archive, so `S*` is monotone.
//! * **Cost rule** ([`admit`]). With `ΔS = score − incumbent score` and `ΔC = cost −
//!   incumbent cost`: if `ΔS > δ`, require `ΔC ≤ β0 + β1·ΔS`; otherwise require
//!   `w_s·ΔS − w_c·ΔC + w_n·novelty > 0`. A missing cost (or a cost of 0) on either
//!   side makes `ΔC = 0` and is recorded in the admission. Scores are in `[0, 1]`.
//! * **Novelty** ([`novelty`]). The structural components the candidate's edit touches
//!   that never had an accepted (kept) edit.
//! * **Components** ([`classify`]). A changed file keeps its claimed component only
//!   when its diff carries a signal for it (its path or a changed line names the
//!   component); otherwise it is reclassified. A diff whose changed lines are all string
//!   literals or comments is a prompt edit whatever the claim.
//! * **Edit budget** ([`edit_budget`]). `b_t = ⌈b_min + (b_max − b_min)·½(1 + cos(π t/T))⌉`
//!   rounded half-even to 9 decimals before the ceiling; integer bounds in `1..=2^53`.
//! * **Screen** ([`find_leaks`]). Protected strings appearing as whole tokens.
//! * **History** ([`history`]). The per-edit ledger derived from the archive's
//!   `x_rrsi_components` annotations: yield `max ΔS` per component over
//!   `t − t_i ≤ n_prune`, prune targets, `U_t = K ∖ T_t`, the stall flag, and the
//!   unmeasured attempts (counted, never tried or yielding).
//!
//! `testdata/rrsi/vectors.json` holds golden vectors an independent oracle
//! (`testdata/rrsi/oracle.py`) computed from the specification; `rrsi/golden.rs` runs them.
//!
//! Every function validates its numbers and returns a typed [`RrsiError`]: nothing here
//! panics on input, and no NaN or infinity reaches a result.

use crate::edits::glob_match;
use crate::types::{ArchiveRow, ArchiveView, GenerationStatus, Verdict};
use std::fmt;

/// The record annotation that carries a generation's component tags (a JSON array of
/// [`Component::name`]s). `x_` keys pass the host's annotation allowlist.
pub const ANNOTATION: &str = "x_rrsi_components";

/// What an RRSI rule refuses, naming the input and what was expected.
#[derive(Debug, Clone, PartialEq)]
pub enum RrsiError {
    /// A number that must be finite is NaN or infinite.
    NotFinite { what: String },
    /// A number that must be ≥ 0 (or > 0) is not.
    Negative {
        what: String,
        expected: &'static str,
    },
    /// A value outside its documented range.
    OutOfRange { what: String, expected: String },
    /// `b_min > b_max`.
    InvertedBounds { b_min: f64, b_max: f64 },
    /// An intermediate result left the finite range (or the integer range).
    Overflow { what: String },
    /// Text that does not have the expected shape (a patch, an annotation).
    Malformed { what: String, expected: String },
}

impl fmt::Display for RrsiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RrsiError::NotFinite { what } => write!(f, "{what} must be a finite number"),
            RrsiError::Negative { what, expected } => write!(f, "{what} must be {expected}"),
            RrsiError::OutOfRange { what, expected } => write!(f, "{what} must be {expected}"),
            RrsiError::InvertedBounds { b_min, b_max } => write!(
                f,
                "edit budget bounds are inverted: b_min {b_min} must be <= b_max {b_max}"
            ),
            RrsiError::Overflow { what } => {
                write!(f, "{what} overflows (the inputs are too large)")
            }
            RrsiError::Malformed { what, expected } => write!(f, "{what}: expected {expected}"),
        }
    }
}

impl std::error::Error for RrsiError {}

type Result<T> = std::result::Result<T, RrsiError>;

fn finite(what: impl Into<String>, x: f64) -> Result<f64> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(RrsiError::NotFinite { what: what.into() })
    }
}

fn non_negative(what: &str, x: f64) -> Result<f64> {
    let x = finite(what, x)?;
    if x < 0.0 {
        return Err(RrsiError::Negative {
            what: what.into(),
            expected: ">= 0",
        });
    }
    Ok(x)
}

/// An intermediate result, refused when it left the finite range.
fn checked(what: &str, x: f64) -> Result<f64> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(RrsiError::Overflow { what: what.into() })
    }
}

// ----------------------------------------------------------------------------------
// Components
// ----------------------------------------------------------------------------------

/// What part of the agent an edit changed. The first four are the structural
/// components novelty counts; `Prompt` and `Other` are edits to none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    ClientTool,
    Skill,
    Memory,
    Subagent,
    /// Only wording changed: string literals, comments, or prose without a signal.
    Prompt,
    /// Code or configuration with no structural signal (e.g. a numeric parameter).
    Other,
}

impl Component {
    /// The structural components, in the fixed order reclassification prefers.
    pub const STRUCTURAL: [Component; 4] = [
        Component::ClientTool,
        Component::Skill,
        Component::Memory,
        Component::Subagent,
    ];
    /// Every class, in order.
    pub const ALL: [Component; 6] = [
        Component::ClientTool,
        Component::Skill,
        Component::Memory,
        Component::Subagent,
        Component::Prompt,
        Component::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Component::ClientTool => "client_tool",
            Component::Skill => "skill",
            Component::Memory => "memory",
            Component::Subagent => "subagent",
            Component::Prompt => "prompt",
            Component::Other => "other",
        }
    }

    pub fn parse(name: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn is_structural(self) -> bool {
        Component::STRUCTURAL.contains(&self)
    }

    /// Words (whole tokens, or `_`/`-` separated parts of one) that signal the component.
    fn keywords(self) -> &'static [&'static str] {
        match self {
            Component::ClientTool => &["tool", "tools", "client_tool", "client_tools"],
            Component::Skill => &["skill", "skills"],
            Component::Memory => &["memory", "memories"],
            Component::Subagent => &[
                "subagent",
                "subagents",
                "sub_agent",
                "sub_agents",
                "sub-agent",
                "sub-agents",
            ],
            Component::Prompt | Component::Other => &[],
        }
    }

    /// Whether `text` holds a token (or a `_`/`-` part of one) naming this component.
    fn named_in(self, text: &str) -> bool {
        let words = self.keywords();
        tokens(text).any(|t| {
            words.contains(&t.as_str()) || t.split(['_', '-']).any(|part| words.contains(&part))
        })
    }
}

/// Lower-cased runs of `[A-Za-z0-9_-]`.
fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
}

/// One file of a unified diff: its path and its removed and added lines.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FileDiff {
    pub path: String,
    pub removed: Vec<String>,
    pub added: Vec<String>,
}

impl FileDiff {
    fn changed(&self) -> impl Iterator<Item = &String> {
        self.removed.iter().chain(&self.added)
    }
}

/// Split a git-style unified diff (the host's `candidate-diff.patch`) into files.
/// Hunks are read by their declared line counts, so `--- x` inside a hunk is a removed
/// line; a file with only a `Binary files … differ` line has no changed lines; the
/// host's `[diff truncated …]` marker ends the text. A malformed hunk header is an error.
pub fn parse_patch(patch: &str) -> Result<Vec<FileDiff>> {
    let mut files: Vec<FileDiff> = Vec::new();
    let mut lines = patch.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            files.push(FileDiff {
                path: git_header_path(rest).unwrap_or_default(),
                ..FileDiff::default()
            });
        } else if let Some(p) = line.strip_prefix("+++ ") {
            let file = current(&mut files);
            if let Some(p) = p.strip_prefix("b/") {
                file.path = p.to_string();
            }
        } else if let Some(p) = line.strip_prefix("--- a/") {
            let file = current(&mut files);
            if file.path.is_empty() {
                file.path = p.to_string();
            }
        } else if line.starts_with("@@") {
            let (mut old, mut new) = hunk_counts(line).ok_or_else(|| RrsiError::Malformed {
                what: format!("patch line {}", i + 1),
                expected: "a hunk header `@@ -a[,b] +c[,d] @@`".into(),
            })?;
            let file = current(&mut files);
            while old + new > 0 {
                let Some((_, l)) = lines.next() else { break };
                match l.as_bytes().first() {
                    Some(b'-') => {
                        file.removed.push(l[1..].to_string());
                        old = old.saturating_sub(1);
                    }
                    Some(b'+') => {
                        file.added.push(l[1..].to_string());
                        new = new.saturating_sub(1);
                    }
                    Some(b'\\') => {}
                    _ => {
                        old = old.saturating_sub(1);
                        new = new.saturating_sub(1);
                    }
                }
            }
        }
    }
    Ok(files)
}

fn current(files: &mut Vec<FileDiff>) -> &mut FileDiff {
    if files.is_empty() {
        files.push(FileDiff::default());
    }
    let n = files.len() - 1;
    &mut files[n]
}

/// The `b/` path of a `diff --git a/X b/Y` header (paths without spaces).
fn git_header_path(rest: &str) -> Option<String> {
    rest.rsplit_once(" b/").map(|(_, p)| p.to_string())
}

/// The old and new line counts of `@@ -a[,b] +c[,d] @@…`.
fn hunk_counts(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count = |r: &str| -> Option<usize> {
        match r.split_once(',') {
            Some((start, n)) => {
                start.parse::<usize>().ok()?;
                n.parse().ok()
            }
            None => r.parse::<usize>().ok().map(|_| 1),
        }
    };
    Some((count(old)?, count(new)?))
}

/// Whether a changed line of code or configuration is a comment or a string literal
/// (alone, or as the value of a `key:` / `key =` pair, with an optional trailing `,` or
/// `;`). A blank line is neither.
pub fn is_literal_or_comment(line: &str) -> bool {
    let t = line.trim();
    if t.is_empty() {
        return false;
    }
    const COMMENTS: [&str; 7] = ["//", "#", "/*", "*", "--", "<!--", ";"];
    if COMMENTS.iter().any(|c| t.starts_with(c)) {
        return true;
    }
    let t = t.trim_end_matches([',', ';']).trim_end();
    if is_string_literal(t) {
        return true;
    }
    // `key: "…"`, `"key": "…"`, `key = "…"`: the value after the first separator
    // outside a quoted key.
    let value = split_key(t).map(str::trim);
    value.is_some_and(is_string_literal)
}

/// The text after a `key:` or `key =` prefix whose key is an identifier or one string.
fn split_key(t: &str) -> Option<&str> {
    let end_of_key = if let Some(q) = t.chars().next().filter(|c| *c == '"' || *c == '\'') {
        closing_quote(t, q)? + 1
    } else {
        t.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))?
    };
    let rest = t[end_of_key..].trim_start();
    rest.strip_prefix(':').or_else(|| rest.strip_prefix('='))
}

/// The byte index of the quote closing the one at index 0, skipping escapes.
fn closing_quote(t: &str, q: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in t.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == q => return Some(i),
            _ => {}
        }
    }
    None
}

/// One complete quoted string and nothing else.
fn is_string_literal(t: &str) -> bool {
    let Some(q) = t.chars().next().filter(|c| matches!(c, '"' | '\'' | '`')) else {
        return false;
    };
    closing_quote(t, q) == Some(t.len() - 1) && t.len() >= 2
}

/// Prose files, whose unsignalled edits are prompt edits.
fn is_prose(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [".md", ".txt", ".rst", ".prompt"]
        .iter()
        .any(|e| lower.ends_with(e))
}

/// Whether the diff of `file` carries a signal for `c`: its path, or one of its
/// changed lines, names the component.
pub fn has_signal(file: &FileDiff, c: Component) -> bool {
    c.named_in(&file.path) || file.changed().any(|l| c.named_in(l))
}

/// The component of one changed file. In code and configuration, a diff whose
/// non-blank changed lines are all literals or comments is a prompt edit, whatever was
/// claimed. Otherwise the claim is kept only when the diff signals it; else the first
/// structural component with a path signal, then the first with a line signal; else a
/// prompt edit for prose files (Markdown, text) and `Other` for the rest. A file with
/// no non-blank changed line (binary, mode-only, whitespace) is `Other`.
pub fn classify_file(file: &FileDiff, claim: Option<Component>) -> Component {
    let mut lines = file.changed().filter(|l| !l.trim().is_empty()).peekable();
    if lines.peek().is_none() {
        return Component::Other;
    }
    if !is_prose(&file.path) && lines.all(|l| is_literal_or_comment(l)) {
        return Component::Prompt;
    }
    if let Some(c) = claim.filter(|c| c.is_structural() && has_signal(file, *c)) {
        return c;
    }
    let by_path = Component::STRUCTURAL
        .into_iter()
        .find(|c| c.named_in(&file.path));
    let by_line = || {
        Component::STRUCTURAL
            .into_iter()
            .find(|c| file.changed().any(|l| c.named_in(l)))
    };
    match by_path.or_else(by_line) {
        Some(c) => c,
        None if is_prose(&file.path) || claim == Some(Component::Prompt) => Component::Prompt,
        None => Component::Other,
    }
}

/// A claimed layout: the first entry whose glob matches a path claims its component.
pub type Layout = [(String, Component)];

/// Classify every file of `patch`: `(path, component)` in patch order.
pub fn classify(patch: &str, layout: &Layout) -> Result<Vec<(String, Component)>> {
    Ok(parse_patch(patch)?
        .iter()
        .map(|f| {
            let claim = layout
                .iter()
                .find(|(glob, _)| glob_match(glob, &f.path))
                .map(|(_, c)| *c);
            (f.path.clone(), classify_file(f, claim))
        })
        .collect())
}

/// The distinct components of a classification, in [`Component::ALL`] order.
pub fn components_of(files: &[(String, Component)]) -> Vec<Component> {
    Component::ALL
        .into_iter()
        .filter(|c| files.iter().any(|(_, f)| f == c))
        .collect()
}

// ----------------------------------------------------------------------------------
// The archive: S*, tags, novelty
// ----------------------------------------------------------------------------------

fn kept(row: &ArchiveRow) -> bool {
    row.verdict == Some(Verdict::Keep)
}

/// S*: the best certified score among kept rows of generation ≤ `until` (all rows with
/// `None`). `None` when no kept row has a score. A non-finite score is an error.
pub fn best_certified_until(archive: &ArchiveView, until: Option<u32>) -> Result<Option<f64>> {
    let mut best: Option<f64> = None;
    for row in archive.rows.iter().filter(|r| kept(r)) {
        if until.is_some_and(|u| row.generation > u) {
            continue;
        }
        if let Some(s) = row.score {
            let s = finite(format!("score of generation {}", row.generation_id), s)?;
            best = Some(best.map_or(s, |b: f64| b.max(s)));
        }
    }
    Ok(best)
}

/// S* over the whole archive view.
pub fn best_certified(archive: &ArchiveView) -> Result<Option<f64>> {
    best_certified_until(archive, None)
}

/// A row's component tags from its [`ANNOTATION`]; `None` when it has none.
pub fn row_components(row: &ArchiveRow) -> Result<Option<Vec<Component>>> {
    let bad = |expected: &str| RrsiError::Malformed {
        what: format!(
            "annotation {ANNOTATION} of generation {}",
            row.generation_id
        ),
        expected: expected.into(),
    };
    let value: serde_json::Value =
        serde_json::from_str(&row.annotations).map_err(|_| bad("a JSON object"))?;
    let Some(tags) = value.get(ANNOTATION) else {
        return Ok(None);
    };
    let list = tags
        .as_array()
        .ok_or_else(|| bad("an array of component names"))?;
    list.iter()
        .map(|t| {
            t.as_str()
                .and_then(Component::parse)
                .ok_or_else(|| bad("client_tool, skill, memory, subagent, prompt or other"))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// The structural components that had a kept edit, according to the annotations.
pub fn accepted_components(archive: &ArchiveView) -> Result<Vec<Component>> {
    let mut out = Vec::new();
    for row in archive.rows.iter().filter(|r| kept(r)) {
        for c in row_components(row)?.unwrap_or_default() {
            if c.is_structural() && !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Novelty: how many structural components of `candidate` never had an accepted edit.
pub fn novelty(candidate: &[Component], accepted: &[Component]) -> u32 {
    Component::STRUCTURAL
        .into_iter()
        .filter(|c| candidate.contains(c) && !accepted.contains(c))
        .count() as u32
}

// ----------------------------------------------------------------------------------
// Floor and cost rule
// ----------------------------------------------------------------------------------

/// δ and the cost rule's coefficients. All finite and ≥ 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// δ, the noise band (`noise_band`).
    pub noise_band: f64,
    pub beta0: f64,
    pub beta1: f64,
    pub w_s: f64,
    pub w_c: f64,
    pub w_n: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            noise_band: 0.0,
            beta0: 0.0,
            beta1: 1.0,
            w_s: 1.0,
            w_c: 1.0,
            w_n: 0.01,
        }
    }
}

impl Params {
    /// Every coefficient finite and ≥ 0.
    pub fn check(&self) -> Result<()> {
        for (what, x) in [
            ("noise_band", self.noise_band),
            ("beta0", self.beta0),
            ("beta1", self.beta1),
            ("w_s", self.w_s),
            ("w_c", self.w_c),
            ("w_n", self.w_n),
        ] {
            non_negative(what, x)?;
        }
        Ok(())
    }
}

/// A measured generation: certified score and cost (`None`: no cost telemetry).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    pub score: f64,
    pub cost: Option<f64>,
}

/// A candidate: its measurement and novelty (0 to 4).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub score: f64,
    pub cost: Option<f64>,
    pub novelty: u32,
}

/// Which branch of the cost rule applied, with its threshold or value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Branch {
    /// `ΔS > δ`: `ΔC` must be ≤ `limit = β0 + β1·ΔS`.
    Improvement { limit: f64 },
    /// `ΔS ≤ δ`: `value = w_s·ΔS − w_c·ΔC + w_n·novelty` must be > 0.
    Tradeoff { value: f64 },
}

/// Everything the rules decided about one candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Admission {
    /// `S* − δ`, when there is an S*.
    pub floor: Option<f64>,
    pub floor_ok: bool,
    pub delta_s: f64,
    pub delta_c: f64,
    /// A cost was missing on either side, so `ΔC` was taken as 0.
    pub cost_missing: bool,
    pub novelty: u32,
    pub branch: Branch,
    pub cost_ok: bool,
    pub admissible: bool,
}

impl Admission {
    /// One line for a gate reason.
    pub fn reason(&self) -> String {
        let floor = match self.floor {
            Some(f) if self.floor_ok => format!("floor ok (>= S*-δ = {f:.6})"),
            Some(f) => format!("below the floor S*-δ = {f:.6}"),
            None => "no certified best yet (no floor)".into(),
        };
        let rule = match self.branch {
            Branch::Improvement { limit } => format!(
                "ΔS {:+.6} > δ: ΔC {:+.6} {} β0+β1·ΔS = {limit:.6}",
                self.delta_s,
                self.delta_c,
                if self.cost_ok { "<=" } else { ">" }
            ),
            Branch::Tradeoff { value } => format!(
                "ΔS {:+.6} <= δ: w_s·ΔS − w_c·ΔC + w_n·novelty = {value:+.6} {} 0 (ΔC {:+.6}, novelty {})",
                self.delta_s,
                if self.cost_ok { ">" } else { "<=" },
                self.delta_c,
                self.novelty
            ),
        };
        let cost = if self.cost_missing {
            "; cost telemetry missing, ΔC taken as 0"
        } else {
            ""
        };
        format!("{floor}; {rule}{cost}")
    }
}

/// A cost: `None` and 0 both mean "no telemetry" (the specification's `ΔC = 0 if either
/// side is falsy`: an archive row cannot tell "free" from "not reported"). A negative or
/// non-finite cost is refused, never read as missing.
fn check_cost(what: &str, c: Option<f64>) -> Result<Option<f64>> {
    Ok(c.map(|c| non_negative(what, c))
        .transpose()?
        .filter(|c| *c != 0.0))
}

/// A score: finite and in `[0, 1]` (a certified score is a mean reward).
fn unit_score(what: &str, x: f64) -> Result<f64> {
    let x = finite(what, x)?;
    if !(0.0..=1.0).contains(&x) {
        return Err(RrsiError::OutOfRange {
            what: what.into(),
            expected: format!("a score in [0, 1], not {x}"),
        });
    }
    Ok(x)
}

/// Apply the floor and the cost rule to `cand` against `inc`, with `s_star` the best
/// certified score (`None`: no floor yet).
pub fn admit(
    p: &Params,
    s_star: Option<f64>,
    inc: &Measured,
    cand: &Candidate,
) -> Result<Admission> {
    p.check()?;
    let s_star = s_star
        .map(|s| unit_score("S* (best certified score)", s))
        .transpose()?;
    let inc_score = unit_score("incumbent score", inc.score)?;
    let score = unit_score("candidate score", cand.score)?;
    let inc_cost = check_cost("incumbent cost", inc.cost)?;
    let cost = check_cost("candidate cost", cand.cost)?;
    if cand.novelty > Component::STRUCTURAL.len() as u32 {
        return Err(RrsiError::OutOfRange {
            what: "novelty".into(),
            expected: "an integer in 0..=4 (the structural components)".into(),
        });
    }
    let delta_s = checked("ΔS (candidate − incumbent score)", score - inc_score)?;
    let (delta_c, cost_missing) = match (cost, inc_cost) {
        (Some(c), Some(i)) => (c - i, false),
        _ => (0.0, true),
    };
    let floor = s_star
        .map(|s| checked("the floor S* − δ", s - p.noise_band))
        .transpose()?;
    let floor_ok = floor.is_none_or(|f| score >= f);
    let (branch, cost_ok) = if delta_s > p.noise_band {
        let slope = checked("β1·ΔS", p.beta1 * delta_s)?;
        let limit = checked("β0 + β1·ΔS", p.beta0 + slope)?;
        (Branch::Improvement { limit }, delta_c <= limit)
    } else {
        let gain = checked("w_s·ΔS", p.w_s * delta_s)?;
        let cost = checked("w_c·ΔC", p.w_c * delta_c)?;
        let bonus = checked("w_n·novelty", p.w_n * f64::from(cand.novelty))?;
        let value = checked("w_s·ΔS − w_c·ΔC + w_n·novelty", gain - cost + bonus)?;
        (Branch::Tradeoff { value }, value > 0.0)
    };
    Ok(Admission {
        floor,
        floor_ok,
        delta_s,
        delta_c,
        cost_missing,
        novelty: cand.novelty,
        branch,
        cost_ok,
        admissible: floor_ok && cost_ok,
    })
}

/// The outcome of [`choose`]: every candidate's admission, and the winner (`None`:
/// no candidate is admissible, the incumbent stays).
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub winner: Option<usize>,
    pub admissions: Vec<Admission>,
}

/// The first admissible candidate with the highest score, or the incumbent stays.
/// Any invalid candidate makes the whole choice an error naming it.
pub fn choose(
    p: &Params,
    s_star: Option<f64>,
    inc: &Measured,
    cands: &[Candidate],
) -> Result<Choice> {
    let mut admissions = Vec::with_capacity(cands.len());
    for (i, c) in cands.iter().enumerate() {
        let a = admit(p, s_star, inc, c).map_err(|e| in_candidate(i, e))?;
        admissions.push(a);
    }
    let mut winner: Option<usize> = None;
    for (i, a) in admissions.iter().enumerate() {
        // Strictly greater: on a tie the earlier candidate stays the winner.
        if a.admissible && winner.is_none_or(|w| cands[i].score > cands[w].score) {
            winner = Some(i);
        }
    }
    Ok(Choice { winner, admissions })
}

fn in_candidate(i: usize, e: RrsiError) -> RrsiError {
    let name = |w: String| format!("candidate {i}: {w}");
    match e {
        RrsiError::NotFinite { what } => RrsiError::NotFinite { what: name(what) },
        RrsiError::Negative { what, expected } => RrsiError::Negative {
            what: name(what),
            expected,
        },
        RrsiError::OutOfRange { what, expected } => RrsiError::OutOfRange {
            what: name(what),
            expected,
        },
        RrsiError::Overflow { what } => RrsiError::Overflow { what: name(what) },
        other => other,
    }
}

// ----------------------------------------------------------------------------------
// Edit budget
// ----------------------------------------------------------------------------------

/// The cosine schedule's bounds and horizon `T`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub b_min: f64,
    pub b_max: f64,
    pub horizon: i64,
}

/// The largest bound the schedule takes: 2^53, beyond which not every integer is an
/// `f64`, so a configured bound might not be the integer the author wrote.
pub const MAX_BOUND: f64 = 9_007_199_254_740_992.0;

/// One bound of the schedule: an integer in `1..=2^53`.
fn bound(what: &str, b: f64) -> Result<f64> {
    finite(what, b)?;
    if b <= 0.0 {
        return Err(RrsiError::Negative {
            what: what.into(),
            expected: "> 0",
        });
    }
    if b.fract() != 0.0 || b > MAX_BOUND {
        return Err(RrsiError::OutOfRange {
            what: what.into(),
            expected: format!("an integer in 1..=2^53 (9007199254740992), not {b}"),
        });
    }
    Ok(b)
}

/// `x` rounded to 9 decimal places, half to even on an exact tie, as the specification's
/// guard (`round(v, 9)`) does: the exact decimal value of `x` is rounded, not `x·10⁹`
/// (which loses digits above 2^53/10⁹ ≈ 9·10⁶). Rust's fixed-precision formatting is
/// exact and ties to even, and parsing returns the nearest `f64`.
fn round9(x: f64) -> Result<f64> {
    format!("{x:.9}")
        .parse::<f64>()
        .map_err(|_| RrsiError::Overflow {
            what: "the edit budget (rounded to 9 decimals)".into(),
        })
}

/// `b_t = ⌈b_min + (b_max − b_min)·½(1 + cos(π t/T))⌉`, rounded half-even to 9 decimals
/// before the ceiling. `T ≤ 0` gives `b_max`; `t` is clamped to `[0, T]`. Bounds must be
/// integers in `1..=2^53` with `b_min ≤ b_max`.
pub fn edit_budget(t: i64, s: &Schedule) -> Result<u64> {
    let b_min = bound("b_min", s.b_min)?;
    let b_max = bound("b_max", s.b_max)?;
    if b_min > b_max {
        return Err(RrsiError::InvertedBounds { b_min, b_max });
    }
    let raw = if s.horizon <= 0 {
        b_max
    } else {
        let t = t.clamp(0, s.horizon) as f64;
        let phase = std::f64::consts::PI * t / s.horizon as f64;
        b_min + (b_max - b_min) * 0.5 * (1.0 + phase.cos())
    };
    // The bounds are ≤ 2^53, so `raw` and its ceiling are finite and fit a u64.
    let b = round9(raw)?.ceil();
    if !(0.0..=MAX_BOUND).contains(&b) {
        return Err(RrsiError::Overflow {
            what: "the edit budget".into(),
        });
    }
    Ok(b as u64)
}

// ----------------------------------------------------------------------------------
// Leak screen
// ----------------------------------------------------------------------------------

/// One protected string found in a file: its index in the protected list and the
/// 1-based line. Reasons name the index, never the string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    pub path: String,
    pub which: usize,
    pub line: usize,
}

/// Protected strings must have a non-blank character (an empty one would match
/// everything).
pub fn check_protected(protected: &[String]) -> Result<()> {
    match protected.iter().position(|p| p.trim().is_empty()) {
        Some(i) => Err(RrsiError::OutOfRange {
            what: format!("protected string {i}"),
            expected: "a string with a non-blank character".into(),
        }),
        None => Ok(()),
    }
}

fn word_char(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// Whether `needle` occurs in `hay` as a whole token: the characters around it are not
/// letters, digits or `_` (so `5` matches in `y = 5` but not in `15` or `5a`).
pub fn contains_token(hay: &str, needle: &str) -> bool {
    let needle = needle.trim();
    if needle.is_empty() {
        return false;
    }
    hay.match_indices(needle).any(|(i, m)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + m.len()..].chars().next();
        let edge_ok = |c: Option<char>, inner: Option<char>| !(word_char(c) && word_char(inner));
        edge_ok(before, needle.chars().next()) && edge_ok(after, needle.chars().next_back())
    })
}

/// Every protected string found in `text` (the first line of each), in list order.
pub fn find_leaks(path: &str, text: &str, protected: &[String]) -> Vec<Leak> {
    protected
        .iter()
        .enumerate()
        .filter_map(|(which, p)| {
            let line = text.lines().position(|l| contains_token(l, p))?;
            Some(Leak {
                path: path.into(),
                which,
                line: line + 1,
            })
        })
        .collect()
}

// ----------------------------------------------------------------------------------
// Per-edit history
// ----------------------------------------------------------------------------------

/// One attempted edit of the archive: a child row (it has a parent) that carries
/// [`ANNOTATION`], or that stopped before it was measured.
///
/// This is the specification's per-edit ledger, derived from the certified archive
/// instead of kept in a JSONL file of its own (docs/rrsi.md lists the deviation): an
/// edit touching several components fans out to one entry per component, each with the
/// edit's ΔS.
#[derive(Debug, Clone, PartialEq)]
pub struct EditRecord {
    pub generation_id: String,
    pub generation: u32,
    /// The distinct components of the edit (empty: an untagged early stop, whose
    /// components nobody classified).
    pub components: Vec<Component>,
    pub kept: bool,
    pub status: GenerationStatus,
    /// ΔS = score − parent score when the edit was measured; `None` when it was not (a
    /// veto, a failed evaluation, an unscored parent). Always finite.
    pub gain: Option<f64>,
}

impl EditRecord {
    /// Whether the edit has a measurement the tried set and the yield may use.
    pub fn measured(&self) -> bool {
        self.gain.is_some()
    }
}

/// The statuses of an evaluated child. Every other status is a veto or a failure
/// before the measurement: such a row stays unmeasured even when it carries a score
/// (a veto with a measurement attached stays rejected).
fn evaluated(status: GenerationStatus) -> bool {
    matches!(
        status,
        GenerationStatus::Complete | GenerationStatus::PendingGate
    )
}

/// The attempted edits, in archive order. A tagged row is measured when it was
/// evaluated and both it and its parent have a score; a non-finite ΔS is an error.
pub fn edit_records(archive: &ArchiveView) -> Result<Vec<EditRecord>> {
    let mut out = Vec::new();
    for row in &archive.rows {
        let Some(parent_id) = row.parent.as_deref() else {
            continue; // genesis is no edit
        };
        let components = match row_components(row)? {
            Some(mut cs) => {
                cs.sort();
                cs.dedup();
                cs
            }
            None if !evaluated(row.status) => Vec::new(),
            None => continue, // measured but untagged: nothing to attribute it to
        };
        if components.is_empty() && evaluated(row.status) {
            continue; // an evaluated edit that changed no file
        }
        let base = archive
            .rows
            .iter()
            .find(|r| r.generation_id == parent_id)
            .and_then(|p| p.score);
        let gain = match (row.score, base) {
            (Some(score), Some(base)) if evaluated(row.status) => {
                let what = format!("ΔS (score gain) of generation {}", row.generation_id);
                Some(checked(
                    &what,
                    finite(&what, score)? - finite(&what, base)?,
                )?)
            }
            _ => None,
        };
        out.push(EditRecord {
            generation_id: row.generation_id.clone(),
            generation: row.generation,
            components,
            kept: kept(row),
            status: row.status,
            gain,
        });
    }
    Ok(out)
}

/// How many unmeasured records [`History::render`] lists (the latest ones).
pub const RENDER_UNMEASURED: usize = 3;

/// What mutate is told about past edits.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    /// The latest generation in the archive view (`t`).
    pub now: u32,
    /// Per tried component (in [`Component::ALL`] order): `g_t(l)`, the largest ΔS of its
    /// measured edits with `t − t_i ≤ window`; `−∞` when none is that recent.
    pub yields: Vec<(Component, f64)>,
    /// Tried components whose yield is ≤ 0 (`−∞` included): edit them no more.
    pub prune: Vec<Component>,
    /// `U_t = K ∖ T_t`: every component (structural, `prompt` and `other`) with no
    /// measured edit. An attempted but unmeasured component is still untried.
    pub untried: Vec<Component>,
    /// `S_t − S_{t−w} ≤ δ` (only once `t ≥ w`).
    pub stalled: bool,
    /// Edit slots reserved for untried components: `min(slots, |U_t|)` when stalled.
    pub exploration_slots: u32,
    /// Per attempted component: its attempts, measured or not.
    pub attempts: Vec<(Component, u32)>,
    /// Every attempt, measured or not (untagged early stops included).
    pub total_attempts: u32,
    /// The unmeasured records, in archive order.
    pub unmeasured: Vec<EditRecord>,
}

/// Derive the history from the archive view. `window` (`n_prune`) ≥ 1; `noise_band`
/// finite ≥ 0.
pub fn history(archive: &ArchiveView, window: u32, noise_band: f64, slots: u32) -> Result<History> {
    if window == 0 {
        return Err(RrsiError::OutOfRange {
            what: "window".into(),
            expected: "an integer >= 1".into(),
        });
    }
    let delta = non_negative("noise_band", noise_band)?;
    let records = edit_records(archive)?;
    let now = archive.rows.iter().map(|r| r.generation).max().unwrap_or(0);
    let mut yields = Vec::new();
    let mut attempts = Vec::new();
    for c in Component::ALL {
        let with_c = || records.iter().filter(|r| r.components.contains(&c));
        let n = with_c().count() as u32;
        if n > 0 {
            attempts.push((c, n));
        }
        let measured: Vec<(u32, f64)> = with_c()
            .filter_map(|r| r.gain.map(|g| (r.generation, g)))
            .collect();
        if measured.is_empty() {
            continue; // not tried
        }
        // t − t_i ≤ window; generations are ≤ t, so the difference never underflows.
        let y = measured
            .iter()
            .filter(|(g, _)| now - g <= window)
            .map(|(_, gain)| *gain)
            .fold(f64::NEG_INFINITY, f64::max);
        yields.push((c, y));
    }
    let prune = yields
        .iter()
        .filter(|(_, y)| *y <= 0.0)
        .map(|(c, _)| *c)
        .collect();
    let untried: Vec<Component> = Component::ALL
        .into_iter()
        .filter(|c| !yields.iter().any(|(t, _)| t == c))
        .collect();
    let stalled = now >= window && {
        let s_now = best_certified_until(archive, Some(now))?;
        let s_then = best_certified_until(archive, Some(now - window))?;
        match (s_now, s_then) {
            (Some(a), Some(b)) => checked("S_t − S_{t−w}", a - b)? <= delta,
            _ => false,
        }
    };
    let exploration_slots = if stalled {
        slots.min(untried.len() as u32)
    } else {
        0
    };
    let total_attempts = records.len() as u32;
    let unmeasured = records.into_iter().filter(|r| !r.measured()).collect();
    Ok(History {
        now,
        yields,
        prune,
        untried,
        stalled,
        exploration_slots,
        attempts,
        total_attempts,
        unmeasured,
    })
}

impl History {
    /// The components with at least one attempt, measured or not.
    pub fn attempted(&self) -> Vec<Component> {
        self.attempts.iter().map(|(c, _)| *c).collect()
    }

    /// The history as prompt text for mutate.
    pub fn render(&self) -> String {
        let names = |v: &[Component]| {
            if v.is_empty() {
                "(none)".to_string()
            } else {
                v.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
            }
        };
        let mut out = String::new();
        if self.yields.is_empty() {
            out.push_str("No tagged edit has been evaluated yet.\n");
        }
        for (c, y) in &self.yields {
            let y = if y.is_finite() {
                format!("{y:+.4}")
            } else {
                "-inf (no edit in the window)".into()
            };
            out.push_str(&format!("- {}: yield {y}\n", c.name()));
        }
        out.push_str(&format!("Prune (do not edit): {}\n", names(&self.prune)));
        out.push_str(&format!("Untried components: {}\n", names(&self.untried)));
        if !self.unmeasured.is_empty() {
            let shown = self.unmeasured.len().min(RENDER_UNMEASURED);
            out.push_str(&format!(
                "Unmeasured attempts ({} of {}, latest first; not in the yields):\n",
                shown,
                self.unmeasured.len()
            ));
            for r in self.unmeasured.iter().rev().take(RENDER_UNMEASURED) {
                let cs = if r.components.is_empty() {
                    "components unknown".to_string()
                } else {
                    names(&r.components)
                };
                out.push_str(&format!(
                    "- generation {} ({}): {}\n",
                    r.generation_id,
                    crate::status_name(r.status),
                    cs
                ));
            }
        }
        if self.stalled {
            out.push_str(&format!(
                "Progress has stalled: {} of your edits must target an untried component.\n",
                self.exploration_slots
            ));
        }
        out
    }
}

// ----------------------------------------------------------------------------------
// Configuration shared by the rrsi operators
// ----------------------------------------------------------------------------------

/// Configuration fields and readers the rrsi operators share, so one recipe value
/// means the same in every stage.
pub mod config {
    use super::{Component, Params, Schedule};
    use crate::Context;
    use crate::config::{Field, Fields, array, integer, number, object, string};
    use serde_json::{Value, json};

    /// A number field ≥ 0 with a default.
    pub fn coefficient(default: f64, description: &str) -> Field {
        number()
            .default(json!(default))
            .minimum(0.0)
            .description(description)
    }

    /// `layout`: claimed components, `[{glob, component}]`, first match wins.
    pub fn layout_field() -> Field {
        let names: Vec<Value> = Component::ALL.iter().map(|c| json!(c.name())).collect();
        array(object(
            Fields::new()
                .field("glob", string().required().minimum(1.0))
                .field("component", string().required().choices(names)),
        ))
        .default(json!([]))
        .description(
            "Claimed component per path glob (first match wins); a claim is kept only when \
             the diff carries a signal for it",
        )
    }

    /// The configured layout.
    pub fn layout(ctx: &Context) -> Result<Vec<(String, Component)>, String> {
        let Some(list) = ctx.config.get("layout").and_then(Value::as_array) else {
            return Ok(Vec::new());
        };
        list.iter()
            .enumerate()
            .map(|(i, e)| {
                let glob = e.get("glob").and_then(Value::as_str);
                let comp = e
                    .get("component")
                    .and_then(Value::as_str)
                    .and_then(Component::parse);
                match (glob, comp) {
                    (Some(g), Some(c)) => Ok((g.to_string(), c)),
                    _ => Err(format!(
                        "config.layout[{i}] must be {{glob: string, component: a component name}}"
                    )),
                }
            })
            .collect()
    }

    /// The cost-rule coefficients from `noise_band`, `beta0`, `beta1`, `w_s`, `w_c`, `w_n`.
    pub fn params(ctx: &Context) -> Params {
        let d = Params::default();
        let get = |k: &str, v: f64| ctx.f64(k).unwrap_or(v);
        Params {
            noise_band: get("noise_band", d.noise_band),
            beta0: get("beta0", d.beta0),
            beta1: get("beta1", d.beta1),
            w_s: get("w_s", d.w_s),
            w_c: get("w_c", d.w_c),
            w_n: get("w_n", d.w_n),
        }
    }

    /// `b_min`, `b_max` and `horizon` fields (validated by [`super::edit_budget`]).
    pub fn schedule_fields(s: crate::config::SchemaBuilder) -> crate::config::SchemaBuilder {
        s.field(
            "b_min",
            number()
                .default(json!(1.0))
                .description("Edit budget at the end of the schedule (an integer >= 1)"),
        )
        .field(
            "b_max",
            number()
                .default(json!(4.0))
                .description("Edit budget at generation 0 (an integer >= b_min, at most 2^53)"),
        )
        .field(
            "horizon",
            integer()
                .default(json!(10))
                .description("T: generations over which the budget anneals; <= 0 keeps b_max"),
        )
    }

    /// The configured schedule.
    pub fn schedule(ctx: &Context) -> Schedule {
        Schedule {
            b_min: ctx.f64("b_min").unwrap_or(1.0),
            b_max: ctx.f64("b_max").unwrap_or(4.0),
            horizon: ctx.i64("horizon").unwrap_or(10),
        }
    }

    /// A refine hook rejecting bounds the schedule would reject, at recipe check time.
    pub fn check_schedule(
        c: &serde_json::Map<String, Value>,
    ) -> Result<(), Vec<crate::config::Violation>> {
        let get = |k: &str| c.get(k).and_then(Value::as_f64);
        let mut out = Vec::new();
        let mut ok = true;
        for k in ["b_min", "b_max"] {
            if get(k).is_some_and(|b| b <= 0.0) {
                out.push(crate::config::Violation::new(k, "must be a number > 0"));
                ok = false;
            } else if get(k).is_some_and(|b| b.fract() != 0.0 || b > super::MAX_BOUND) {
                out.push(crate::config::Violation::new(
                    k,
                    "must be an integer in 1..=2^53 (9007199254740992)",
                ));
                ok = false;
            }
        }
        if let (Some(lo), Some(hi)) = (get("b_min"), get("b_max"))
            && ok
            && lo > hi
        {
            out.push(crate::config::Violation::new(
                "b_min",
                "must be <= b_max (the bounds are inverted)",
            ));
        }
        if out.is_empty() { Ok(()) } else { Err(out) }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod golden;
