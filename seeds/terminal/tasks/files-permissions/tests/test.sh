#!/bin/bash
# Verifier of the terminal seed's task files-permissions: file modes and an executable script.
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


mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)
check("hello.sh mode 755", lambda: mode("/app/bin/hello.sh") == 0o755)
check("hello.sh prints ok", lambda: run(["/app/bin/hello.sh"]).stdout.strip() == "ok")
check("secret.txt content", lambda: read("/app/secret.txt").strip() == "token-42")
check("secret.txt mode 600", lambda: mode("/app/secret.txt") == 0o600)
check("shared mode 750", lambda: os.path.isdir("/app/shared") and mode("/app/shared") == 0o750)

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
