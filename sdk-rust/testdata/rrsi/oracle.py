#!/usr/bin/env python3
"""An independent oracle for the RRSI rules, written from the specification's text
(docs/rrsi.md and issue 31), never from the Rust code. It writes vectors.json next to
itself; sdk-rust/src/rrsi/golden.rs runs every vector against the real functions.

    python3 sdk-rust/testdata/rrsi/oracle.py   # rewrites vectors.json (deterministic)

Numbers JSON cannot hold are strings: "nan", "inf", "-inf"; computed yields are
strings too (Python's repr, parsed exactly by Rust's `str::parse`).
"""

import json
import math
import os
import random

# ---- the edit budget ---------------------------------------------------------------
# b_t = ceil(round(b_min + (b_max - b_min) * 1/2 * (1 + cos(pi * t / T)), 9)), t clamped
# to [0, T], T <= 0 gives b_max. Bounds: integers >= 1, b_min <= b_max; the guard rounds
# half to even to 9 places (Python's round), and bounds above 2^53 cannot be
# represented exactly as floats, so they are refused.

MAX_BOUND = 2 ** 53


def budget(b_min, b_max, T, t):
    for name, b in (("b_min", b_min), ("b_max", b_max)):
        if not math.isfinite(b):
            return {"error": name}
        if b <= 0 or b != int(b) or b > MAX_BOUND:
            return {"error": name}
    if b_min > b_max:
        return {"error": "inverted"}
    if T <= 0:
        v = b_max
    else:
        t = min(max(t, 0), T)
        v = b_min + (b_max - b_min) * 0.5 * (1 + math.cos(math.pi * t / T))
    return {"expect": math.ceil(round(v, 9))}


def enc(x):
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def exact(x):
    """A computed float as its shortest round-trip text, so that the reader's parser
    (not every JSON parser rounds 17-digit numbers correctly) cannot change it."""
    return enc(x) if not math.isfinite(x) else repr(x)


def schedule_vectors():
    out = []

    def add(b_min, b_max, T, t, note=""):
        v = {"b_min": enc(float(b_min)), "b_max": enc(float(b_max)), "T": T, "t": t}
        v.update(budget(float(b_min), float(b_max), T, t))
        if note:
            v["note"] = note
        out.append(v)

    # The vectors at huge bounds.
    add(1, 10 ** 15 + 1, 40, 1, "issue 31: (v*1e9).round()/1e9 is one too high")
    add(1, 10 ** 15 + 1, 31, 12, "issue 31: (v*1e9).round()/1e9 is one below v")
    add(1, 5, 3, 2, "2.0000000000000004 is 2 after the 9-place guard")
    add(1, 8, 10, 5)
    add(1, 8, 10, -3, "t clamped to 0")
    add(1, 8, 10, 99, "t clamped to T")
    add(1, 6, 0, 7, "T <= 0 gives b_max")
    add(1, 6, -5, 7)
    add(1, MAX_BOUND, 10, 3)
    for T in (1, 2, 3, 7, 10, 31, 40):
        for t in range(0, T + 1):
            add(1, 4, T, t)
            add(3, 40, T, t)
    rng = random.Random(31)
    for _ in range(400):
        lo = rng.choice([1, 2, 3, 7, 10 ** rng.randint(1, 15)])
        hi = lo + rng.choice([0, 1, 5, 99, 10 ** rng.randint(1, 15)])
        if hi > MAX_BOUND:
            continue
        T = rng.randint(1, 60)
        add(lo, hi, T, rng.randint(-2, T + 2))
    # Refused bounds.
    add(1.5, 4, 10, 1, "non-integer bound")
    add(1, 4.5, 10, 1, "non-integer bound")
    add(4, 3, 10, 1, "inverted bounds")
    add(0, 3, 10, 1)
    add(-1, 3, 10, 1)
    add(1, 1e20, 10, 1, "issue 31: 10^20 must be refused, not overflow")
    add(1, 1e20, 0, 1)
    add(1, 1e300, 5, 1)
    add(float("nan"), 3, 5, 1)
    add(1, float("inf"), 5, 1)
    return out


# ---- selection: floor, cost rule, choice ----------------------------------------------
# admissible iff floor (score >= S* - delta, no floor without S*) and the cost rule:
# dS = s - s_inc, dC = c - c_inc (0 if either cost is falsy: None or 0);
# dS > delta: dC <= beta0 + beta1*dS; else w_s*dS - w_c*dC + w_n*novelty > 0.
# Scores in [0, 1], costs finite >= 0, coefficients finite >= 0, novelty in 0..=4.
# choose: the first admissible candidate with the highest score, else the incumbent.

DEFAULT = {"noise_band": 0.0, "beta0": 0.0, "beta1": 1.0, "w_s": 1.0, "w_c": 1.0, "w_n": 0.01}


def admit(p, s_star, inc, cand):
    for k in ("noise_band", "beta0", "beta1", "w_s", "w_c", "w_n"):
        if not math.isfinite(p[k]) or p[k] < 0:
            return {"error": k}
    for what, s in (("S*", s_star), ("incumbent score", inc["score"]), ("candidate score", cand["score"])):
        if s is not None and (not math.isfinite(s) or not 0 <= s <= 1):
            return {"error": what}
    for what, c in (("incumbent cost", inc["cost"]), ("candidate cost", cand["cost"])):
        if c is not None and (not math.isfinite(c) or c < 0):
            return {"error": what}
    if not 0 <= cand["novelty"] <= 4:
        return {"error": "novelty"}
    d = p["noise_band"]
    ds = cand["score"] - inc["score"]
    missing = not inc["cost"] or not cand["cost"]
    dc = 0.0 if missing else cand["cost"] - inc["cost"]
    floor_ok = s_star is None or cand["score"] >= s_star - d
    if ds > d:
        cost_ok = dc <= p["beta0"] + p["beta1"] * ds
    else:
        cost_ok = p["w_s"] * ds - p["w_c"] * dc + p["w_n"] * cand["novelty"] > 0
    return {"admissible": floor_ok and cost_ok, "cost_missing": missing}


def choose(p, s_star, inc, cands):
    adm = []
    for i, c in enumerate(cands):
        a = admit(p, s_star, inc, c)
        if "error" in a:
            return {"error": a["error"], "candidate": i}
        adm.append(a)
    winner = None
    for i, a in enumerate(adm):
        if a["admissible"] and (winner is None or cands[i]["score"] > cands[winner]["score"]):
            winner = i
    return {"winner": winner, "admissible": [a["admissible"] for a in adm],
            "cost_missing": [a["cost_missing"] for a in adm]}


def selection_vectors():
    out = []

    def add(note, s_star, inc, cands, **params):
        p = dict(DEFAULT, **params)
        v = {"note": note, "params": {k: enc(x) for k, x in p.items()}, "s_star": enc(s_star),
             "incumbent": {k: enc(x) for k, x in inc.items()},
             "candidates": [{k: enc(x) for k, x in c.items()} for c in cands]}
        v.update(choose(p, s_star, inc, cands))
        out.append(v)

    def c(score, cost=None, novelty=0):
        return {"score": score, "cost": cost, "novelty": novelty}

    def i(score, cost=None):
        return {"score": score, "cost": cost}

    add("best admissible, first on ties; the dearest is refused", 0.5, i(0.5, 1.0),
        [c(0.6, 1.0), c(0.8, 1.1), c(0.8, 1.0), c(0.9, 9.0)])
    add("nothing admissible: the incumbent stays", 0.5, i(0.5), [c(0.4), c(0.5)])
    add("no candidates", 0.5, i(0.5), [])
    add("below the floor although the cost rule accepts", 0.8, i(0.3), [c(0.6)], noise_band=0.1)
    add("at the floor", 0.8, i(0.3), [c(0.7)], noise_band=0.1)
    add("no S*: no floor", None, i(0.3), [c(0.31)])
    add("improvement within beta0 + beta1*dS", None, i(0.3, 1.0), [c(0.4, 1.05), c(0.4, 1.5)],
        beta0=0.05, beta1=0.5)
    add("a tie needs novelty", 0.5, i(0.5, 1.0), [c(0.5, 1.0, 0), c(0.5, 1.0, 1)])
    add("cheaper at a tie is admitted", 0.5, i(0.5, 1.0), [c(0.5, 0.5)])
    add("gain inside the noise band takes the trade-off branch", 0.5, i(0.5, 0.1),
        [c(0.55, 0.2)], noise_band=0.1)
    add("cost 0 is missing: dC = 0 (candidate)", 0.5, i(0.5, 1.0), [c(0.5, 0.0, 1)])
    add("cost 0 is missing: dC = 0 (incumbent)", 0.5, i(0.5, 0.0), [c(0.6, 5.0)])
    add("cost 0 on both sides", 0.5, i(0.5, 0.0), [c(0.5, 0.0, 0)])
    add("issue 31: candidate above 1", None, i(0.5), [c(1.2)])
    add("issue 31: incumbent below 0", None, i(-0.1), [c(0.5)])
    add("S* above 1", 1.5, i(0.5), [c(0.5)])
    add("negative candidate cost", None, i(0.5), [c(0.6), c(0.7, -1.0)])
    add("negative incumbent cost", None, i(0.5, -2.0), [c(0.6)])
    add("non-finite candidate cost", None, i(0.5), [c(0.6, float("inf"))])
    add("NaN incumbent cost", None, i(0.5, float("nan")), [c(0.6)])
    add("NaN score", None, i(0.5), [c(float("nan"))])
    add("novelty above 4", None, i(0.5), [c(0.5, None, 5)])
    add("negative coefficient", None, i(0.5), [c(0.5)], w_c=-1.0)
    rng = random.Random(131)
    for _ in range(120):
        params = {"noise_band": rng.choice([0.0, 0.01, 0.05]), "beta0": rng.choice([0.0, 0.1]),
                  "beta1": rng.choice([0.0, 1.0, 2.0]), "w_n": rng.choice([0.0, 0.01, 0.5])}
        s_star = rng.choice([None, round(rng.random(), 2)])
        inc = i(round(rng.random(), 2), rng.choice([None, 0.0, round(rng.uniform(0, 2), 2)]))
        cands = [c(round(rng.random(), 2), rng.choice([None, 0.0, round(rng.uniform(0, 2), 2)]),
                   rng.randint(0, 4)) for _ in range(rng.randint(1, 4))]
        add("random", s_star, inc, cands, **params)
    return out


# ---- the per-edit history: yield, prune, stall, exploration ------------------------------
# Ledger: one entry per (attempted edit, component) -- a bundle fans out. An edit is
# measured iff it was evaluated (complete / pending-gate) and it and its parent have a
# score; dS = score - parent score, which must be finite. Unmeasured edits (vetoed,
# smoke-failed, unscored) are attempts, but stay out of the tried set and the yield.
# T_t = components with a measured entry; g_t(l) = max dS over l's measured entries
# with t - t_i <= n_prune (-inf if none); prune = {l in T_t : g_t(l) <= 0};
# U_t = K \ T_t over all six components; stalled iff t >= w and S_t - S_{t-w} <= delta
# (S_g: the best kept score of generation <= g); exploration = min(slots, |U_t|) when
# stalled, else 0. t is the latest generation of the view.

K = ["client_tool", "skill", "memory", "subagent", "prompt", "other"]
EVALUATED = ("complete", "pending-gate")


def history(rows, window, delta, slots):
    if window < 1:
        return {"error": "window"}
    if not math.isfinite(delta) or delta < 0:
        return {"error": "noise_band"}
    by_id = {r["id"]: r for r in rows}
    records = []
    for r in rows:
        if r["parent"] is None:
            continue
        comps = r["components"]
        evaluated = r["status"] in EVALUATED
        if comps is None:
            if evaluated:
                continue
            comps = []
        comps = sorted(set(comps), key=K.index)
        if not comps and evaluated:
            continue
        base = by_id.get(r["parent"], {}).get("score")
        gain = None
        if evaluated and r["score"] is not None and base is not None:
            gain = r["score"] - base
            if not math.isfinite(gain):
                return {"error": "ΔS"}
        records.append({"id": r["id"], "gen": r["generation"], "comps": comps, "gain": gain})
    t = max((r["generation"] for r in rows), default=0)
    tried = [l for l in K if any(l in e["comps"] and e["gain"] is not None for e in records)]
    yields = {}
    for l in tried:
        gains = [e["gain"] for e in records
                 if l in e["comps"] and e["gain"] is not None and t - e["gen"] <= window]
        yields[l] = max(gains) if gains else float("-inf")
    prune = [l for l in tried if yields[l] <= 0]
    untried = [l for l in K if l not in tried]

    def s_as_of(g):
        ss = [r["score"] for r in rows
              if r["verdict"] == "keep" and r["score"] is not None and r["generation"] <= g]
        return max(ss) if ss else None

    stalled = False
    if t >= window:
        a, b = s_as_of(t), s_as_of(t - window)
        stalled = a is not None and b is not None and a - b <= delta
    attempts = {l: sum(1 for e in records if l in e["comps"]) for l in K}
    return {
        "now": t,
        "yields": {l: exact(y) for l, y in yields.items()},
        "prune": prune,
        "untried": untried,
        "stalled": stalled,
        "exploration_slots": min(slots, len(untried)) if stalled else 0,
        "attempts": {l: n for l, n in attempts.items() if n},
        "total_attempts": len(records),
        "unmeasured": [e["id"] for e in records if e["gain"] is None],
    }


def row(i, parent, gen, score, comps=None, verdict="discard", status="complete"):
    return {"id": i, "parent": parent, "generation": gen, "status": status, "score": score,
            "verdict": verdict, "components": comps}


def history_vectors():
    out = []

    def add(note, rows, window=3, delta=0.0, slots=1):
        v = {"note": note, "rows": rows, "window": window, "noise_band": enc(delta), "slots": slots}
        v.update(history(rows, window, delta, slots))
        out.append(v)

    g0 = row("0", None, 0, 0.30, verdict="keep")
    add("issue 31: +0.10 then -0.20 is yield 0.10 (max, not the sum), not pruned",
        [g0, row("1", "0", 1, 0.40, ["skill"], "keep"), row("2", "1", 2, 0.20, ["skill"])])
    add("issue 31: two gains of +0.05 give 0.05",
        [g0, row("1", "0", 1, 0.35, ["memory"]), row("2", "0", 2, 0.35, ["memory"])])
    base = row("0", None, 0, 0.5, verdict="keep")
    add("issue 31: +0.2 at t_i = 7, t = 10, n = 3 is in the window (t - t_i <= n)",
        [base, row("7", "0", 7, 0.7, ["skill"]), row("10", "0", 10, 0.5)], window=3)
    add("t - t_i = n + 1 is outside the window: -inf, pruned",
        [base, row("6", "0", 6, 0.7, ["skill"]), row("10", "0", 10, 0.5)], window=3)
    add("issue 31: all four structural components tried: prompt and other stay untried and"
        " get the exploration slots",
        [row("0", None, 0, 0.4, verdict="keep"),
         row("1", "0", 1, 0.4, ["client_tool"]), row("2", "0", 2, 0.4, ["skill"]),
         row("3", "0", 3, 0.4, ["memory"]), row("4", "0", 4, 0.4, ["subagent"])],
        window=2, slots=3)
    add("min(slots, untried) when fewer components are untried than slots",
        [row("0", None, 0, 0.4, verdict="keep"),
         row("1", "0", 1, 0.4, ["client_tool", "skill", "memory"]),
         row("2", "0", 2, 0.4, ["subagent", "prompt"])],
        window=2, slots=4)
    add("a bundle fans out: each component gets the edit's dS",
        [g0, row("1", "0", 1, 0.45, ["skill", "memory", "skill"], "keep")])
    add("unmeasured records are attempts, not tried and not in the yield",
        [g0, row("1", "0", 1, None, ["skill"], None, "candidate-invalid"),
         row("2", "0", 2, None, None, None, "rejected-validation"),
         row("3", "0", 3, 0.25, ["memory"])])
    add("a veto with a measurement attached stays rejected",
        [g0, row("1", "0", 1, 0.9, ["skill"], None, "rejected-validation"),
         row("2", "0", 2, 0.9, ["memory"], None, "rejected-duplicate")])
    add("an unscored parent leaves the edit unmeasured",
        [row("0", None, 0, None, verdict="keep"), row("1", "0", 1, 0.5, ["skill"])])
    add("stalled: S_t - S_{t-w} <= delta",
        [g0, row("1", "0", 1, 0.40, ["skill"], "keep"), row("2", "1", 2, 0.35, ["memory"]),
         row("3", "1", 3, 0.40, ["prompt"]), row("4", "1", 4, 0.38, ["skill"]),
         row("5", "1", 5, 0.40, ["prompt"])], window=3, slots=2)
    add("not stalled while improving",
        [g0, row("1", "0", 1, 0.40, ["skill"], "keep"), row("2", "1", 2, 0.35, ["memory"]),
         row("3", "1", 3, 0.40, ["prompt"]), row("4", "1", 4, 0.38, ["skill"]),
         row("5", "1", 5, 0.40, ["prompt"])], window=5, slots=2)
    add("a noise band as wide as the gain is a stall",
        [g0, row("1", "0", 1, 0.40, ["skill"], "keep"), row("2", "1", 2, 0.35, ["memory"])],
        window=2, delta=0.11)
    add("younger than the window: never stalled",
        [g0, row("1", "0", 1, 0.30, ["skill"])], window=2)
    add("untagged evaluated children are not in the ledger",
        [g0, row("1", "0", 1, 0.9), row("2", "0", 2, 0.3, [])])
    add("a non-finite dS is refused",
        [row("0", None, 0, -1.7e308, verdict="keep"), row("1", "0", 1, 1.7e308, ["skill"])])
    add("empty archive", [])
    add("window 0 is refused", [g0], window=0)
    add("a negative noise band is refused", [g0], delta=-0.1)
    rng = random.Random(231)
    statuses = ["complete"] * 6 + ["pending-gate", "candidate-invalid", "rejected-validation",
                                   "timeout"]
    for _ in range(60):
        rows = [row("0", None, 0, round(rng.random(), 2), verdict="keep")]
        for g in range(1, rng.randint(1, 14)):
            parent = rng.choice(rows)["id"]
            status = rng.choice(statuses)
            score = round(rng.random(), 2) if status in EVALUATED or rng.random() < 0.2 else None
            comps = rng.choice([None, [], *[[l] for l in K],
                                rng.sample(K, rng.randint(1, 3))])
            verdict = (rng.choice(["keep", "discard"]) if status == "complete" else None)
            rows.append(row(str(g), parent, g, score, comps, verdict, status))
        add("random", rows, window=rng.randint(1, 5), delta=rng.choice([0.0, 0.05]),
            slots=rng.randint(0, 4))
    return out


def main():
    vectors = {
        "schedule": schedule_vectors(),
        "selection": selection_vectors(),
        "history": history_vectors(),
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors.json")
    with open(path, "w") as f:
        json.dump(vectors, f, indent=1, ensure_ascii=False, allow_nan=False)
        f.write("\n")
    print(f"{path}: " + ", ".join(f"{len(v)} {k}" for k, v in vectors.items()))


if __name__ == "__main__":
    main()
