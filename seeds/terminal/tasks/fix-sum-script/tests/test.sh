#!/bin/bash
# Verifier of the terminal seed's task fix-sum-script: repairing a shell script that sums numbers.
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


cases = [("1\n2\n3\n", "sum: 6"), ("10\n-4\n", "sum: 6"), ("5\n7", "sum: 12"), ("", "sum: 0"),
         ("100\n200\n300\n400\n", "sum: 1000")]
for i, (text, want) in enumerate(cases):
    path = "/tmp/sum input %d.txt" % i  # a space in the name: the argument must be quoted
    with open(path, "w") as f:
        f.write(text)
    check("case %d" % i, lambda path=path, want=want: run(["/app/sum.sh", path]).stdout.strip() == want)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
