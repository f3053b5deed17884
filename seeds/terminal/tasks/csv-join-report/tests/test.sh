#!/bin/bash
# Verifier of the terminal seed's task csv-join-report: joining two CSV tables and ranking customers.
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


want = ['Ana,3,50.00', 'Ben,2,50.00', 'Caro,1,5.25', 'Dev,0,0.00']
got = lambda: lines("/app/report.csv")
check("header", lambda: got()[0] == "name,orders,total")
for row in want:
    check(row, lambda row=row: row in got()[1:])
check("order", lambda: got()[1:] == want)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
