#!/bin/bash
# Verifier of the terminal seed's task csv-region-totals: summing a CSV column per group.
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


want = ['east,210.00', 'north,200.00', 'south,179.75', 'west,60.00']
got = lambda: lines("/app/totals.csv")
check("header", lambda: got()[0] == "region,total")
for row in want:
    check(row, lambda row=row: row in got()[1:])
check("sorted, nothing else", lambda: got()[1:] == want)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
