// evolve view: plain JavaScript, no build step, no dependencies.
// Reads the JSON endpoints documented in docs/viewer.md and draws the status bar, the
// lineage tree (SVG, one element per node, layout computed once per refresh), the score
// chart and the detail of the selected generation. Text from the workspace is never parsed
// as HTML, and every value from evolved code or a candidate tree is drawn by value()
// (below): its bidi controls shown as visible escapes, the value isolated from its
// neighbours.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const REFRESH_MS = 4000;
// Tree geometry: one column per depth, one row per leaf.
const DX = 34, DY = 18, R = 6, MARGIN = 16;
// Above this many nodes the tree drops its text labels (tooltips remain).
const LABEL_LIMIT = 250;

const state = {
  status: null,
  gens: [],
  byId: new Map(),
  selected: null,
  // The archive line count and champion of the last drawing: redraw only when they change.
  drawnKey: null,
  detailToken: 0,
  refreshing: false,
};

const $ = (id) => document.getElementById(id);

// An element. `text` is the page's own wording (labels, numbers); `value` is text from
// the workspace, drawn by value(); a `title` tooltip cannot hold markup, so its bidi
// controls are escaped in place. A string child is the page's own wording too: workspace
// text goes in as value(...).
function html(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = String(v);
    else if (k === "value") e.append(value(v));
    else if (k === "className") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "title") e.setAttribute(k, escapeBidi(v));
    else e.setAttribute(k, String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// ---------------------------------------------------------------- workspace text

// File names in a candidate tree, operator notes, logs and errors, gate reasons,
// annotations, task names and archive fields are chosen by the code being evolved. A bidi
// formatting character in one would reorder what the page shows: `\u202Efdp.exe` reads as
// `exe.pdf`, and an override left open in a note reverses the fields after it. So these
// characters are never obeyed, only shown, and each value is its own isolate.
const BIDI_CONTROLS = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;

const bidiEscape = (c) => `\\u{${c.codePointAt(0).toString(16).toUpperCase()}}`;

// `text` with each bidi control written as `\u{202E}` (for tooltips and SVG text).
function escapeBidi(text) {
  return String(text).replace(BIDI_CONTROLS, bidiEscape);
}

// `text` as a <bdi dir="ltr" class="value">: isolated (its direction cannot reach the text
// around it, nor theirs it) with a left-to-right base like the page, and each bidi control
// shown as a <span class="bidi-escape">\u{202E}</span>. The one place workspace text is drawn.
function value(text) {
  const s = String(text);
  const b = document.createElement("bdi");
  b.className = "value";
  b.dir = "ltr";
  let at = 0;
  for (const m of s.matchAll(BIDI_CONTROLS)) {
    if (m.index > at) b.append(s.slice(at, m.index));
    const esc = document.createElement("span");
    esc.className = "bidi-escape";
    esc.textContent = bidiEscape(m[0]);
    esc.title = "a bidi formatting character, shown instead of obeyed";
    b.append(esc);
    at = m.index + m[0].length;
  }
  if (at < s.length) b.append(s.slice(at));
  return b;
}

// A JSON value as JSON.stringify writes it, every key and string a value() of its own, so
// an override in one field (an annotation's note) cannot reverse the fields after it.
function jsonValue(v) {
  const frag = document.createDocumentFragment();
  const walk = (x) => {
    if (Array.isArray(x)) {
      frag.append("[");
      x.forEach((y, i) => { if (i) frag.append(","); walk(y); });
      frag.append("]");
    } else if (x !== null && typeof x === "object") {
      frag.append("{");
      Object.entries(x).forEach(([k, y], i) => {
        if (i) frag.append(",");
        frag.append(value(JSON.stringify(k)), ":");
        walk(y);
      });
      frag.append("}");
    } else if (typeof x === "string") {
      frag.append(value(JSON.stringify(x)));
    } else {
      frag.append(JSON.stringify(x));
    }
  };
  walk(v);
  return frag;
}

// `items` drawn one after the other with `sep` between them (each item a Node or a string
// of the page's own).
function joined(items, sep) {
  const frag = document.createDocumentFragment();
  items.forEach((x, i) => { if (i) frag.append(sep); frag.append(x); });
  return frag;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  let body = null;
  try { body = await r.json(); } catch (_) { /* reported below */ }
  if (!r.ok) throw new Error((body && body.error) || `${url}: HTTP ${r.status}`);
  if (body === null) throw new Error(`${url}: the answer is not JSON`);
  return body;
}

function showError(err) {
  const f = $("error");
  if (!err) { f.hidden = true; f.textContent = ""; return; }
  f.hidden = false;
  // The message can quote a genid from the address, or an answer of the server.
  f.replaceChildren("evolve view: ", value(err.message || err));
}

const fmtScore = (v) => (typeof v === "number" && isFinite(v) ? v.toFixed(4) : "–");
const fmtUsd = (v) => (typeof v === "number" ? `$${v.toFixed(4)}` : "–");
const short = (h) => (typeof h === "string" && h.length > 12 ? h.slice(0, 12) : h || "–");

// ---------------------------------------------------------------- status bar

function renderStatus(s) {
  const dl = $("status");
  dl.replaceChildren();
  const item = (label, ...value) => dl.append(html("div", {}, html("dt", { text: label }), html("dd", {}, ...value)));
  item("experiment", value(s.experiment));
  const ops = Object.entries(s.recipe.operators).map(([k, v]) => joined([value(k), value(v)], "="));
  item("recipe", value(s.recipe.name), " · ", value(s.recipe.engine), " engine · ", joined(ops, " "));
  if (s.champion) {
    item("champion", "gen ", value(s.champion.genid), ` · score ${fmtScore(s.champion.score)} · sealed ${fmtScore(s.champion.sealed_anchor)}`);
  } else {
    item("champion", "none yet");
  }
  if (s.genesis) item("gen 0", `score ${fmtScore(s.genesis.score)} · sealed ${fmtScore(s.genesis.sealed_anchor)}`);
  const chips = Object.entries(s.by_status).map(([k, v]) => html("span", { className: "chip" }, value(k), ` ${v}`));
  // As `evolve status` says it: the workspace's generations against the recipe's limit.
  const limit = s.recipe.max_generations;
  const count = s.generations < limit
    ? `${s.generations} of ${limit} `
    : `${s.generations} · the recipe's limit (${limit}) is reached `;
  item("generations", count, ...chips);
  item("budget", `${fmtUsd(s.spent_usd)} of ${fmtUsd(s.budget_usd)}`);
  if (s.in_progress.length) item("building", joined(s.in_progress.map((g) => joined(["gen ", value(g)], "")), ", "));

  const b = $("integrity");
  const ok = s.integrity.ok;
  const n = s.integrity.findings.length + s.integrity.repository_findings.length;
  b.className = `badge ${ok ? "ok" : "fail"}`;
  b.textContent = ok
    ? `verify ok · ${s.integrity.certified}/${s.integrity.lines} lines certified`
    : `verify FAIL · ${n} finding(s)`;
  // A finding quotes what it found (a genid, a path, a field of a damaged line).
  const lines = s.integrity.findings.map((f) => value(f.text))
    .concat(s.integrity.repository_findings.map((f) => joined(["repository: ", value(f)], "")));
  if (lines.length) $("findings").replaceChildren(joined(lines, "\n"));
  else $("findings").textContent = "no findings";
}

function toggleFindings() {
  const f = $("findings"), b = $("integrity");
  f.hidden = !f.hidden;
  b.setAttribute("aria-expanded", String(!f.hidden));
}

// ---------------------------------------------------------------- lineage tree

// Layered layout: depth = distance from a root, leaves take consecutive rows in
// depth-first order, a parent sits midway between its first and last child. Iterative,
// so a 10,000-deep chain needs no recursion.
function layoutTree(gens, byId) {
  const kids = new Map(gens.map((g) => [g.genid, []]));
  const roots = [];
  for (const g of gens) {
    if (g.parent !== null && byId.has(g.parent) && g.parent !== g.genid) kids.get(g.parent).push(g);
    else roots.push(g);
  }
  const pos = new Map();
  const seen = new Set();
  let row = 0, maxDepth = 0;
  // Rows unreachable from a root (only a damaged archive could make a parent cycle) are
  // laid out as roots of their own rather than dropped.
  for (const root of roots.concat(gens)) {
    if (seen.has(root.genid)) continue;
    seen.add(root.genid);
    const stack = [[root, 0, 0]]; // node, depth, next child index
    while (stack.length) {
      const top = stack[stack.length - 1];
      const [node, depth, i] = top;
      const children = kids.get(node.genid);
      if (i < children.length) {
        top[2] = i + 1;
        if (!seen.has(children[i].genid)) {
          seen.add(children[i].genid);
          stack.push([children[i], depth + 1, 0]);
        }
        continue;
      }
      stack.pop();
      maxDepth = Math.max(maxDepth, depth);
      const placed = children.map((c) => pos.get(c.genid)).filter(Boolean);
      const y = placed.length ? (placed[0].y + placed[placed.length - 1].y) / 2 : row++;
      pos.set(node.genid, { x: depth, y });
    }
  }
  return { pos, rows: Math.max(row, 1), depth: maxDepth };
}

function renderTree() {
  const tree = $("tree");
  const { pos, rows, depth } = layoutTree(state.gens, state.byId);
  const X = (p) => MARGIN + p.x * DX, Y = (p) => MARGIN + p.y * DY;
  const labels = state.gens.length <= LABEL_LIMIT;
  const width = MARGIN * 2 + depth * DX + (labels ? 60 : 10);
  const height = MARGIN * 2 + (rows - 1) * DY;
  // A small tree is drawn larger (up to 2.2×) to use the panel; a large one scrolls.
  const room = $("tree-scroll").clientWidth - 4;
  const zoom = Math.max(1, Math.min(2.2, room / width, (window.innerHeight * 0.6) / height));
  tree.setAttribute("viewBox", `0 0 ${width} ${height}`);
  tree.setAttribute("width", Math.floor(width * zoom));
  tree.setAttribute("height", Math.floor(height * zoom));

  // Every edge in one path element: elbow from the parent to the child.
  let d = "";
  for (const g of state.gens) {
    const p = g.parent !== null ? pos.get(g.parent) : null;
    const c = pos.get(g.genid);
    if (!p || !c) continue;
    const mid = X(p) + DX / 2;
    d += `M${X(p)},${Y(p)}H${mid}V${Y(c)}H${X(c)}`;
  }
  const frag = document.createDocumentFragment();
  frag.append(svg("path", { class: "edges", d }));
  for (const g of state.gens) {
    const p = pos.get(g.genid);
    const x = X(p), y = Y(p);
    let node;
    if (g.class === "rejected") {
      node = svg("rect", { x: x - R + 1, y: y - R + 1, width: 2 * R - 2, height: 2 * R - 2 });
    } else {
      node = svg("circle", { cx: x, cy: y, r: R });
    }
    node.setAttribute("class", `node ${g.class}${g.champion ? " champion" : ""}${g.genid === state.selected ? " selected" : ""}`);
    node.setAttribute("data-genid", g.genid);
    node.setAttribute("tabindex", "0");
    node.setAttribute("role", "button");
    const title = svg("title");
    title.textContent = escapeBidi(`gen ${g.genid} · ${g.status}${g.verdict ? ` · ${g.verdict}` : ""} · score ${fmtScore(g.score)}${g.champion ? " · champion" : ""}`);
    node.append(title);
    if (g.champion) frag.append(svg("circle", { class: "ring", cx: x, cy: y, r: R + 4 }));
    frag.append(node);
    if (labels) {
      const t = svg("text", { class: `label${g.champion ? " champion" : ""}`, x: x + R + (g.champion ? 6 : 3), y: y + 3.5 });
      t.textContent = escapeBidi(g.genid);
      frag.append(t);
    }
  }
  tree.replaceChildren(frag);
}

function markSelected() {
  for (const n of $("tree").querySelectorAll(".node.selected")) n.classList.remove("selected");
  if (state.selected === null) return;
  const n = $("tree").querySelector(`.node[data-genid="${CSS.escape(state.selected)}"]`);
  if (n) n.classList.add("selected");
}

function toggleFit() {
  const tree = $("tree"), b = $("fit");
  const on = !tree.classList.contains("fit");
  tree.classList.toggle("fit", on);
  b.setAttribute("aria-pressed", String(on));
  b.textContent = on ? "actual size" : "fit to panel";
}

// ---------------------------------------------------------------- score chart

function renderChart() {
  const chart = $("chart");
  const W = 640, H = 230, L = 46, Rm = 12, T = 10, B = 26;
  chart.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const frag = document.createDocumentFragment();
  const scored = state.gens.filter((g) => typeof g.score === "number" && g.generation !== null);
  const anchors = state.gens.filter((g) => typeof g.sealed_anchor === "number" && g.generation !== null);
  if (!scored.length) {
    const t = svg("text", { class: "empty", x: W / 2, y: H / 2, "text-anchor": "middle" });
    t.textContent = "no certified score yet";
    chart.replaceChildren(t);
    return;
  }
  const values = scored.map((g) => g.score).concat(anchors.map((g) => g.sealed_anchor));
  let lo = Math.min(...values), hi = Math.max(...values);
  if (hi - lo < 1e-9) { lo -= 0.5; hi += 0.5; }
  const pad = (hi - lo) * 0.08;
  lo -= pad; hi += pad;
  const maxGen = Math.max(1, ...state.gens.map((g) => g.generation || 0));
  const x = (gen) => L + (gen / maxGen) * (W - L - Rm);
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);

  frag.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - Rm, y2: H - B }));
  frag.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (let i = 0; i <= 4; i++) {
    const v = lo + ((hi - lo) * i) / 4;
    frag.append(svg("line", { class: "grid", x1: L, y1: y(v), x2: W - Rm, y2: y(v) }));
    const t = svg("text", { class: "tick", x: L - 4, y: y(v) + 3, "text-anchor": "end" });
    t.textContent = v.toFixed(3);
    frag.append(t);
  }
  const step = Math.max(1, Math.ceil(maxGen / 10));
  for (let g = 0; g <= maxGen; g += step) {
    const t = svg("text", { class: "tick", x: x(g), y: H - B + 14, "text-anchor": "middle" });
    t.textContent = String(g);
    frag.append(t);
  }

  // Scores in generation order; best-so-far over eligible rows, as a step line.
  const ordered = scored.slice().sort((a, b) => a.generation - b.generation);
  frag.append(svg("polyline", { class: "scores", points: ordered.map((g) => `${x(g.generation)},${y(g.score)}`).join(" ") }));
  let best = null, d = "";
  for (const g of ordered) {
    if (!g.eligible) continue;
    if (best === null) { best = g.score; d = `M${x(g.generation)},${y(best)}`; continue; }
    d += `H${x(g.generation)}`;
    if (g.score > best) { best = g.score; d += `V${y(best)}`; }
  }
  if (d) { d += `H${x(maxGen)}`; frag.append(svg("path", { class: "best", d })); }
  for (const g of ordered) {
    const c = svg("circle", { class: `point ${g.class}`, cx: x(g.generation), cy: y(g.score), r: 3.2, "data-genid": g.genid });
    const t = svg("title");
    t.textContent = escapeBidi(`gen ${g.genid}: ${fmtScore(g.score)} (${g.status}${g.verdict ? `, ${g.verdict}` : ""})`);
    c.append(t);
    frag.append(c);
  }
  for (const g of anchors) {
    const cx = x(g.generation), cy = y(g.sealed_anchor), s = 5;
    const m = svg("path", { class: "anchor", d: `M${cx},${cy - s}L${cx + s},${cy}L${cx},${cy + s}L${cx - s},${cy}Z`, "data-genid": g.genid });
    const t = svg("title");
    t.textContent = escapeBidi(`sealed anchor, gen ${g.genid}: ${fmtScore(g.sealed_anchor)}`);
    m.append(t);
    frag.append(m);
  }
  chart.replaceChildren(frag);
}

// ---------------------------------------------------------------- detail

// Rows of [label, cell]: a cell is a Node, null (drawn "–"), or a value from the workspace.
function kvTable(rows) {
  const table = html("table", { className: "kv" });
  for (const [k, v] of rows) {
    if (v === undefined) continue;
    const cell = html("td");
    if (v instanceof Node) cell.append(v);
    else if (v === null) cell.textContent = "–";
    else cell.append(value(v));
    table.append(html("tr", {}, html("th", { text: k }), cell));
  }
  return table;
}

function genLink(genid) {
  if (genid === null || genid === undefined) return "–";
  return html("a", { href: `#gen-${genid}`, onclick: (e) => { e.preventDefault(); select(genid); } }, "gen ", value(genid));
}

function mono(text, title) {
  return html("span", { className: "mono", value: text, title });
}

function logBlock(stage, name, log) {
  if (!log || !log.text) return null;
  const note = log.skipped_bytes ? ` (last ${log.text.length} of ${log.bytes} bytes)` : ` (${log.bytes} bytes)`;
  return html("details", {}, html("summary", { text: `${stage} · ${name}${note}` }), html("pre", { value: log.text }));
}

function operatorsBlock(ops, genid) {
  const table = html("table");
  // Where a stage's own trajectory (e.g. mutate/coder's conversation) is drawn.
  const panel = html("div", { className: "trajectory stage-trajectory", "data-state": "empty" });
  table.append(html("tr", {}, ...["stage", "operator", "component sha256", "call", "trajectory"].map((h) => html("th", { text: h }))));
  const logs = [];
  for (const op of ops) {
    const digest = op.component_sha256 || op.frozen_sha256;
    const digestCell = html("td");
    if (digest) {
      digestCell.append(mono(short(digest), `${digest} (${op.component_sha256 ? `from ${op.identity_from}` : "frozen in gen/0, not called"})`));
      if (op.component_sha256 && op.frozen_sha256 && op.component_sha256 !== op.frozen_sha256) digestCell.append(html("div", { className: "hint", text: `differs from gen/0's ${short(op.frozen_sha256)}` }));
    } else digestCell.textContent = "–";
    if (op.script_sha256) digestCell.append(html("div", { className: "mono", title: op.script_sha256 }, "script ", value(op.script_path || ""), ` ${short(op.script_sha256)}`));
    const call = !op.called ? "not called"
      : op.error ? joined(["failed:", value(op.error.kind || ""), value(op.error.message || "")], " ")
      : `ok · ${op.elapsed_ms} ms`;
    const trajectory = op.trajectory
      ? html("button", { type: "button", className: "show-stage-trajectory", "data-stage": op.stage, onclick: () => showStageTrajectory(panel, genid, op.stage) }, "view")
      : html("span", { className: "hint", text: "–" });
    table.append(html("tr", {}, html("td", { text: op.stage }), html("td", { value: op.operator || "–" }), digestCell, html("td", {}, call), html("td", {}, trajectory)));
    if (op.logs) for (const name of ["stdout", "stderr", "model"]) logs.push(logBlock(op.stage, name === "model" ? "model calls" : name, op.logs[name]));
  }
  const wrap = html("div", {}, table, panel);
  const shown = logs.filter(Boolean);
  if (shown.length) wrap.append(...shown);
  else wrap.append(html("p", { className: "hint", text: "no operator output was captured for this generation" }));
  return wrap;
}

function trialsBlock(genid, ev, title) {
  const wrap = html("div", { className: "evaluation" });
  wrap.append(html("h3", { text: title }));
  wrap.append(kvTable([
    ["outcome", ev.outcome],
    ["score", fmtScore(ev.score)],
    ["attempt", ev.attempt],
    ["trials", `${ev.trials.length} (scoreable ${ev.scoreable_trials} of ${ev.expected_trials} expected)`],
    ["cost", fmtUsd(ev.cost_usd)],
    ["archive line", ev.line],
  ]));
  const table = html("table", { className: "trials" });
  // Where a trial's trajectory is drawn when its button is clicked.
  const panel = html("div", { className: "trajectory", "data-state": "empty" });
  table.append(html("tr", {}, ...["task", "trial", "status", "reward", "error", "trajectory"].map((h) => html("th", { text: h }))));
  for (const t of ev.trials) {
    const button = t.trajectory
      ? html("button", { type: "button", className: "show-trajectory", "data-task": t.task, "data-trial": t.trial, onclick: () => showTrajectory(panel, genid, ev.line, t.task, t.trial) }, "view")
      : html("span", { className: "hint", text: "–" });
    table.append(html("tr", {},
      html("td", { className: "mono", value: t.task }),
      html("td", { text: t.trial ?? "–" }),
      html("td", { value: t.status ?? "–" }),
      html("td", { text: typeof t.reward === "number" ? t.reward.toFixed(4) : "–" }),
      html("td", { value: t.error_kind || t.timeout_owner || "" }),
      html("td", {}, button)));
  }
  wrap.append(table, panel);
  return wrap;
}

// ---------------------------------------------------------------- a trial's trajectory

const tokensPhrase = (p, c, k) => `tokens ${p ?? 0} in / ${c ?? 0} out${k ? ` (${k} cached)` : ""}`;
const fmtCost = (v) => (typeof v === "number" ? `$${v.toFixed(6)}` : null);

// A JSON value as the page shows it: a string as its text, anything else as JSON (each key
// and string a value of its own).
function contentNode(v) {
  if (typeof v === "string") return value(v);
  return jsonValue(v);
}

// One ATIF step: who spoke (with model, tokens and cost), the message, the reasoning, each
// tool call with its arguments (a command's text), each observation's content (its output).
function stepNode(step) {
  const m = step.metrics || {};
  const head = [`#${step.step_id} `, html("span", { className: "source", text: step.source })];
  if (step.model_name) head.push(" · model ", value(step.model_name));
  if (typeof m.prompt_tokens === "number" || typeof m.completion_tokens === "number") head.push(` · ${tokensPhrase(m.prompt_tokens, m.completion_tokens, m.cached_tokens)}`);
  if (fmtCost(m.cost_usd)) head.push(` · ${fmtCost(m.cost_usd)}`);
  const li = html("li", { className: `step ${step.source}` }, html("div", { className: "step-head" }, ...head));
  if (step.message) li.append(html("pre", { className: "message", value: step.message }));
  if (step.reasoning_content) li.append(html("pre", { className: "reasoning" }, "reasoning: ", value(step.reasoning_content)));
  for (const call of step.tool_calls || []) {
    const args = call.arguments || {};
    const command = typeof args.command === "string" && Object.keys(args).length === 1 ? value(args.command) : jsonValue(args);
    li.append(html("div", { className: "tool-call" }, html("span", { className: "mono", value: call.function_name }), " ", html("span", { className: "hint", value: call.tool_call_id }), html("pre", { className: "arguments" }, command)));
  }
  for (const r of (step.observation && step.observation.results) || []) {
    const label = r.source_call_id ? joined(["output of ", value(r.source_call_id)], "") : "output";
    li.append(html("div", { className: "observation" }, html("span", { className: "hint" }, label), html("pre", { className: "output" }, contentNode(r.content))));
  }
  return li;
}

function renderTrajectory(panel, t) {
  const title = t.stage
    ? html("h4", {}, "Trajectory of the ", value(t.stage), " operator")
    : html("h4", {}, "Trajectory of ", value(t.task), ` trial ${t.trial}`, t.purpose ? ` (${t.purpose} evaluation, attempt ${t.attempt ?? "–"})` : "");
  panel.replaceChildren(title);
  if (!t.available) {
    panel.append(html("p", { className: "hint", value: t.why || "no trajectory" }));
    return;
  }
  const c = t.counts;
  const totals = [`${c.steps} steps · ${c.tool_calls} tool calls · ${tokensPhrase(c.prompt_tokens, c.completion_tokens, c.cached_tokens)}`];
  if (fmtCost(c.cost_usd)) totals.push(`cost ${fmtCost(c.cost_usd)}`);
  const tr = t.trajectory;
  panel.append(html("p", { className: "totals", text: totals.join(" · ") }));
  panel.append(html("p", { className: "hint" }, "agent ", value(tr.agent.name), " ", value(tr.agent.version), tr.agent.model_name ? joined([" · model ", value(tr.agent.model_name)], "") : "", " · session ", value(tr.session_id)));
  if (tr.notes) panel.append(html("pre", { className: "notes", value: tr.notes }));
  panel.append(html("ol", { className: "steps" }, ...tr.steps.map(stepNode)));
}

async function showTrajectory(panel, genid, line, task, trial) {
  panel.dataset.state = "loading";
  try {
    const enc = encodeURIComponent;
    const t = await getJSON(`/api/generations/${enc(genid)}/evaluations/${enc(line)}/trials/${enc(task)}/${enc(trial)}`);
    renderTrajectory(panel, t);
    panel.dataset.task = task;
    panel.dataset.trial = String(trial);
    panel.dataset.state = "loaded";
    showError(null);
  } catch (e) {
    panel.dataset.state = "error";
    showError(e);
  }
}

async function showStageTrajectory(panel, genid, stage) {
  panel.dataset.state = "loading";
  try {
    const enc = encodeURIComponent;
    renderTrajectory(panel, await getJSON(`/api/generations/${enc(genid)}/stages/${enc(stage)}/trajectory`));
    panel.dataset.stage = stage;
    panel.dataset.state = "loaded";
    showError(null);
  } catch (e) {
    panel.dataset.state = "error";
    showError(e);
  }
}

function renderDetail(g) {
  $("detail-title").replaceChildren("Generation ", value(g.genid), html("span", { className: `class ${g.class}`, text: g.class }), g.champion ? html("span", { className: "class kept", text: "champion" }) : "");
  // One line per changed path; the path (a name from the candidate tree) is a value.
  const changes = (g.changes || []).map((c) => joined([value(c.change || "?"), value(c.path)], " "));
  $("detail-summary").replaceChildren(kvTable([
    ["status", g.status],
    ["parent", genLink(g.parent)],
    ["score", fmtScore(g.score)],
    ["verdict", g.verdict ? joined([value(g.verdict)].concat(g.gate_reason ? [value(g.gate_reason)] : []), " — ") : null],
    ["stopped at", g.failure_stage || undefined],
    ["proposed tree", g.proposal ? joined([mono(g.proposal.tree), value(g.proposal.ref)], " on ") : undefined],
    ["reason", g.reason || undefined],
    ["parent eligible", g.eligible ? "yes" : joined(["no: ", joined(g.ineligible_because.map(value), "; ")], "")],
    ["commit", g.commit ? mono(g.commit) : null],
    ["tag gen/" + g.genid, g.tag ? mono(g.tag) : "(none)"],
    ["children", g.children],
    ["cost", `${fmtUsd(g.cost_usd)} certified · operators metered ${fmtUsd(g.usage.metered_cost_usd)}`],
    ["operator claimed", g.usage.claimed ? html("span", {}, jsonValue(g.usage.claimed)) : undefined],
    ["changed paths", changes.length ? html("pre", { className: "mono changes" }, joined(changes, "\n")) : undefined],
    ["notes", g.notes && g.notes.length ? html("span", { className: "notes" }, joined(g.notes.map(value), "\n")) : undefined],
    ["annotations", Object.keys(g.annotations || {}).length ? html("span", { className: "annotations" }, jsonValue(g.annotations)) : undefined],
  ]));
  const d = $("detail");
  d.replaceChildren(html("h3", { text: "Operators" }), operatorsBlock(g.operators, g.genid));
  if (g.evaluation) d.append(trialsBlock(g.genid, g.evaluation, `Evaluation (${g.evaluation.purpose})`));
  for (const a of g.anchors) d.append(trialsBlock(g.genid, a, "Sealed anchor"));
  const events = g.events.map((e) => html("span", {}, jsonValue(e)));
  d.append(html("details", {}, html("summary", { text: `archive events (${g.events.length})` }), html("pre", { className: "mono events" }, joined(events, "\n"))));
}

// A generation stopped before its commit: its status and reason head the diff, which is
// of the tree it proposed (kept on refs/evolve/proposed/<id>) when there is one.
function stopLine(diff) {
  const parts = [diff.proposed ? "Rejected before its commit; below is the tree it proposed: " : "Stopped before its commit: ", value(diff.status)];
  if (diff.failure_stage) parts.push(" at ", value(diff.failure_stage));
  if (diff.reason) parts.push(" — ", value(diff.reason));
  if (diff.proposed) parts.push(diff.certified ? " (the tree the archive recorded, " : " (", value(diff.ref), ")");
  return html("span", { className: "note stop" }, ...parts);
}

function renderDiff(pre, diff, genid) {
  pre.replaceChildren();
  if (diff.stopped) pre.append(stopLine(diff));
  if (!diff.available) {
    pre.append(html("span", { className: "note", value: diff.why }));
  } else if (!diff.text) {
    pre.append(html("span", { className: "note" }, "no changes between gen ", value(diff.from), " and gen ", value(diff.to)));
  } else {
    const frag = document.createDocumentFragment();
    for (const line of diff.text.split("\n")) {
      let cls = "";
      if (line.startsWith("diff --git") || line.startsWith("+++ ") || line.startsWith("--- ")) cls = "file";
      else if (line.startsWith("@@")) cls = "hunk";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      else if (line.startsWith("[diff truncated")) cls = "note";
      // A line of a candidate's patch: its file names and its content are the candidate's.
      frag.append(html("span", { className: cls, value: line }));
    }
    pre.append(frag);
  }
  pre.dataset.genid = genid;
  pre.dataset.state = "loaded";
}

async function select(genid) {
  if (!state.byId.has(genid)) return;
  state.selected = genid;
  markSelected();
  history.replaceState(null, "", `#gen-${genid}`);
  const token = ++state.detailToken;
  const pre = $("diff");
  pre.dataset.state = "loading";
  try {
    const enc = encodeURIComponent(genid);
    const [g, diff] = await Promise.all([getJSON(`/api/generations/${enc}`), getJSON(`/api/generations/${enc}/diff`)]);
    if (token !== state.detailToken) return; // a later click won
    renderDetail(g);
    renderDiff(pre, diff, genid);
    showError(null);
  } catch (e) {
    if (token === state.detailToken) { pre.dataset.state = "error"; showError(e); }
  }
}

async function loadChampionDiff() {
  const pre = $("champion-diff");
  try {
    const diff = await getJSON("/api/champion/diff");
    if (diff.available) $("champion-title").replaceChildren("Champion (gen ", value(diff.to), ") against gen 0");
    else $("champion-title").textContent = "Champion against gen 0";
    renderDiff(pre, diff, diff.to);
  } catch (e) {
    showError(e);
  }
}

// ---------------------------------------------------------------- refresh

async function refresh() {
  if (state.refreshing) return;
  state.refreshing = true;
  try {
    const s = await getJSON("/api/status");
    state.status = s;
    renderStatus(s);
    const key = `${s.integrity.lines}|${s.rows}|${s.champion ? s.champion.genid : ""}|${s.integrity.ok}`;
    if (key !== state.drawnKey) {
      state.gens = await getJSON("/api/generations");
      state.byId = new Map(state.gens.map((g) => [g.genid, g]));
      renderTree();
      renderChart();
      await loadChampionDiff();
      state.drawnKey = key;
      if (state.selected !== null && state.byId.has(state.selected)) select(state.selected);
    }
    showError(null);
  } catch (e) {
    showError(e);
  } finally {
    state.refreshing = false;
  }
}

function onNodeEvent(e) {
  const n = e.target.closest("[data-genid]");
  if (!n) return;
  if (e.type === "keydown" && e.key !== "Enter" && e.key !== " ") return;
  e.preventDefault();
  select(n.getAttribute("data-genid"));
}

document.addEventListener("DOMContentLoaded", async () => {
  $("integrity").addEventListener("click", toggleFindings);
  $("fit").addEventListener("click", toggleFit);
  $("tree").addEventListener("click", onNodeEvent);
  $("tree").addEventListener("keydown", onNodeEvent);
  $("chart").addEventListener("click", onNodeEvent);
  await refresh();
  // Open the generation the address names, else the champion.
  const m = /^#gen-(.+)$/.exec(location.hash);
  const wanted = m ? decodeURIComponent(m[1]) : null;
  if (wanted !== null && state.byId.has(wanted)) select(wanted);
  else if (state.status && state.status.champion) select(state.status.champion.genid);
  setInterval(refresh, REFRESH_MS);
});
