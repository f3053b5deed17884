#!/usr/bin/env python3
"""Regenerate the RSIHub golden tables of the operators named after RSIHub's.

    python3 tests/rsihub_golden.py /path/to/RSIHub-checkout

The checkout is RSIHub (github.com/simple-agent-lab/RSIHub); its commit is recorded in
each table. This script holds no RSIHub code: it designs the inputs, runs RSIHub's own
`library/` operators on them (imported from the checkout) and writes what they return to

    operators/gate/hillclimb/tests/rsihub_golden.json
    operators/validate/minibatch_improvement/tests/rsihub_golden.json
    operators/novelty/diff_similarity/tests/rsihub_golden.json

Each operator's unit tests read its table and must reproduce every row. The
`sequence_matcher` section of the diff_similarity table comes from the standard
library's difflib (Python version recorded), for the crate's own SequenceMatcher.

RSIHub's package imports the `harbor` CLI's Python package at import time, which none of
the three operators uses on these paths; a placeholder module stands in for it so the
checkout imports without installing Harbor.
"""

import difflib
import importlib.abc
import importlib.machinery
import json
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class _Placeholder:
    def __init__(self, *args, **kwargs):
        pass

    def __class_getitem__(cls, item):
        return cls


class _HarborPlaceholder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any `harbor.*` import yields an empty package whose attributes are classes."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "harbor":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: type(attr, (_Placeholder,), {})
        return module

    def exec_module(self, module):
        pass


def load(checkout: Path):
    sys.meta_path.insert(0, _HarborPlaceholder())
    sys.path[:0] = [str(checkout / "src"), str(checkout)]
    import library.gate.hillclimb as hillclimb
    import library.novelty.diff_similarity as diff_similarity
    import library.validate.minibatch_improvement as minibatch

    return hillclimb, minibatch, diff_similarity


def commit_of(checkout: Path) -> str:
    out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    if out.returncode == 0:
        return out.stdout.strip()
    marker = checkout / "COMMIT"
    if marker.exists():
        return marker.read_text().strip()
    sys.exit(f"cannot tell the commit of {checkout}: not a git checkout and no COMMIT file")


def header(commit: str, what: str) -> dict:
    return {
        "source": "github.com/simple-agent-lab/RSIHub",
        "commit": commit,
        "operator": what,
        "generated_by": "tests/rsihub_golden.py",
        "python": sys.version.split()[0],
    }


# ---------------------------------------------------------------- gate/hillclimb

def hillclimb_rows(hillclimb):
    cases = [
        # (name, config, child score, parent: None = no parent row, else its score)
        ("greater", {}, 0.5, 0.4),
        ("tie", {}, 0.5, 0.5),
        ("less", {}, 0.3, 0.4),
        ("tie strict", {"strict": True}, 0.5, 0.5),
        ("greater strict", {"strict": True}, 0.5, 0.4),
        ("less strict", {"strict": True}, 0.3, 0.4),
        ("tie non-strict explicit", {"strict": False}, 0.5, 0.5),
        ("no parent", {}, 0.7, "none"),
        ("no parent strict", {"strict": True}, 0.7, "none"),
        ("no parent, unscored child", {}, None, "none"),
        ("parent without score", {}, 0.9, None),
        ("both unscored", {}, None, None),
        ("unscored child vs parent 0.0", {}, None, 0.0),
        ("unscored child vs parent 0.0 strict", {"strict": True}, None, 0.0),
        ("unscored child vs parent 0.1", {}, None, 0.1),
        ("unscored child vs negative parent", {}, None, -0.5),
        ("zero vs zero", {}, 0.0, 0.0),
        ("zero vs zero strict", {"strict": True}, 0.0, 0.0),
        ("float sum vs literal", {"strict": True}, 0.1 + 0.2, 0.3),
        ("one ulp below", {}, 0.3, 0.30000000000000004),
        ("negative scores", {}, -0.2, -0.3),
        ("perfect tie", {"strict": True}, 1.0, 1.0),
    ]
    rows = []
    for name, config, child, parent in cases:
        child_row = {"genid": "2", "score": child, "task_set_hash": "h"}
        parent_row = None if parent == "none" else {"genid": "1", "score": parent}
        ctx = types.SimpleNamespace(config=config)
        result = hillclimb.HillclimbGate().decide(child_row, parent_row, ctx)
        rows.append(
            {
                "name": name,
                "config": config,
                "child_score": child,
                "parent": None if parent_row is None else {"score": parent},
                "keep": result.decision == "accept",
                "rsihub_reason": result.reason,
            }
        )
    return rows


# ---------------------------------------------------------------- validate/minibatch_improvement

def outcome(trial: dict) -> tuple[str, float | None]:
    """A project trial report as RSIHub's Harbor evidence records it: a trial with a
    reward passed or failed; without one an infrastructure failure is `infra_error`, a
    timeout or a candidate failure (an exception in the agent) `agent_error`, and a
    trial that ended with neither reward nor exception (or was cancelled) `incomplete`."""
    reward = trial.get("reward")
    status = trial["status"]
    if status == "infrastructure-failed":
        return "infra_error", reward
    if status == "cancelled":
        return "incomplete", reward
    if reward is not None:
        return ("passed" if reward >= 1.0 else "failed"), reward
    if status in ("timeout", "candidate-invalid"):
        return "agent_error", None
    return "incomplete", None


def cases_of(trials: list[dict]) -> list[dict]:
    out = []
    for t in trials:
        oc, reward = outcome(t)
        out.append(
            {
                "task_name": t["task"],
                "trial_name": f"{t['task']}__{t.get('repetition', 0)}",
                "outcome": oc,
                "reward": reward,
            }
        )
    return out


def done(task, reward, rep=0):
    return {"task": task, "repetition": rep, "status": "benchmark-complete", "reward": reward}


def trial(task, status, reward=None, rep=0):
    return {"task": task, "repetition": rep, "status": status, "reward": reward}


def minibatch_rows(minibatch):
    cases = [
        ("child better", {}, [done("a", 0.0), done("b", 1.0)], [done("a", 1.0), done("b", 1.0)]),
        ("tie strict", {}, [done("a", 0.5), done("b", 1.0)], [done("a", 1.0), done("b", 0.5)]),
        ("tie non_decreasing", {"criterion": "non_decreasing"}, [done("a", 0.5)], [done("a", 0.5)]),
        ("child worse", {"criterion": "non_decreasing"}, [done("a", 1.0)], [done("a", 0.0)]),
        ("child worse strict", {"criterion": "strict"}, [done("a", 1.0), done("b", 0.0)], [done("a", 0.0), done("b", 0.0)]),
        (
            "child timeout without reward",
            {},
            [done("a", 0.0), done("b", 0.0)],
            [done("a", 1.0), trial("b", "timeout")],
        ),
        (
            "child timeout with reward",
            {},
            [done("a", 0.0), done("b", 0.0)],
            [done("a", 1.0), trial("b", "timeout", 0.0)],
        ),
        (
            "child candidate-invalid without reward",
            {"criterion": "non_decreasing"},
            [done("a", 0.0), done("b", 0.0)],
            [done("a", 1.0), trial("b", "candidate-invalid")],
        ),
        (
            "parent timeout",
            {},
            [done("a", 0.0), trial("b", "timeout")],
            [done("a", 1.0), done("b", 1.0)],
        ),
        (
            "parent infrastructure failure",
            {},
            [done("a", 0.0), trial("b", "infrastructure-failed")],
            [done("a", 1.0), done("b", 1.0)],
        ),
        (
            "child infrastructure failure",
            {},
            [done("a", 0.0), done("b", 0.0)],
            [done("a", 1.0), trial("b", "infrastructure-failed")],
        ),
        (
            "child cancelled",
            {},
            [done("a", 0.0)],
            [trial("a", "cancelled")],
        ),
        (
            "child completed without reward",
            {},
            [done("a", 0.0)],
            [trial("a", "benchmark-complete")],
        ),
        (
            "repetitions averaged per task, totals summed",
            {},
            [done("a", 1.0, 0), done("a", 0.0, 1), done("b", 0.5)],
            [done("a", 1.0, 0), done("a", 1.0, 1), done("b", 0.0)],
        ),
        (
            "sum of means, not mean of trials",
            {"criterion": "non_decreasing"},
            [done("a", 1.0, 0), done("a", 1.0, 1), done("a", 1.0, 2), done("b", 0.0)],
            [done("a", 0.0), done("b", 1.0, 0), done("b", 1.0, 1), done("b", 1.0, 2)],
        ),
        (
            "float totals",
            {},
            [done("a", 0.3), done("b", 0.0)],
            [done("a", 0.1), done("b", 0.2)],
        ),
        (
            "one repetition unscorable",
            {},
            [done("a", 0.0, 0), done("a", 0.0, 1)],
            [done("a", 1.0, 0), trial("a", "timeout", None, 1)],
        ),
    ]
    rows = []
    for name, config, parent, child in cases:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            (run_dir / "rollout").mkdir(parents=True)
            (run_dir / "rollout" / "cases.json").write_text(json.dumps(cases_of(parent)))
            child_cases = cases_of(child)

            class ChildRollout:
                def rollout(self, checkout, ctx):
                    path = ctx.run_dir / "rollout" / "cases.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(child_cases))
                    return types.SimpleNamespace(summary={}, artifacts=[])

            minibatch.HarborRollout = ChildRollout
            ctx = minibatch.OperatorContext(
                workspace=Path(tmp),
                checkout=Path(tmp),
                run_dir=run_dir,
                genid="3",
                parent="1",
                round=1,
                fan_out=1,
                config=config,
                rng=random.Random(0),
            )
            result = minibatch.MinibatchImprovementValidate().validate(Path(tmp), ctx)
            comparison = json.loads((run_dir / "validate" / "comparison.json").read_text())
        rows.append(
            {
                "name": name,
                "config": config,
                "parent_trials": parent,
                "child_trials": child,
                "accept": result.accept,
                "complete": comparison["comparison_complete"],
                "parent_total": comparison["parent_total"],
                "child_total": comparison["child_total"],
                "rsihub_reason": result.reason,
            }
        )
    return rows


# ---------------------------------------------------------------- novelty/diff_similarity

def patch(path, body, index="1111111..2222222"):
    return f"diff --git a/{path} b/{path}\nindex {index} 100644\n--- a/{path}\n+++ b/{path}\n{body}"


FOUR = "@@ -1,4 +1,4 @@\n-alpha = 1\n+alpha = 2\n-beta = 1\n+beta = 2\n-gamma = 1\n+gamma = 2\n-delta = 1\n+delta = 2\n"
THREE_OF_FOUR = "@@ -1,4 +1,4 @@\n-alpha = 1\n+alpha = 2\n-beta = 1\n+beta = 2\n-gamma = 1\n+gamma = 2\n-omega = 7\n+omega = 9\n"
PROMPT = (
    "@@ -3,7 +3,8 @@ SYSTEM_PROMPT = (\n"
    '     "You are a careful assistant.\\n"\n'
    '-    "Answer in one line.\\n"\n'
    '+    "Answer in one line, and show the final number on its own line.\\n"\n'
    '+    "Double-check arithmetic before answering.\\n"\n'
    ' )\n'
    ' \n'
    ' def solve(task):\n'
    '-    return ask(SYSTEM_PROMPT, task)\n'
    '+    return ask(SYSTEM_PROMPT, task, temperature=0.2)\n'
)
UNRELATED = (
    "@@ -10,3 +10,6 @@ def load(path):\n"
    "     with open(path) as f:\n"
    "-        return json.load(f)\n"
    "+        data = json.load(f)\n"
    "+    if not isinstance(data, dict):\n"
    "+        raise ValueError(f'{path}: expected an object')\n"
    "+    return data\n"
)


def diff_rows(diff_similarity):
    p = patch("target/agent.py", PROMPT)
    q = patch("target/other.py", PROMPT)
    u = patch("target/io.py", UNRELATED)
    f4 = patch("target/p.py", FOUR)
    f3 = patch("target/p.py", THREE_OF_FOUR)
    uni = patch("target/é.md", "@@ -1 +1 @@\n-naïve café — ok\n+naïve café — fine ✓\n")
    uni2 = patch("target/é.md", "@@ -1 +1 @@\n-naïve café — ok\n+naïve café — good ✓\n")
    small_a = patch("t.txt", "@@ -1 +1 @@\n-a\n+b\n")
    small_b = patch("t.txt", "@@ -1 +1 @@\n-a\n+c\n")
    many = [patch(f"target/f{i}.py", f"@@ -1 +1 @@\n-x = {i}\n+x = {i + 100}\n") for i in range(12)]
    cases = [
        # (name, config, candidate, recent accepted newest first)
        ("nothing to compare", {}, p, []),
        ("identical", {}, p, [p]),
        ("same change in another file", {}, q, [p]),
        ("same change in another file, threshold 0.9", {"threshold": 0.9}, q, [p]),
        ("3 of 4 shared lines", {}, f3, [f4]),
        ("3 of 4 shared lines, threshold 0.9", {"threshold": 0.9}, f3, [f4]),
        ("one character changed", {}, patch("target/agent.py", PROMPT.replace("0.2", "0.3")), [p]),
        ("unrelated", {}, u, [p]),
        ("best of several", {}, p, [u, f4, q]),
        ("empty candidate", {}, "", [p]),
        ("whitespace-only candidate", {}, "\n  \n", [p]),
        ("empty past diff skipped", {}, p, ["", "  \n"]),
        ("unicode", {}, uni, [uni2]),
        ("short diffs, no autojunk", {"threshold": 0.5}, small_a, [small_b]),
        ("history_k 2 misses the third", {"history_k": 2}, p, [u, f4, p]),
        ("default history_k covers 8", {}, many[0], many[1:8] + [many[0]]),
        ("default history_k misses the 9th", {}, many[0], many[1:9] + [many[0]]),
        ("threshold 0 rejects all", {"threshold": 0.0}, u, []),
        ("threshold 1 accepts a near duplicate", {"threshold": 1.0}, q, [p]),
        ("threshold 1 rejects identical", {"threshold": 1.0}, p, [p]),
    ]
    rows = []
    for name, config, candidate, recent in cases:
        with tempfile.TemporaryDirectory() as tmp:
            workspace = Path(tmp) / "ws"
            checkout = Path(tmp) / "checkout"
            workspace.mkdir()
            checkout.mkdir()
            oldest_first = list(reversed(recent))
            past = {}
            lines = []
            for i, text in enumerate(oldest_first, start=1):
                past[(f"gen/{i - 1}", f"gen/{i}")] = text
                lines.append(json.dumps({"genid": str(i), "valid_parent": True, "tag": f"gen/{i}", "parent": str(i - 1)}))
            (workspace / "archive.jsonl").write_text("\n".join(lines) + ("\n" if lines else ""))

            def git(repo, *args, _past=past, _candidate=candidate, _checkout=checkout):
                if Path(repo) == _checkout and args == ("diff", "HEAD"):
                    return _candidate
                return _past[(args[1], args[2])]

            diff_similarity._git = git
            ctx = types.SimpleNamespace(workspace=workspace, config=config)
            result = diff_similarity.DiffSimilarityNovelty().assess(checkout, ctx)
        rows.append(
            {
                "name": name,
                "config": config,
                "patch": candidate,
                "recent_accepted": recent,
                "novelty": result.novelty,
                "accept": result.accept,
            }
        )
    return rows


def matcher_rows():
    rng = random.Random(20260)
    pairs = [
        ("", ""),
        ("", "abc"),
        ("abcd", "bcde"),
        ("abxcd", "abcd"),
        ("private Thread currentThread;", "private volatile Thread currentThread;"),
        ("qabxcd", "abycdf"),
        (" abcd", "abcd abcd"),
        ("naïve café ✓", "naive cafe ✓"),
    ]
    # Around and past the autojunk length (200 items in b), over small alphabets, so
    # popular elements appear and matches must be extended across them.
    for n, alphabet in [(199, "ab"), (200, "ab"), (201, "abc"), (450, "abcdefgh"), (1200, "ab \n"), (3000, "abcdefghij\n")]:
        a = "".join(rng.choice(alphabet) for _ in range(n))
        b = list(a)
        for _ in range(n // 10):
            b[rng.randrange(len(b))] = rng.choice(alphabet)
        pairs.append((a, "".join(b)))
        pairs.append(("".join(rng.choice(alphabet) for _ in range(n // 2)), a))
    pairs.append(("x" * 250, "x" * 300))
    pairs.append(("y" + "x" * 250, "x" * 300 + "y"))
    pairs.append((patch("target/other.py", PROMPT), patch("target/agent.py", PROMPT)))
    pairs.append((patch("target/p.py", THREE_OF_FOUR), patch("target/p.py", FOUR)))
    rows = []
    for a, b in pairs:
        sm = difflib.SequenceMatcher(None, a, b)
        rows.append(
            {
                "a": a,
                "b": b,
                "matches": sum(block.size for block in sm.get_matching_blocks()),
                "ratio": sm.ratio(),
            }
        )
    return rows


def write(rel: str, table: dict) -> None:
    path = REPO / rel
    path.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {rel}: {len(table['rows'])} rows")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: rsihub_golden.py RSIHUB_CHECKOUT")
    checkout = Path(sys.argv[1]).resolve()
    commit = commit_of(checkout)
    hillclimb, minibatch, diff_similarity = load(checkout)
    write(
        "operators/gate/hillclimb/tests/rsihub_golden.json",
        {**header(commit, "library/gate/hillclimb.py"), "rows": hillclimb_rows(hillclimb)},
    )
    write(
        "operators/validate/minibatch_improvement/tests/rsihub_golden.json",
        {
            **header(commit, "library/validate/minibatch_improvement.py"),
            "trial_to_case": "see outcome() in tests/rsihub_golden.py",
            "rows": minibatch_rows(minibatch),
        },
    )
    write(
        "operators/novelty/diff_similarity/tests/rsihub_golden.json",
        {
            **header(commit, "library/novelty/diff_similarity.py"),
            "rows": diff_rows(diff_similarity),
            "sequence_matcher": matcher_rows(),
        },
    )


if __name__ == "__main__":
    main()
