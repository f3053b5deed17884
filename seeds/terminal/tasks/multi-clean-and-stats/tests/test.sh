#!/bin/bash
# Verifier of the terminal seed's task multi-clean-and-stats: a reusable cleaning script, its output and statistics.
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


want_clean = ['sensor,celsius', 's1,21.5', 's3,19.0', 's4,23.25', 's2,-3.5', 's3,30']
stats = lambda: json.loads(read("/app/stats.json"))
check("clean.csv", lambda: lines("/app/clean.csv") == want_clean)
other = "sensor,celsius\na,1\nb,x\nc,-2.5\nd,3.\n"
check("clean.sh on other input",
      lambda: run(["/app/clean.sh"], input=other).stdout.split() == ["sensor,celsius", "a,1", "c,-2.5"])
check("count", lambda: stats()["count"] == 5)
check("min and max", lambda: abs(stats()["min"] - -3.5) < 1e-9 and abs(stats()["max"] - 30.0) < 1e-9)
check("mean", lambda: abs(stats()["mean"] - 18.05) < 0.005)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
