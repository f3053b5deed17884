#!/usr/bin/env bash
# Installs mini-swe-agent from PyPI, unchanged, for host/tests/third_party_agent.rs and
# seeds/mini-swe-agent/ (docs/terminal.md, "A third-party agent").
#
# Where: the local engine's trials see the host's /usr read-only and nothing of /var, so
# the venv lives under /usr/local/lib (visible inside the bubblewrap sandbox at the same
# path); pip's download cache lives in /var/cache/evolve-ci, so a reinstall on this
# machine needs no network. Idempotent: a venv that already has this exact version is
# kept as it is.
set -euo pipefail

version="${MSWEA_VERSION:-2.4.6}"
venv="${MSWEA_VENV:-/usr/local/lib/evolve-ci/mini-swe-agent}"
cache=/var/cache/evolve-ci/pip-mini-swe-agent

have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mini-swe-agent"))' 2>/dev/null || true)"
if [ "$have" = "$version" ] && [ -x "$venv/bin/mini" ]; then
  echo "mini-swe-agent-setup: mini-swe-agent $version already in $venv"
  exit 0
fi

echo "mini-swe-agent-setup: installing mini-swe-agent $version into $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")" "$cache"
# The system python (/usr/bin/python3), which the sandbox shows too: a venv's python is a
# link to the interpreter it was made with.
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --cache-dir "$cache" \
  "mini-swe-agent==$version"
# Readable and runnable by the unprivileged user the trials run as.
chmod -R a+rX "$venv"
LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/python" -c "import minisweagent, litellm" >/dev/null
echo "mini-swe-agent-setup: installed $(LITELLM_LOCAL_MODEL_COST_MAP=True MSWEA_CONFIGURED=true "$venv/bin/mini" --help >/dev/null 2>&1 && echo ok || echo '(mini --help failed)')"
