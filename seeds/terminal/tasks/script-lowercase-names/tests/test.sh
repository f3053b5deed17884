#!/bin/bash
# Verifier of the terminal seed's task script-lowercase-names: renaming files to lower case with collision handling.
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
d = "/tmp/lower"
shutil.rmtree(d, ignore_errors=True)
os.makedirs(d + "/SubDir")
for name in ("Report.TXT", "photo.JPG", "notes.md", "Notes.md", "My File.Txt", "SubDir/Inner.TXT"):
    with open(os.path.join(d, name), "w") as f:
        f.write(name)
r = run(["/app/lower.sh", d])
check("Report.TXT renamed", lambda: read(d + "/report.txt") == "Report.TXT")
check("photo.JPG renamed", lambda: read(d + "/photo.jpg") == "photo.JPG")
check("name with a space", lambda: read(d + "/my file.txt") == "My File.Txt")
check("collision skipped and kept", lambda: read(d + "/Notes.md") == "Notes.md"
      and read(d + "/notes.md") == "notes.md" and "skip: Notes.md" in r.stdout)
check("subdirectory untouched", lambda: os.path.isdir(d + "/SubDir") and os.path.exists(d + "/SubDir/Inner.TXT"))

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
