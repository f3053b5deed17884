"""A Harbor environment that drives Docker through the plain `docker` CLI (no Compose).

Harbor 0.25's built-in `docker` environment needs the Docker Compose v2 plugin, which these
machines cannot install. The evaluator-harbor tests plug this class in with
`harbor run --env evolve_docker_cli_env:DockerCliEnvironment` (PYTHONPATH = this directory),
so the real harbor CLI runs the oracle agent against the real Docker daemon.
Single-container tasks only (a Dockerfile in environment/).
"""

import asyncio
import hashlib
import re
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities


def _name(session_id: str) -> str:
    s = re.sub(r"[^a-z0-9_-]", "-", session_id.lower())
    return "evolve-harbor-" + s[:60]


async def _run(*args: str, timeout: float | None = None, stdin: bytes | None = None) -> ExecResult:
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), return_code=proc.returncode)


class DockerCliEnvironment(BaseEnvironment):
    @staticmethod
    def type() -> str:
        return "evolve-docker-cli"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    def _validate_definition(self):
        if not (Path(self.environment_dir) / "Dockerfile").is_file():
            raise FileNotFoundError(f"{self.environment_dir}/Dockerfile not found")

    @property
    def _container(self) -> str:
        return _name(self.session_id)

    async def start(self, force_build: bool) -> None:
        digest = hashlib.sha256(str(Path(self.environment_dir).resolve()).encode()).hexdigest()[:24]
        tag = f"evolve-harbor-env-{digest}:latest"
        r = await _run("docker", "build", "-q", "-t", tag, str(self.environment_dir))
        if r.return_code != 0:
            raise RuntimeError(f"docker build failed: {r.stderr or r.stdout}")
        args = ["docker", "run", "-d", "--init", "--name", self._container, "--label", "dev.evolve.harbor-env=1"]
        if self._network_disabled:
            args += ["--network", "none"]
        args += [tag, "sh", "-c", "sleep infinity"]
        r = await _run(*args)
        if r.return_code != 0:
            raise RuntimeError(f"docker run failed: {r.stderr}")
        await self.exec("mkdir -p /logs/verifier /logs/agent /logs/artifacts && chmod 777 /logs/verifier /logs/agent /logs/artifacts", user="root")

    async def stop(self, delete: bool):
        await _run("docker", "rm", "-f", self._container)

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        args = ["docker", "exec"]
        if cwd:
            args += ["-w", cwd]
        for k, v in (self._merge_env(env) or {}).items():
            args += ["-e", f"{k}={v}"]
        user = self._resolve_user(user)
        if user is not None:
            args += ["-u", str(user)]
        args += [self._container, "bash", "-c", command]
        return await _run(*args, timeout=timeout_sec)

    async def upload_file(self, source_path, target_path: str):
        parent = str(Path(target_path).parent)
        await self.exec(f"mkdir -p '{parent}'", user="root")
        r = await _run("docker", "cp", str(source_path), f"{self._container}:{target_path}")
        if r.return_code != 0:
            raise RuntimeError(r.stderr)

    async def upload_dir(self, source_dir, target_dir: str):
        await self.exec(f"mkdir -p '{target_dir}'", user="root")
        r = await _run("docker", "cp", f"{source_dir}/.", f"{self._container}:{target_dir}")
        if r.return_code != 0:
            raise RuntimeError(r.stderr)

    async def download_file(self, source_path: str, target_path):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        r = await _run("docker", "cp", f"{self._container}:{source_path}", str(target_path))
        if r.return_code != 0:
            raise RuntimeError(r.stderr)

    async def download_dir(self, source_dir: str, target_dir):
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        r = await _run("docker", "cp", f"{self._container}:{source_dir}/.", str(target_dir))
        if r.return_code != 0:
            raise RuntimeError(r.stderr)
