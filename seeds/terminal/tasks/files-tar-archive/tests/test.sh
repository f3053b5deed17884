#!/bin/bash
# Verifier of the terminal seed's task files-tar-archive: building a gzipped tar archive with relative paths.
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


import tarfile
def members():
    with tarfile.open("/app/data.tar.gz", "r:gz") as t:
        return {m.name.rstrip("/"): (t.extractfile(m).read().decode().strip() if m.isfile() else None)
                for m in t.getmembers()}
check("gzip tar archive", lambda: tarfile.is_tarfile("/app/data.tar.gz"))
for name, value in (("one", "1"), ("two", "2"), ("three", "3")):
    check("data/%s.txt in archive" % name,
          lambda name=name, value=value: members().get("data/%s.txt" % name) == value)
check("no absolute paths", lambda: not any(n.startswith("/") or n.startswith("app/") for n in members()))

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
