#!/usr/bin/python3
"""The terminal seed's agent: a small shell agent in the style of mini-swe-agent.

Each step sends the conversation to an OpenAI-compatible endpoint (the host's model
gateway: $OPENAI_BASE_URL, $OPENAI_API_KEY), takes the one ```bash block of the answer,
runs it with `bash -c` in the task's directory ($EVOLVE_APP_DIR, default /app) and sends
back its exit code and output, cut in the middle when long. The run ends when a command
prints the submit marker, or at the step limit. Every step is also written to an ATIF
v1.4 trajectory at $EVOLVE_AGENT_LOGS_DIR/trajectory.json (default /logs/agent).

What it does is read from files beside it, each open to mutation on its own:
prompts/system.md, prompts/instance.md ({{instruction}} marks where the task goes),
skills/*.md and skills/*/SKILL.md (appended to the system prompt in name order) and agent.yaml (settings).

Python 3 standard library only.
"""

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

AGENT_NAME = "evolve-terminal"
AGENT_VERSION = "1.0"
SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
INSTRUCTION_PLACEHOLDER = "{{instruction}}"

# agent.yaml's keys, their types and defaults.
SETTINGS = {
    "step_limit": (int, 20),
    "temperature": (float, 0.0),
    "max_output_chars": (int, 4000),
    "command_timeout_sec": (float, 30.0),
    "model": (str, ""),
}

# Transient failures worth another try: the gateway or upstream briefly unavailable.
RETRY_STATUSES = {500, 502, 503, 504}
HTTP_ATTEMPTS = 3
HTTP_TIMEOUT_SEC = 300

BLOCK = re.compile(r"```(?:bash|sh)[ \t]*\n(.*?)```", re.DOTALL)


class AgentError(Exception):
    """A problem that stops the agent, reported as one line on stderr."""


# ---- configuration ---------------------------------------------------------------


def parse_settings(text, source):
    """agent.yaml: flat `key: value` lines, `#` comments, optional quotes on strings."""
    settings = {key: default for key, (_, default) in SETTINGS.items()}
    for number, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw).strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        where = "%s line %d" % (source, number)
        if not sep or not key:
            raise AgentError("%s: expected `key: value`, got %r" % (where, raw.strip()))
        if key not in SETTINGS:
            raise AgentError(
                "%s: unknown key %r (known: %s)" % (where, key, ", ".join(sorted(SETTINGS)))
            )
        settings[key] = convert(key, value, where)
    if settings["step_limit"] < 1:
        raise AgentError("%s: step_limit must be at least 1" % source)
    if settings["max_output_chars"] < 100:
        raise AgentError("%s: max_output_chars must be at least 100" % source)
    if settings["command_timeout_sec"] <= 0:
        raise AgentError("%s: command_timeout_sec must be positive" % source)
    return settings


def strip_comment(line):
    """Drop a `#` comment that is not inside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def convert(key, value, where):
    kind = SETTINGS[key][0]
    if kind is str:
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            return value[1:-1]
        return value
    try:
        return kind(value)
    except ValueError:
        raise AgentError("%s: %s must be %s, got %r" % (where, key, kind.__name__, value))


def read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise AgentError("cannot read %s: %s" % (path, e.strerror or e))


def system_prompt(agent_dir):
    """prompts/system.md, then the skills in name order: skills/<name>.md, or
    skills/<name>/SKILL.md (the layout A-Evolve's mutator writes)."""
    parts = [read_text(os.path.join(agent_dir, "prompts", "system.md")).strip()]
    skills = os.path.join(agent_dir, "skills")
    if os.path.isdir(skills):
        for name in sorted(os.listdir(skills)):
            path = os.path.join(skills, name)
            if name.endswith(".md") and os.path.isfile(path):
                parts.append(read_text(path).strip())
            elif os.path.isfile(os.path.join(path, "SKILL.md")):
                parts.append(read_text(os.path.join(path, "SKILL.md")).strip())
    return "\n\n".join(p for p in parts if p) + "\n"


def instance_prompt(agent_dir, instruction):
    path = os.path.join(agent_dir, "prompts", "instance.md")
    template = read_text(path)
    if INSTRUCTION_PLACEHOLDER not in template:
        raise AgentError("%s must contain %s where the task goes" % (path, INSTRUCTION_PLACEHOLDER))
    return template.replace(INSTRUCTION_PLACEHOLDER, instruction.strip())


# ---- the model -------------------------------------------------------------------


def ask_model(messages, settings):
    """One chat completion: returns (content, usage dict, model name)."""
    base = os.environ.get("OPENAI_BASE_URL", "").rstrip("/")
    key = os.environ.get("OPENAI_API_KEY", "")
    if not base:
        raise AgentError("OPENAI_BASE_URL is not set: give the recipe an evaluator.model")
    body = {"messages": messages, "temperature": settings["temperature"]}
    if settings["model"]:
        body["model"] = settings["model"]
    request = urllib.request.Request(
        base + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"},
    )
    for attempt in range(1, HTTP_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SEC) as r:
                answer = json.load(r)
            break
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:500]
            if e.code not in RETRY_STATUSES or attempt == HTTP_ATTEMPTS:
                raise AgentError("the model answered %d: %s" % (e.code, detail))
        except (urllib.error.URLError, OSError, ValueError) as e:
            if attempt == HTTP_ATTEMPTS:
                raise AgentError("cannot reach the model at %s: %s" % (base, e))
        time.sleep(2 ** attempt)
    try:
        content = answer["choices"][0]["message"].get("content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        raise AgentError("the model's answer has no choices[0].message: %.300s" % answer)
    usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
    return content, usage, answer.get("model")


def extract_command(content):
    """The answer's one ```bash block, or (None, the message that tells the model why)."""
    blocks = BLOCK.findall(content)
    if len(blocks) == 1 and blocks[0].strip():
        return blocks[0].strip(), None
    found = "no ```bash block" if not blocks else "%d ```bash blocks" % len(blocks)
    if len(blocks) == 1:
        found = "an empty ```bash block"
    return None, (
        "Format error: your answer had %s. Every answer must hold exactly one command in "
        "exactly one fenced block:\n\n```bash\nyour_command_here\n```\n\n"
        "When the task is done, run `echo %s` alone." % (found, SUBMIT_MARKER)
    )


# ---- commands --------------------------------------------------------------------


def run_command(command, app_dir, settings):
    """Run `command` with bash -c in app_dir; returns (exit code or None, output text)."""
    timeout = settings["command_timeout_sec"]
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=app_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a timeout kills its children
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
        text = out.decode("utf-8", "replace")
        return None, text + "\n[the command was killed after %g seconds]" % timeout


def truncate(text, limit):
    """Keep the head and tail of a long output, with a marker saying what was cut."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    return "%s\n[... %d characters elided; look at less output at once ...]\n%s" % (
        text[:head],
        cut,
        text[-tail:],
    )


def observation(code, output, settings):
    shown = "timeout" if code is None else str(code)
    return "<returncode>%s</returncode>\n<output>\n%s\n</output>" % (
        shown,
        truncate(output, settings["max_output_chars"]),
    )


def submitted(output):
    lines = output.strip().splitlines()
    return bool(lines) and lines[0].strip() == SUBMIT_MARKER


# ---- the trajectory --------------------------------------------------------------


class Trajectory:
    """An ATIF v1.4 trajectory, rewritten whole after every step so that a killed run
    still leaves every step it finished."""

    def __init__(self, logs_dir, model):
        self.path = os.path.join(logs_dir, "trajectory.json")
        self.doc = {
            "schema_version": "ATIF-v1.4",
            "session_id": str(uuid.uuid4()),
            "agent": {"name": AGENT_NAME, "version": AGENT_VERSION},
            "steps": [],
            "final_metrics": {"total_prompt_tokens": 0, "total_completion_tokens": 0},
        }
        if model:
            self.doc["agent"]["model_name"] = model

    def add(self, source, message, **fields):
        step = {
            "step_id": len(self.doc["steps"]) + 1,
            "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "source": source,
            "message": message,
        }
        step.update({k: v for k, v in fields.items() if v is not None})
        self.doc["steps"].append(step)
        metrics = fields.get("metrics") or {}
        totals = self.doc["final_metrics"]
        totals["total_prompt_tokens"] += metrics.get("prompt_tokens") or 0
        totals["total_completion_tokens"] += metrics.get("completion_tokens") or 0
        totals["total_steps"] = len(self.doc["steps"])
        self.write()

    def finish(self, notes):
        self.doc["notes"] = notes
        self.write()

    def write(self):
        tmp = self.path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.doc, f, indent=1)
            os.replace(tmp, self.path)
        except OSError as e:
            print("cannot write %s: %s" % (self.path, e), file=sys.stderr)


def token_metrics(usage):
    metrics = {}
    for key in ("prompt_tokens", "completion_tokens"):
        if isinstance(usage.get(key), int):
            metrics[key] = usage[key]
    return metrics or None


# ---- the loop --------------------------------------------------------------------


def solve(agent_dir, app_dir, logs_dir, instruction):
    settings = parse_settings(
        read_text(os.path.join(agent_dir, "agent.yaml")), os.path.join(agent_dir, "agent.yaml")
    )
    system = system_prompt(agent_dir)
    task = instance_prompt(agent_dir, instruction)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": task}]
    trajectory = Trajectory(logs_dir, settings["model"])
    trajectory.add("system", system)
    trajectory.add("user", task)
    for step in range(1, settings["step_limit"] + 1):
        content, usage, model = ask_model(messages, settings)
        messages.append({"role": "assistant", "content": content})
        command, error = extract_command(content)
        if command is None:
            messages.append({"role": "user", "content": error})
            trajectory.add("agent", content, model_name=model, metrics=token_metrics(usage))
            trajectory.add("user", error)
            print("step %d: format error" % step)
            continue
        code, output = run_command(command, app_dir, settings)
        feedback = observation(code, output, settings)
        call_id = "call_%d" % step
        trajectory.add(
            "agent",
            content,
            model_name=model,
            tool_calls=[
                {"tool_call_id": call_id, "function_name": "bash", "arguments": {"command": command}}
            ],
            observation={"results": [{"source_call_id": call_id, "content": feedback}]},
            metrics=token_metrics(usage),
        )
        print("step %d: exit %s: %s" % (step, code, command.splitlines()[0][:200]))
        if submitted(output):
            trajectory.finish("submitted after %d steps" % step)
            print("submitted after %d steps" % step)
            return
        messages.append({"role": "user", "content": feedback})
    trajectory.finish("stopped at the step limit (%d)" % settings["step_limit"])
    print("stopped at the step limit (%d) without submitting" % settings["step_limit"])


def main():
    agent_dir = os.environ.get("EVOLVE_AGENT_DIR") or os.path.dirname(os.path.abspath(__file__))
    app_dir = os.environ.get("EVOLVE_APP_DIR", "/app")
    logs_dir = os.environ.get("EVOLVE_AGENT_LOGS_DIR", "/logs/agent")
    instruction = os.environ.get("EVOLVE_INSTRUCTION") or sys.stdin.read()
    try:
        if not instruction.strip():
            raise AgentError("no instruction: set EVOLVE_INSTRUCTION or pass it on stdin")
        os.makedirs(logs_dir, exist_ok=True)
        solve(agent_dir, app_dir, logs_dir, instruction)
    except AgentError as e:
        print("agent: %s" % e, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
