#!/bin/bash
# Verifier of the terminal seed's task files-project-tree: a project layout of directories and files.
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


p = "/app/project"
for d in ("src", "tests", "docs"):
    check("dir " + d, lambda d=d: os.path.isdir(os.path.join(p, d)))
check("src/main.py", lambda: read(p + "/src/main.py").strip() == 'print("hello")')
check("tests/__init__.py empty", lambda: os.path.getsize(p + "/tests/__init__.py") == 0)
check("README.md", lambda: lines(p + "/README.md")[0] == "# project")
check("docs/.keep empty", lambda: os.path.getsize(p + "/docs/.keep") == 0)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
