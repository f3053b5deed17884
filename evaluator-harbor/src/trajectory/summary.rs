//! A bounded, deterministic view of a trajectory, for operators and the viewer.
//!
//! A trajectory is written by the agent under test (its own ATIF file is merged in) and
//! holds whatever the model and the tools said, so it can be any size and hold any text.
//! Everything here is bounded: each text field is clipped (its head and its tail kept, the
//! middle replaced by a visible `[… N more characters cut]`), the steps are cut to a
//! number (the first and the last kept, with a marker between them), and the whole is
//! bounded by a size it never exceeds. The same input always gives the same output.
//!
//! * [`load`] reads `<trial_dir>/trajectory.json` without following a link, up to a size;
//! * [`bound`] gives a clipped copy (ATIF still) and its JSON, with what was cut noted in
//!   its `notes`;
//! * [`render`] gives the text view: per step who spoke, the message, the tool calls with
//!   their arguments, the observations (command outputs), tokens and cost;
//! * [`counts`] gives the typed totals: steps, tool calls, tokens, cost.
//!
//! Both [`bound`] and [`render`] take a `filter` applied to every text of the trajectory
//! *before* it is clipped (so a name the filter replaces is never left half cut), and never
//! to the schema's own words (`source`, the schema version).

use std::borrow::Cow;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{
    AgentInfo, FinalMetrics, Metrics, Observation, ObservationResult, Step, ToolCall, Trajectory,
};

/// How much of a trajectory is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most characters kept of one text field (a message, a tool call's arguments, one
    /// observation's content, one string inside a JSON value).
    pub field_chars: usize,
    /// Most steps kept: the first half and the last half; those between are cut.
    pub max_steps: usize,
    /// Most entries kept of one JSON array or object inside a step.
    pub max_items: usize,
    /// Most characters of the whole: the rendered text, or the serialized JSON.
    pub total_chars: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            field_chars: 4000,
            max_steps: 200,
            max_items: 100,
            total_chars: 64 * 1024,
        }
    }
}

/// The smallest bounds [`bound`] shrinks to before it drops every step.
const FLOOR: Bounds = Bounds {
    field_chars: 80,
    max_steps: 2,
    max_items: 4,
    total_chars: 0,
};
/// Names and identifiers (session id, agent name, tool call ids, JSON keys) are short.
const NAME_CHARS: usize = 200;
/// JSON nested deeper than this inside a step is replaced by a marker.
const MAX_DEPTH: usize = 16;
/// The least `total_chars` a caller may ask for: room for the header and the markers.
pub const MIN_TOTAL_CHARS: usize = 2048;

/// The typed totals of a trajectory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Counts {
    pub steps: u64,
    pub tool_calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// Σ of the steps' costs; `None` when no step (nor `final_metrics`) has one.
    pub cost_usd: Option<f64>,
}

impl Counts {
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// The totals of `t`: its steps and tool calls counted, the steps' token counts and costs
/// summed. When no step carries metrics, `final_metrics` is used instead (an agent's own
/// file may only have the totals).
pub fn counts(t: &Trajectory) -> Counts {
    let mut c = Counts {
        steps: t.steps.len() as u64,
        tool_calls: t.steps.iter().map(|s| s.tool_calls.len() as u64).sum(),
        ..Counts::default()
    };
    let metrics: Vec<&Metrics> = t.steps.iter().filter_map(|s| s.metrics.as_ref()).collect();
    if metrics.is_empty() {
        if let Some(f) = &t.final_metrics {
            c.prompt_tokens = f.total_prompt_tokens.unwrap_or(0);
            c.completion_tokens = f.total_completion_tokens.unwrap_or(0);
            c.cached_tokens = f.total_cached_tokens.unwrap_or(0);
            c.cost_usd = f.total_cost_usd.filter(|u| usable_cost(*u));
        }
        return c;
    }
    let sum = |f: fn(&Metrics) -> Option<u64>| {
        metrics
            .iter()
            .filter_map(|m| f(m))
            .fold(0u64, u64::saturating_add)
    };
    c.prompt_tokens = sum(|m| m.prompt_tokens);
    c.completion_tokens = sum(|m| m.completion_tokens);
    c.cached_tokens = sum(|m| m.cached_tokens);
    let costs: Vec<f64> = metrics
        .iter()
        .filter_map(|m| m.cost_usd)
        .filter(|u| usable_cost(*u))
        .collect();
    c.cost_usd = (!costs.is_empty()).then(|| costs.iter().sum());
    c
}

fn usable_cost(u: f64) -> bool {
    u.is_finite() && u >= 0.0
}

// ------------------------------------------------------------------ clipping

/// The marker that replaces `cut` characters.
pub fn marker(cut: usize) -> String {
    format!("[… {cut} more characters cut]")
}

/// `text` in at most `max` characters: unchanged when it fits, else its head (two thirds
/// of the room) and its tail (the rest, where a command's error usually is) around a
/// [`marker`] naming how many characters were cut.
pub fn clip(text: &str, max: usize) -> Cow<'_, str> {
    let n = text.chars().count();
    if n <= max {
        return Cow::Borrowed(text);
    }
    // The room left beside the marker depends on the marker's length, which depends on
    // the cut: a first guess with the longest marker (for `n`), then the marker of that
    // guess's cut, which is no longer, so the text still fits.
    let guess = max.saturating_sub(marker(n).chars().count());
    let room = max.saturating_sub(marker(n - guess).chars().count());
    let cut = n - room;
    let head = room * 2 / 3;
    let tail = room - head;
    let mut out: String = text.chars().take(head).collect();
    out.push_str(&marker(cut));
    out.extend(text.chars().skip(n - tail));
    if out.chars().count() > max {
        // Room for no text at all: the marker alone, itself cut to fit.
        return Cow::Owned(marker(n).chars().take(max).collect());
    }
    Cow::Owned(out)
}

/// What [`bound`] cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// Text fields clipped, and the characters they lost.
    pub fields: u64,
    pub chars: u64,
    /// Steps left out.
    pub steps: u64,
    /// JSON array or object entries left out (and values nested too deeply).
    pub items: u64,
}

impl Cut {
    pub fn any(&self) -> bool {
        *self != Cut::default()
    }

    /// One sentence for a trajectory's `notes`.
    pub fn note(&self) -> String {
        format!(
            "[evolve bounded this trajectory: {} field(s) clipped ({} characters), {} step(s) and {} JSON entries left out]",
            self.fields, self.chars, self.steps, self.items
        )
    }
}

/// Applies the filter, then the bounds, to each text; tallies what it cut.
struct Clipper<'a> {
    bounds: Bounds,
    filter: &'a dyn Fn(&str) -> String,
    cut: Cut,
}

impl Clipper<'_> {
    fn text_max(&mut self, s: &str, max: usize) -> String {
        let filtered = (self.filter)(s);
        let n = filtered.chars().count();
        let out = clip(&filtered, max).into_owned();
        if n > max {
            self.cut.fields += 1;
            self.cut.chars += (n - max.min(n)) as u64;
        }
        out
    }

    fn text(&mut self, s: &str) -> String {
        self.text_max(s, self.bounds.field_chars)
    }

    fn name(&mut self, s: &str) -> String {
        self.text_max(
            s,
            NAME_CHARS.min(self.bounds.field_chars.max(FLOOR.field_chars)),
        )
    }

    fn opt(&mut self, s: &Option<String>) -> Option<String> {
        s.as_deref().map(|s| self.text(s))
    }

    fn opt_name(&mut self, s: &Option<String>) -> Option<String> {
        s.as_deref().map(|s| self.name(s))
    }

    fn value(&mut self, v: &Value, depth: usize) -> Value {
        if depth >= MAX_DEPTH && (v.is_array() || v.is_object()) {
            self.cut.items += 1;
            return Value::String("[… nested too deeply, cut]".into());
        }
        let keep = self.bounds.max_items;
        match v {
            Value::String(s) => Value::String(self.text(s)),
            Value::Array(a) => {
                let mut out: Vec<Value> = a
                    .iter()
                    .take(keep)
                    .map(|x| self.value(x, depth + 1))
                    .collect();
                if a.len() > keep {
                    let left = a.len() - keep;
                    self.cut.items += left as u64;
                    out.push(Value::String(format!("[… {left} more items cut]")));
                }
                Value::Array(out)
            }
            Value::Object(m) => Value::Object(self.map(m, depth)),
            other => other.clone(),
        }
    }

    fn map(&mut self, m: &Map<String, Value>, depth: usize) -> Map<String, Value> {
        let keep = self.bounds.max_items;
        let mut out = Map::new();
        for (k, x) in m.iter().take(keep) {
            let key = self.name(k);
            let val = self.value(x, depth + 1);
            out.insert(key, val);
        }
        if m.len() > keep {
            let left = m.len() - keep;
            self.cut.items += left as u64;
            out.insert(
                "…".into(),
                Value::String(format!("[… {left} more entries cut]")),
            );
        }
        out
    }

    fn step(&mut self, s: &Step) -> Step {
        Step {
            step_id: s.step_id,
            timestamp: self.opt_name(&s.timestamp),
            source: s.source,
            model_name: self.opt_name(&s.model_name),
            message: self.text(&s.message),
            reasoning_content: self.opt(&s.reasoning_content),
            tool_calls: self.tool_calls(&s.tool_calls),
            observation: s.observation.as_ref().map(|o| self.observation(o)),
            metrics: s.metrics.as_ref().map(|m| Metrics {
                extra: self.map(&m.extra, 0),
                ..m.clone()
            }),
            extra: self.map(&s.extra, 0),
        }
    }

    /// Tool calls past `max_items` are counted, not kept (a call is not a value that can
    /// hold a marker; the cut is in the notes).
    fn tool_calls(&mut self, calls: &[ToolCall]) -> Vec<ToolCall> {
        let keep = self.bounds.max_items;
        self.cut.items += calls.len().saturating_sub(keep) as u64;
        calls
            .iter()
            .take(keep)
            .map(|c| ToolCall {
                tool_call_id: self.name(&c.tool_call_id),
                function_name: self.name(&c.function_name),
                arguments: self.value(&c.arguments, 0),
            })
            .collect()
    }

    fn observation(&mut self, o: &Observation) -> Observation {
        let keep = self.bounds.max_items;
        let left = o.results.len().saturating_sub(keep);
        self.cut.items += left as u64;
        let mut results: Vec<ObservationResult> = o
            .results
            .iter()
            .take(keep)
            .map(|r| ObservationResult {
                source_call_id: self.opt_name(&r.source_call_id),
                content: self.value(&r.content, 0),
            })
            .collect();
        if left > 0 {
            results.push(ObservationResult {
                source_call_id: None,
                content: Value::String(format!("[… {left} more results cut]")),
            });
        }
        Observation { results }
    }

    fn agent(&mut self, a: &AgentInfo) -> AgentInfo {
        AgentInfo {
            name: self.name(&a.name),
            version: self.name(&a.version),
            model_name: self.opt_name(&a.model_name),
            extra: self.map(&a.extra, 0),
        }
    }
}

/// The first `max / 2` and the last `max - max / 2` of `steps`, and how many are between.
fn kept_steps(steps: &[Step], max: usize) -> (Vec<&Step>, usize) {
    if steps.len() <= max {
        return (steps.iter().collect(), 0);
    }
    let head = max / 2;
    let tail = max - head;
    let kept = steps[..head]
        .iter()
        .chain(&steps[steps.len() - tail..])
        .collect();
    (kept, steps.len() - max)
}

/// A bounded copy of a trajectory and its JSON.
#[derive(Debug, Clone)]
pub struct Bounded {
    pub trajectory: Trajectory,
    /// `trajectory` as compact JSON: at most the bounds' `total_chars` characters.
    pub json: String,
    pub cut: Cut,
}

fn bound_once(t: &Trajectory, b: Bounds, filter: &dyn Fn(&str) -> String) -> (Trajectory, Cut) {
    let mut c = Clipper {
        bounds: b,
        filter,
        cut: Cut::default(),
    };
    let (steps, left) = kept_steps(&t.steps, b.max_steps);
    c.cut.steps = left as u64;
    let steps = steps.into_iter().map(|s| c.step(s)).collect();
    let mut out = Trajectory {
        schema_version: t.schema_version.chars().take(40).collect(),
        session_id: c.name(&t.session_id),
        agent: c.agent(&t.agent),
        steps,
        notes: c.opt(&t.notes),
        final_metrics: t.final_metrics.as_ref().map(|f| FinalMetrics {
            extra: c.map(&f.extra, 0),
            ..f.clone()
        }),
        extra: c.map(&t.extra, 0),
    };
    if c.cut.any() {
        out.notes = Some(note_with(out.notes.take(), &c.cut));
    }
    (out, c.cut)
}

fn note_with(notes: Option<String>, cut: &Cut) -> String {
    match notes {
        Some(n) if !n.is_empty() => format!("{n}\n{}", cut.note()),
        _ => cut.note(),
    }
}

/// Shrink `b` one step towards [`FLOOR`]; `None` once there.
fn shrink(b: Bounds) -> Option<Bounds> {
    let quarter = |x: usize, floor: usize| (x / 4).max(floor);
    if b.field_chars > FLOOR.field_chars {
        return Some(Bounds {
            field_chars: quarter(b.field_chars, FLOOR.field_chars),
            ..b
        });
    }
    if b.max_items > FLOOR.max_items || b.max_steps > FLOOR.max_steps {
        return Some(Bounds {
            max_items: quarter(b.max_items, FLOOR.max_items),
            max_steps: quarter(b.max_steps, FLOOR.max_steps),
            ..b
        });
    }
    None
}

/// A copy of `t` within `bounds`: every text filtered, then clipped; steps and JSON
/// entries cut; and, while its JSON is longer than `bounds.total_chars`, clipped harder
/// (fields, then entries and steps, a quarter at a time). When even the smallest bounds
/// do not fit, every step is left out and the notes say so. What was cut is appended to
/// the notes. `bounds.total_chars` below [`MIN_TOTAL_CHARS`] is read as that.
pub fn bound(t: &Trajectory, bounds: &Bounds, filter: &dyn Fn(&str) -> String) -> Bounded {
    let total = bounds.total_chars.max(MIN_TOTAL_CHARS);
    let mut b = *bounds;
    loop {
        let (trajectory, cut) = bound_once(t, b, filter);
        let json = serde_json::to_string(&trajectory).unwrap_or_default();
        if json.chars().count() <= total {
            return Bounded {
                trajectory,
                json,
                cut,
            };
        }
        match shrink(b) {
            Some(next) => b = next,
            None => return without_steps(t, filter),
        }
    }
}

/// The last resort of [`bound`]: the header alone, its texts at their smallest.
fn without_steps(t: &Trajectory, filter: &dyn Fn(&str) -> String) -> Bounded {
    let mut c = Clipper {
        bounds: FLOOR,
        filter,
        cut: Cut {
            steps: t.steps.len() as u64,
            ..Cut::default()
        },
    };
    let agent = AgentInfo {
        name: c.text(&t.agent.name),
        version: c.text(&t.agent.version),
        model_name: c.opt(&t.agent.model_name),
        extra: Map::new(),
    };
    let trajectory = Trajectory {
        schema_version: t.schema_version.chars().take(40).collect(),
        session_id: c.text(&t.session_id),
        agent,
        steps: Vec::new(),
        notes: Some(format!(
            "{} [evolve left out all {} steps: even clipped, they did not fit the bound]",
            c.cut.note(),
            t.steps.len()
        )),
        final_metrics: t.final_metrics.as_ref().map(|f| FinalMetrics {
            extra: Map::new(),
            ..f.clone()
        }),
        extra: Map::new(),
    };
    let json = serde_json::to_string(&trajectory).unwrap_or_default();
    Bounded {
        trajectory,
        json,
        cut: c.cut,
    }
}

// ------------------------------------------------------------------ the text view

fn tokens_phrase(prompt: u64, completion: u64, cached: u64) -> String {
    let mut s = format!("tokens {prompt} in / {completion} out");
    if cached > 0 {
        s.push_str(&format!(" ({cached} cached)"));
    }
    s
}

fn usd(u: f64) -> String {
    format!("${u:.6}")
}

/// `text` with every line indented by `pad`.
fn indented(text: &str, pad: &str) -> String {
    let mut out = String::new();
    for line in text.split('\n') {
        out.push_str(pad);
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A JSON value as text: a string as itself, anything else as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn source_name(s: super::Source) -> &'static str {
    match s {
        super::Source::System => "system",
        super::Source::User => "user",
        super::Source::Agent => "agent",
    }
}

/// One step as text (its fields filtered and clipped by `c`).
fn step_text(c: &mut Clipper<'_>, s: &Step) -> String {
    let mut head = format!("#{} {}", s.step_id, source_name(s.source));
    if let Some(m) = &s.model_name {
        head.push_str(&format!(" · model {}", c.name(m)));
    }
    if let Some(ts) = &s.timestamp {
        head.push_str(&format!(" · {}", c.name(ts)));
    }
    if let Some(m) = &s.metrics {
        let (p, o, k) = (
            m.prompt_tokens.unwrap_or(0),
            m.completion_tokens.unwrap_or(0),
            m.cached_tokens.unwrap_or(0),
        );
        if m.prompt_tokens.is_some() || m.completion_tokens.is_some() {
            head.push_str(&format!(" · {}", tokens_phrase(p, o, k)));
        }
        if let Some(u) = m.cost_usd.filter(|u| usable_cost(*u)) {
            head.push_str(&format!(" · {}", usd(u)));
        }
    }
    let mut out = head;
    out.push('\n');
    if !s.message.is_empty() {
        out.push_str(&indented(&c.text(&s.message), "  "));
    }
    if let Some(r) = s.reasoning_content.as_deref().filter(|r| !r.is_empty()) {
        out.push_str(&indented(&format!("reasoning: {}", c.text(r)), "  "));
    }
    let keep = c.bounds.max_items;
    for call in s.tool_calls.iter().take(keep) {
        let args = value_text(&call.arguments);
        out.push_str(&indented(
            &format!(
                "tool call {} [{}]: {}",
                c.name(&call.function_name),
                c.name(&call.tool_call_id),
                c.text(&args)
            ),
            "  ",
        ));
    }
    if s.tool_calls.len() > keep {
        out.push_str(&format!(
            "  [… {} more tool calls cut]\n",
            s.tool_calls.len() - keep
        ));
    }
    let results = s.observation.as_ref().map_or(&[][..], |o| &o.results[..]);
    for r in results.iter().take(keep) {
        let id = r
            .source_call_id
            .as_deref()
            .map_or(String::new(), |i| format!(" [{}]", c.name(i)));
        let content = c.text(&value_text(&r.content));
        out.push_str(&indented(&format!("output{id}: {content}"), "  "));
    }
    if results.len() > keep {
        out.push_str(&format!(
            "  [… {} more outputs cut]\n",
            results.len() - keep
        ));
    }
    out
}

/// The header: what the trajectory is, and its totals.
fn header_text(c: &mut Clipper<'_>, t: &Trajectory) -> String {
    let n = counts(t);
    let mut out = format!(
        "trajectory ({}) · session {} · agent {} {}",
        c.name(&t.schema_version),
        c.name(&t.session_id),
        c.name(&t.agent.name),
        c.name(&t.agent.version)
    );
    if let Some(m) = &t.agent.model_name {
        out.push_str(&format!(" · model {}", c.name(m)));
    }
    out.push('\n');
    out.push_str(&format!(
        "{} steps · {} tool calls · {}",
        n.steps,
        n.tool_calls,
        tokens_phrase(n.prompt_tokens, n.completion_tokens, n.cached_tokens)
    ));
    if let Some(u) = n.cost_usd {
        out.push_str(&format!(" · cost {}", usd(u)));
    }
    out.push('\n');
    if let Some(notes) = t.notes.as_deref().filter(|n| !n.is_empty()) {
        out.push_str(&indented(&format!("notes: {}", c.text(notes)), ""));
    }
    out
}

/// The text view of `t`: a header with the totals, then one block per step (who spoke,
/// the message, reasoning, each tool call with its arguments, each observation's content,
/// tokens and cost). Texts are filtered, then clipped to `bounds.field_chars`; steps past
/// `bounds.max_steps` are cut from the middle; and blocks stop before the text would pass
/// `bounds.total_chars`, with a last line saying how many steps were left out. The result
/// is never longer than `bounds.total_chars` characters (at least [`MIN_TOTAL_CHARS`]).
pub fn render(t: &Trajectory, bounds: &Bounds, filter: &dyn Fn(&str) -> String) -> String {
    let total = bounds.total_chars.max(MIN_TOTAL_CHARS);
    let mut c = Clipper {
        bounds: *bounds,
        filter,
        cut: Cut::default(),
    };
    // The last line may need this much room; it is kept free until the end.
    let reserve = 120;
    let mut out = clip(&header_text(&mut c, t), total / 4).into_owned();
    let mut used = out.chars().count();
    let (steps, between) = kept_steps(&t.steps, bounds.max_steps.max(1));
    let half = steps.len().div_ceil(2).min(bounds.max_steps.max(1) / 2);
    let mut shown = 0usize;
    for (i, s) in steps.iter().enumerate() {
        if between > 0 && i == half {
            let line = format!("\n[… {between} steps cut from the middle]\n");
            used += line.chars().count();
            out.push_str(&line);
        }
        let block = format!("\n{}", step_text(&mut c, s));
        let n = block.chars().count();
        if used + n + reserve > total {
            break;
        }
        used += n;
        out.push_str(&block);
        shown += 1;
    }
    let left = steps.len() - shown;
    if left > 0 {
        out.push_str(&format!(
            "\n[… {left} more steps cut: the summary is bounded at {total} characters]\n"
        ));
    }
    clip(&out, total).into_owned()
}

// ------------------------------------------------------------------ reading one back

/// Why a trial's trajectory could not be read. Never fatal: the caller notes it and goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// The trial left no `trajectory.json`.
    Missing,
    /// A link, a directory or a special file where the file should be: never followed.
    NotRegular,
    /// Larger than the reader's cap.
    TooLarge {
        limit: u64,
    },
    Io(String),
    /// Not JSON, or not ATIF; the parser's message, clipped.
    Malformed(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = super::TRAJECTORY_FILE;
        match self {
            Unreadable::Missing => write!(f, "the trial left no {file}"),
            Unreadable::NotRegular => write!(
                f,
                "{file} is a link or not a regular file: not followed, not read"
            ),
            Unreadable::TooLarge { limit } => {
                write!(f, "{file} is larger than {limit} bytes: not read")
            }
            Unreadable::Io(e) => write!(f, "{file} cannot be read: {e}"),
            Unreadable::Malformed(e) => write!(f, "{file} is not an ATIF trajectory: {e}"),
        }
    }
}

/// The trajectory of the trial in `trial_dir`, read without following a link (the trial
/// directory itself included) and only if at most `max_bytes` long.
pub fn load(trial_dir: &Path, max_bytes: u64) -> Result<Trajectory, Unreadable> {
    let path = super::path(trial_dir);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unreadable::Missing),
        Err(e) => return Err(Unreadable::Io(e.to_string())),
        Ok(m) if !m.is_file() => return Err(Unreadable::NotRegular),
        Ok(_) => {}
    }
    let dir = crate::beneath::Beneath::open(trial_dir).map_err(|_| Unreadable::NotRegular)?;
    let bytes = dir
        .read(super::TRAJECTORY_FILE, max_bytes)
        .map_err(|e| match e {
            crate::beneath::NotRegular::Refused => Unreadable::NotRegular,
            crate::beneath::NotRegular::TooLarge => Unreadable::TooLarge { limit: max_bytes },
            crate::beneath::NotRegular::Io(e) => Unreadable::Io(e.to_string()),
        })?;
    parse(&bytes)
}

/// A trajectory from its JSON bytes.
pub fn parse(bytes: &[u8]) -> Result<Trajectory, Unreadable> {
    let t: Trajectory = serde_json::from_slice(bytes)
        .map_err(|e| Unreadable::Malformed(clip(&e.to_string(), 300).into_owned()))?;
    if !t.schema_version.starts_with("ATIF") {
        return Err(Unreadable::Malformed(format!(
            "schema_version is {:?}, expected ATIF-v1.x",
            clip(&t.schema_version, 40)
        )));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::super::{SCHEMA_VERSION, Source};
    use super::*;

    fn keep(s: &str) -> String {
        s.to_string()
    }

    fn step(id: u64, source: Source, message: &str) -> Step {
        Step {
            step_id: id,
            timestamp: None,
            source,
            model_name: None,
            message: message.into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
            observation: None,
            metrics: None,
            extra: Map::new(),
        }
    }

    /// A user instruction, then an agent turn that runs a command and sees its output.
    fn sample() -> Trajectory {
        let mut answer = step(2, Source::Agent, "I will look at the files.");
        answer.model_name = Some("gpt-test".into());
        answer.tool_calls = vec![ToolCall {
            tool_call_id: "call_1".into(),
            function_name: "bash".into(),
            arguments: serde_json::json!({"command": "ls /app"}),
        }];
        answer.observation = Some(Observation {
            results: vec![ObservationResult {
                source_call_id: Some("call_1".into()),
                content: Value::String("answer.txt\nREADME".into()),
            }],
        });
        answer.metrics = Some(Metrics {
            prompt_tokens: Some(120),
            completion_tokens: Some(30),
            cached_tokens: Some(10),
            cost_usd: Some(0.00015),
            extra: Map::new(),
        });
        let mut last = step(3, Source::Agent, "Done.");
        last.metrics = Some(Metrics {
            prompt_tokens: Some(200),
            completion_tokens: Some(5),
            cost_usd: Some(0.0002),
            ..Metrics::default()
        });
        Trajectory {
            schema_version: SCHEMA_VERSION.into(),
            session_id: "s-1".into(),
            agent: AgentInfo {
                name: "echo-agent".into(),
                version: "1.0".into(),
                model_name: Some("gpt-test".into()),
                extra: Map::new(),
            },
            steps: vec![
                step(1, Source::User, "Write your number to /app/answer.txt."),
                answer,
                last,
            ],
            notes: None,
            final_metrics: None,
            extra: Map::new(),
        }
    }

    #[test]
    fn clip_keeps_head_and_tail_around_a_marker_and_never_exceeds() {
        assert_eq!(clip("short", 10), "short");
        let long: String = "a".repeat(600) + &"z".repeat(400);
        let c = clip(&long, 100);
        assert_eq!(c.chars().count(), 100, "{c}");
        assert!(c.starts_with("aaaa") && c.ends_with("zzzz"), "{c}");
        // The marker names exactly what is missing.
        let kept = c.chars().take_while(|ch| *ch == 'a').count()
            + c.chars().rev().take_while(|ch| *ch == 'z').count();
        assert!(c.contains(&marker(1000 - kept)), "{c}");
        // Multi-byte characters are counted as characters and never split.
        let wide = "é€😀".repeat(500);
        let c = clip(&wide, 77);
        assert!(c.chars().count() <= 77);
        assert!(c.contains("more characters cut"));
        // No room for text: the marker, cut to fit.
        for max in [0, 1, 5, 20] {
            assert!(clip(&long, max).chars().count() <= max, "{max}");
        }
    }

    #[test]
    fn counts_sum_steps_and_fall_back_to_final_metrics() {
        let t = sample();
        let c = counts(&t);
        assert_eq!(
            (c.steps, c.tool_calls, c.prompt_tokens, c.completion_tokens),
            (3, 1, 320, 35)
        );
        assert_eq!(c.cached_tokens, 10);
        assert!((c.cost_usd.unwrap() - 0.00035).abs() < 1e-12);
        assert_eq!(c.tokens(), 355);
        let mut bare = sample();
        for s in &mut bare.steps {
            s.metrics = None;
        }
        assert_eq!(counts(&bare).cost_usd, None);
        bare.final_metrics = Some(FinalMetrics {
            total_prompt_tokens: Some(7),
            total_completion_tokens: Some(3),
            total_cost_usd: Some(0.5),
            ..FinalMetrics::default()
        });
        let c = counts(&bare);
        assert_eq!((c.prompt_tokens, c.completion_tokens), (7, 3));
        assert_eq!(c.cost_usd, Some(0.5));
    }

    #[test]
    fn render_shows_who_spoke_messages_tool_calls_outputs_tokens_and_cost() {
        let text = render(&sample(), &Bounds::default(), &keep);
        for part in [
            "trajectory (ATIF-v1.4) · session s-1 · agent echo-agent 1.0 · model gpt-test",
            "3 steps · 1 tool calls · tokens 320 in / 35 out (10 cached) · cost $0.000350",
            "#1 user\n  Write your number to /app/answer.txt.",
            "#2 agent · model gpt-test · tokens 120 in / 30 out (10 cached) · $0.000150",
            "  tool call bash [call_1]: {\"command\":\"ls /app\"}",
            "  output [call_1]: answer.txt\n  README",
            "#3 agent · tokens 200 in / 5 out · $0.000200\n  Done.",
        ] {
            assert!(text.contains(part), "{part:?} not in\n{text}");
        }
        // Deterministic.
        assert_eq!(text, render(&sample(), &Bounds::default(), &keep));
    }

    /// A trajectory of `n` steps, each with a message of `size` characters.
    fn huge(n: u64, size: usize) -> Trajectory {
        let mut t = sample();
        t.steps = (1..=n)
            .map(|i| {
                let mut s = step(i, Source::Agent, &format!("{i}:{}", "x".repeat(size)));
                s.tool_calls = vec![ToolCall {
                    tool_call_id: format!("c{i}"),
                    function_name: "bash".into(),
                    arguments: serde_json::json!({"command": "y".repeat(size), "list": vec![1; 500]}),
                }];
                s
            })
            .collect();
        t
    }

    #[test]
    fn render_is_bounded_with_markers_for_cut_fields_and_steps() {
        let t = huge(5000, 2_000);
        let b = Bounds {
            field_chars: 500,
            max_steps: 100,
            max_items: 10,
            total_chars: 16 * 1024,
        };
        let text = render(&t, &b, &keep);
        assert!(text.chars().count() <= 16 * 1024, "{}", text.len());
        assert!(text.contains("more characters cut]"), "{text}");
        assert!(text.contains("more steps cut: the summary is bounded at 16384 characters]"));
        assert!(text.starts_with("trajectory (ATIF-v1.4)"));
        assert!(text.contains("#1 agent"));
        // Few steps, no cut from the middle: the summary shows them all.
        let small = render(&huge(4, 10), &Bounds::default(), &keep);
        assert!(small.contains("#4 agent") && !small.contains("steps cut"));
        // Steps past max_steps are cut from the middle, and the last ones are kept.
        let few = Bounds {
            max_steps: 4,
            total_chars: 1 << 20,
            ..Bounds::default()
        };
        let middle = render(&huge(10, 10), &few, &keep);
        assert!(middle.contains("#2 agent") && !middle.contains("#3 agent"));
        assert!(
            middle.contains("[… 6 steps cut from the middle]"),
            "{middle}"
        );
        assert!(middle.contains("#9 agent") && middle.contains("#10 agent"));
    }

    #[test]
    fn bound_gives_atif_within_the_total_with_what_was_cut_in_its_notes() {
        let t = huge(3000, 5_000);
        let b = Bounds {
            total_chars: 64 * 1024,
            ..Bounds::default()
        };
        let out = bound(&t, &b, &keep);
        assert!(out.json.chars().count() <= 64 * 1024, "{}", out.json.len());
        let back: Trajectory = serde_json::from_str(&out.json).unwrap();
        assert_eq!(back, out.trajectory);
        assert!(out.cut.steps > 0 && out.cut.fields > 0 && out.cut.chars > 0);
        let notes = back.notes.unwrap();
        assert!(
            notes.contains("[evolve bounded this trajectory:"),
            "{notes}"
        );
        assert!(!back.steps.is_empty(), "steps are kept, clipped harder");
        // The first and the last steps are the ones kept.
        assert_eq!(back.steps[0].step_id, 1);
        assert_eq!(back.steps.last().unwrap().step_id, 3000);
        // Small enough: unchanged, no note.
        let same = bound(&sample(), &Bounds::default(), &keep);
        assert_eq!(same.trajectory, sample());
        assert!(!same.cut.any());
    }

    #[test]
    fn bound_drops_every_step_when_nothing_else_fits() {
        // Deeply nested arguments of many entries survive the floor's clipping.
        let mut nested = Value::String("z".repeat(100));
        for _ in 0..6 {
            nested = Value::Array(vec![nested; 4]);
        }
        let mut t = huge(2, 10);
        for s in &mut t.steps {
            s.tool_calls[0].arguments = nested.clone();
        }
        let b = Bounds {
            total_chars: MIN_TOTAL_CHARS,
            ..Bounds::default()
        };
        let out = bound(&t, &b, &keep);
        assert!(out.json.chars().count() <= MIN_TOTAL_CHARS, "{}", out.json);
        assert!(out.trajectory.steps.is_empty());
        assert!(out.json.contains("left out all 2 steps"), "{}", out.json);
        assert!(serde_json::from_str::<Trajectory>(&out.json).is_ok());
    }

    #[test]
    fn the_filter_runs_before_clipping_and_never_on_schema_words() {
        // A private name straddling the clip boundary is replaced whole first.
        let secret = "gate-task-secret";
        let message = format!("{}{secret}{}", "a".repeat(60), "b".repeat(60));
        let mut t = sample();
        t.steps[0].message = message;
        t.steps[1].tool_calls[0].arguments = serde_json::json!({secret: secret});
        let filter = |s: &str| s.replace(secret, "private-1").replace("agent", "AGENT");
        let b = Bounds {
            field_chars: 90,
            ..Bounds::default()
        };
        let out = bound(&t, &b, &filter);
        assert!(!out.json.contains("gate-task"), "{}", out.json);
        assert!(out.json.contains("private-1"));
        // `source` is the schema's word, not text: it still parses.
        let back: Trajectory = serde_json::from_str(&out.json).unwrap();
        assert_eq!(back.steps[1].source, Source::Agent);
        assert_eq!(back.agent.name, "echo-AGENT");
        let text = render(&t, &b, &filter);
        assert!(
            !text.contains("gate-task") && text.contains("private-1"),
            "{text}"
        );
    }

    #[test]
    fn load_refuses_links_huge_and_malformed_files_without_failing() {
        let d = tempfile::tempdir().unwrap();
        let trial = d.path().join("trial");
        std::fs::create_dir(&trial).unwrap();
        assert_eq!(load(&trial, 1 << 20), Err(Unreadable::Missing));
        let json = serde_json::to_string(&sample()).unwrap();
        std::fs::write(super::super::path(&trial), &json).unwrap();
        assert_eq!(load(&trial, 1 << 20).unwrap(), sample());
        assert_eq!(load(&trial, 10), Err(Unreadable::TooLarge { limit: 10 }));
        std::fs::write(super::super::path(&trial), "{\"steps\": [").unwrap();
        let e = load(&trial, 1 << 20).unwrap_err();
        assert!(matches!(e, Unreadable::Malformed(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("trajectory.json is not an ATIF trajectory")
        );
        std::fs::write(
            super::super::path(&trial),
            json.replace("ATIF-v1.4", "other-1"),
        )
        .unwrap();
        assert!(matches!(
            load(&trial, 1 << 20),
            Err(Unreadable::Malformed(_))
        ));
        // A link planted where the file goes is never followed.
        let outside = d.path().join("outside.json");
        std::fs::write(&outside, &json).unwrap();
        std::fs::remove_file(super::super::path(&trial)).unwrap();
        std::os::unix::fs::symlink(&outside, super::super::path(&trial)).unwrap();
        assert_eq!(load(&trial, 1 << 20), Err(Unreadable::NotRegular));
        // Nor is a linked trial directory.
        let linked = d.path().join("linked");
        std::fs::remove_file(super::super::path(&trial)).unwrap();
        std::fs::write(super::super::path(&trial), &json).unwrap();
        std::os::unix::fs::symlink(&trial, &linked).unwrap();
        assert_eq!(load(&linked, 1 << 20), Err(Unreadable::NotRegular));
    }
}
