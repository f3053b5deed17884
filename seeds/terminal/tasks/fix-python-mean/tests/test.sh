#!/bin/bash
# Verifier of the terminal seed's task fix-python-mean: repairing a Python script that averages numbers.
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


mean = lambda *args: run(["python3", "/app/mean.py", *args])
check("1 2 3 4", lambda: mean("1", "2", "3", "4").stdout.strip() == "2.50")
check("first value counts", lambda: mean("10", "0").stdout.strip() == "5.00")
check("decimals", lambda: mean("2.5", "3.5", "4").stdout.strip() == "3.33")
check("one value", lambda: mean("7").stdout.strip() == "7.00")
check("no numbers", lambda: (lambda r: r.returncode == 1 and "no numbers" in r.stderr)(mean()))

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
