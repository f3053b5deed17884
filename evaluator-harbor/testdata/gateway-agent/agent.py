#!/usr/bin/python3
"""A stdlib-only agent for the engine tests: it asks its model (through the gateway at
OPENAI_BASE_URL, with the trial's OPENAI_API_KEY) what to do, runs the tool calls it gets,
and writes a report to its logs folder. Optional, from agent.toml's [env]:

  PROBE_TARGETS='[["host", port], ...]'  also try to connect there, and to the ports next
                                        to the gateway's; every attempt is reported
  WRITE_TRAJECTORY=1 | bad              write its own ATIF trajectory (or garbage)
"""
import hashlib
import json
import os
import socket
import sys
import urllib.error
import urllib.request

BASE = os.environ.get("OPENAI_BASE_URL", "")
KEY = os.environ.get("OPENAI_API_KEY", "")
LOGS = os.environ.get("EVOLVE_AGENT_LOGS_DIR", "/logs/agent")
TOOLS = [{"type": "function", "function": {
    "name": "write_file",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}}}}]


def chat(messages):
    body = json.dumps({"model": "test-model", "messages": messages, "tools": TOOLS}).encode()
    req = urllib.request.Request(BASE + "/chat/completions", data=body, headers={
        "Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.load(r)["choices"][0]["message"]


def probe(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()


def sha(name):
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


report = {
    "base_url": BASE,
    "api_base_matches": os.environ.get("OPENAI_API_BASE") == BASE,
    "agent_secret_sha256": sha("EVOLVE_TEST_AGENT_SECRET"),
    "sees_verifier_secret": "EVOLVE_TEST_VERIFIER_SECRET" in os.environ,
}
instruction = sys.stdin.read()
messages = [{"role": "system", "content": "You are a test agent."},
            {"role": "user", "content": instruction}]
own_steps = [{"step_id": 1, "source": "user", "message": instruction}]
try:
    while True:
        answer = chat(messages)
        messages.append(answer)
        calls = answer.get("tool_calls") or []
        step = {"step_id": len(own_steps) + 1, "source": "agent",
                "message": answer.get("content") or "",
                "metrics": {"prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0}}
        own_steps.append(step)
        if not calls:
            break
        step["tool_calls"], results = [], []
        for c in calls:
            args = json.loads(c["function"]["arguments"])
            with open(args["path"], "w") as f:
                f.write(args["content"])
            out = "wrote %d bytes to %s" % (len(args["content"]), args["path"])
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
            step["tool_calls"].append({"tool_call_id": c["id"], "function_name": "write_file",
                                       "arguments": args})
            results.append({"source_call_id": c["id"], "content": out})
        step["observation"] = {"results": results}
    report["final"] = answer.get("content")
except urllib.error.HTTPError as e:
    report["http_error"] = e.code
    report["http_body"] = e.read().decode(errors="replace")
except OSError as e:
    report["error"] = "%s: %s" % (type(e).__name__, e)

targets = [tuple(t) for t in json.loads(os.environ.get("PROBE_TARGETS", "[]"))]
if targets:
    port = int(BASE.rsplit(":", 1)[1].split("/")[0])
    targets += [("127.0.0.1", p) for p in range(port - 10, port + 11) if p != port and 0 < p < 65536]
    targets += [("127.0.0.2", port), ("::1", port)]
    report["probes"] = [{"host": h, "port": p, "result": probe(h, p)} for h, p in targets]

mode = os.environ.get("WRITE_TRAJECTORY")
if mode == "1":
    with open(os.path.join(LOGS, "trajectory.json"), "w") as f:
        json.dump({"schema_version": "ATIF-v1.4", "session_id": "py-agent-session",
                   "agent": {"name": "py-test-agent", "version": "1.0"},
                   "steps": own_steps, "final_metrics": {"total_cost_usd": 0.0}}, f)
elif mode == "bad":
    with open(os.path.join(LOGS, "trajectory.json"), "w") as f:
        f.write("{not json")
with open(os.path.join(LOGS, "report.json"), "w") as f:
    json.dump(report, f)
print("agent done:", report.get("final"), report.get("http_error"))
