#!/bin/bash
# Verifier of the terminal seed's task script-greet-usage: argument checking, stderr and exit codes.
# Reward = the fraction of the checks below that pass (printed to test-stdout.txt).
mkdir -p /logs/verifier
python3 - <<'PY'
import json, os, stat, subprocess

passed = []


def check(name, fn):
    try:
        ok = bool(fn())
    except Exception as e:  # a missing or malformed output fails its check only
        print("error in %s: %s" % (name, e))
        ok = False
    passed.append(ok)
    print("PASS" if ok else "FAIL", name)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def lines(path):
    return [l.rstrip() for l in read(path).strip().splitlines()]


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=10, **kw)


g = lambda *a: run(["/app/greet.sh", *a])
check("greets", lambda: g("Ada").stdout == "Hello, Ada!\n" and g("Ada").returncode == 0)
check("keeps spaces", lambda: g("Ada Lovelace").stdout.strip() == "Hello, Ada Lovelace!")
check("no argument: exit 2", lambda: g().returncode == 2)
check("no argument: usage on stderr only",
      lambda: "usage: greet.sh NAME" in g().stderr and g().stdout == "")
check("two arguments: exit 2", lambda: g("a", "b").returncode == 2)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
