"""evolve's adapter: a candidate's `command` agent (agent.toml `command = [...]`) run as a
Harbor agent, so that `harbor run` can evaluate it in any of Harbor's environments.

Harbor only runs Python `BaseAgent` classes; evolve's candidates declare a process. This
class bridges the two with the contract evolve's docker engine gives a command agent:

* setup() uploads the candidate's target dir to /installed-agent/candidate;
* run() starts the command as the task's agent user, in the task's workdir (/app when the
  task names none and /app exists), with the instruction on stdin and in EVOLVE_INSTRUCTION
  (both read from a file uploaded next to the runner, never put on a command line),
  agent.toml's [env], EVOLVE_AGENT_DIR / EVOLVE_APP_DIR / EVOLVE_AGENT_LOGS_DIR, and the
  model variables Harbor overlays from `--ae` (the candidate's [env] never overrides them);
  under the task's agent timeout (Harbor's own timeout applies too, but only cancels its
  client: `timeout` in the container stops the process itself);
* the command's stdout and stderr go to /logs/agent/agent.txt and its exit status to
  /logs/agent/exit-code.txt (a non-zero exit is recorded, not raised: the verifier still
  runs, as on evolve's own engines);
* the workdir and timeout it resolved are written to the trial's agent/evolve-adapter.json;
* populate_context_post_run() reads the cost.json the agent may leave in /logs/agent
  (`{"cost_usd": x, "n_input_tokens": n, "n_output_tokens": n}`), without following a
  link, into Harbor's agent_result.

Its kwargs (`--ak`), all set by evolve: candidate_dir (host path), argv (JSON list),
env (JSON object of agent.toml's literal [env]). Standard library and Harbor only.
"""

import json
import math
import os
import shlex
import stat
import tempfile
import tomllib
from pathlib import Path

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

CANDIDATE = "/installed-agent/candidate"
RUNNER = "/installed-agent/evolve"
LOGS = "/logs/agent"
# EVOLVE_INSTRUCTION is left unset above this size (as on evolve's engines): stdin has it.
INSTRUCTION_ENV_CAP = 100_000
COST_CAP = 1 << 20


def _json_kwarg(value, kind, name):
    """Harbor parses `--ak` values as JSON when they are; accept either form."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"evolve_command_agent: kwarg {name} is not JSON: {e}") from e
    if not isinstance(value, kind):
        raise ValueError(f"evolve_command_agent: kwarg {name} must be a JSON {kind.__name__}")
    return value


class CommandAgent(BaseAgent):
    def __init__(self, logs_dir, candidate_dir=None, argv=None, env=None, **kwargs):
        super().__init__(logs_dir=logs_dir, **kwargs)
        if not candidate_dir:
            raise ValueError("evolve_command_agent: kwarg candidate_dir is required")
        self._candidate_dir = Path(str(candidate_dir))
        self._argv = [str(a) for a in _json_kwarg(argv or "[]", list, "argv")]
        if not self._argv:
            raise ValueError("evolve_command_agent: kwarg argv must not be empty")
        self._env = {str(k): str(v) for k, v in _json_kwarg(env or "{}", dict, "env").items()}

    @staticmethod
    def name() -> str:
        return "evolve-command-agent"

    def version(self) -> str | None:
        return "1"

    def _task_settings(self):
        """(workdir, agent timeout in seconds) of this trial's task, read from the trial's
        config.json (written before the agent starts) and the task's task.toml."""
        try:
            trial = json.loads((Path(self.logs_dir).parent / "config.json").read_text())
            task = tomllib.loads((Path(trial["task"]["path"]) / "task.toml").read_text())
        except (OSError, KeyError, TypeError, ValueError):
            return None, None
        workdir = (task.get("environment") or {}).get("workdir")
        agent = trial.get("agent") or {}
        base = agent.get("override_timeout_sec") or (task.get("agent") or {}).get("timeout_sec")
        if not base:
            return workdir, None
        if agent.get("max_timeout_sec"):
            base = min(float(base), float(agent["max_timeout_sec"]))
        mult = trial.get("agent_timeout_multiplier") or trial.get("timeout_multiplier") or 1.0
        return workdir, float(base) * float(mult)

    async def setup(self, environment: BaseEnvironment) -> None:
        await environment.exec(f"mkdir -p {CANDIDATE} {RUNNER}", user="root")
        await environment.upload_dir(str(self._candidate_dir), CANDIDATE)
        # The agent user (not necessarily root) must read and run the candidate's files.
        await environment.exec(f"chmod -R a+rX {CANDIDATE}", user="root")

    def _runner(self, argv, workdir, timeout_sec, passed):
        q = shlex.quote
        lines = ["set -u"]
        for k, v in self._env.items():
            # Harbor's --ae variables (the model's) are not the candidate's to override.
            if k not in passed:
                lines.append(f"export {k}={q(v)}")
        lines += [
            f"export EVOLVE_AGENT_DIR={CANDIDATE}",
            f"export EVOLVE_AGENT_LOGS_DIR={LOGS}",
            f"cd {q(workdir)} 2>/dev/null" if workdir else "cd /app 2>/dev/null || :",
            'export EVOLVE_APP_DIR="$PWD"',
            f'if [ "$(wc -c < {RUNNER}/instruction.md)" -le {INSTRUCTION_ENV_CAP} ]; then',
            f'  EVOLVE_INSTRUCTION="$(cat {RUNNER}/instruction.md)"; export EVOLVE_INSTRUCTION',
            "fi",
        ]
        cmd = " ".join(q(a) for a in argv)
        if timeout_sec:
            secs = max(1, int(timeout_sec + 0.999))
            cmd = (
                f"if command -v timeout >/dev/null 2>&1; then timeout -k 5 {secs} {cmd}; "
                f"else {cmd}; fi"
            )
        lines += [
            f"( {cmd} ) < {RUNNER}/instruction.md > {LOGS}/agent.txt 2>&1",
            "code=$?",
            f"echo $code > {LOGS}/exit-code.txt",
            "exit 0",
        ]
        return "\n".join(lines) + "\n"

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        workdir, timeout_sec = self._task_settings()
        # What the adapter resolved, next to the agent's own logs (on the host side).
        (Path(self.logs_dir) / "evolve-adapter.json").write_text(
            json.dumps({"workdir": workdir, "timeout_sec": timeout_sec, "argv": self._argv})
        )
        argv = list(self._argv)
        if argv[0].startswith("./"):
            argv[0] = f"{CANDIDATE}/{argv[0][2:]}"
        passed = set(self.extra_env)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "instruction.md").write_text(instruction)
            (Path(tmp) / "run.sh").write_text(self._runner(argv, workdir, timeout_sec, passed))
            await environment.upload_dir(tmp, RUNNER)
        await environment.exec(f"chmod -R a+rX {RUNNER}", user="root")
        await environment.exec(
            f"bash {RUNNER}/run.sh",
            timeout_sec=int(timeout_sec) + 30 if timeout_sec else None,
        )

    def populate_context_post_run(self, context: AgentContext) -> None:
        # The agent wrote this file; never follow a link it may have left in its place.
        path = Path(self.logs_dir) / "cost.json"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return
            raw = f.read(COST_CAP + 1)
        if len(raw) > COST_CAP:
            return
        try:
            cost = json.loads(raw)
        except ValueError:
            return
        if not isinstance(cost, dict):
            return
        usd = cost.get("cost_usd")
        if isinstance(usd, (int, float)) and not isinstance(usd, bool) and math.isfinite(usd) and usd >= 0:
            context.cost_usd = float(usd)
        for key in ("n_input_tokens", "n_output_tokens"):
            n = cost.get(key)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                setattr(context, key, n)
