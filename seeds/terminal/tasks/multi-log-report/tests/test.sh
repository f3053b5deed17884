#!/bin/bash
# Verifier of the terminal seed's task multi-log-report: a log summary in JSON plus an extracted error log.
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


log = '2026-03-01T10:00:00 INFO service started\n2026-03-01T10:00:05 WARN disk usage at 81%\n2026-03-01T10:01:10 ERROR database timeout after 30s\n2026-03-01T10:01:11 INFO retrying connection\n2026-03-01T10:01:12 ERROR database timeout after 30s\n2026-03-01T10:02:00 INFO request served\n2026-03-01T10:03:30 ERROR cache miss storm\n2026-03-01T10:04:00 WARN slow request 2.3s\n2026-03-01T10:05:00 INFO request served\n2026-03-01T10:06:00 DEBUG heartbeat'
summary = lambda: json.loads(read("/app/report/summary.json"))
check("app.log saved", lambda: lines("/app/app.log") == log.split("\n"))
check("errors.log", lambda: lines("/app/report/errors.log") == ['2026-03-01T10:01:10 ERROR database timeout after 30s', '2026-03-01T10:01:12 ERROR database timeout after 30s', '2026-03-01T10:03:30 ERROR cache miss storm'])
check("total", lambda: summary()["total"] == 10)
check("by_level", lambda: summary()["by_level"] == {'INFO': 4, 'WARN': 2, 'ERROR': 3, 'DEBUG': 1})
check("first_error", lambda: summary()["first_error"] == '2026-03-01T10:01:10')

with open("/logs/verifier/reward.txt", "w") as f:
    f.write("%.6f\n" % (sum(passed) / len(passed)))
PY
# python3 itself failing leaves no reward: score 0 rather than an unscored trial.
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
