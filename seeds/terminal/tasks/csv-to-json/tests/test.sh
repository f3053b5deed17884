#!/bin/bash
# Verifier of the terminal seed's task csv-to-json: converting CSV rows to typed JSON objects.
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


want = [{"id": 1, "name": "Ada Lovelace", "email": "ada@example.com", "age": 36, "active": True}, {"id": 2, "name": "Alan Turing", "email": "alan@example.com", "age": 41, "active": False}, {"id": 3, "name": "Grace Hopper", "email": "grace@example.com", "age": 85, "active": True}, {"id": 4, "name": "Linus Torvalds", "email": "linus@example.com", "age": 56, "active": True}]
got = lambda: json.loads(read("/app/users.json"))
check("an array of %d objects" % len(want), lambda: isinstance(got(), list) and len(got()) == len(want))
for i, w in enumerate(want):
    check("row %d" % (i + 1), lambda i=i, w=w: got()[i] == w and type(got()[i]["age"]) is int
          and type(got()[i]["active"]) is bool)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
