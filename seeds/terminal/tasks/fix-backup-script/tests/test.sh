#!/bin/bash
# Verifier of the terminal seed's task fix-backup-script: repairing a backup script that breaks on spaces and existing directories.
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


import shutil
src, dst = "/tmp/bk src", "/tmp/bk dst"
shutil.rmtree(src, ignore_errors=True); shutil.rmtree(dst, ignore_errors=True)
os.makedirs(src); os.makedirs(dst)
with open(dst + "/old.bak", "w") as f:
    f.write("old")
for name in ("a.txt", "my notes.txt", "skip.log"):
    with open(os.path.join(src, name), "w") as f:
        f.write(name)
r = None
def backup():
    global r
    r = run(["/app/backup.sh", src, dst])
    return r.returncode == 0
check("runs with an existing destination", backup)
check("a.txt.bak", lambda: read(dst + "/a.txt.bak") == "a.txt")
check("my notes.txt.bak", lambda: read(dst + "/my notes.txt.bak") == "my notes.txt")
check("skip.log not copied", lambda: r.returncode == 0 and not os.path.exists(dst + "/skip.log.bak"))
check("reports copied 2 files", lambda: r.stdout.strip() == "copied 2 files")

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
