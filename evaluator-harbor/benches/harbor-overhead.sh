#!/usr/bin/env bash
# Per-trial wall time of three runners on the same trivial public tasks, side by side in one
# run: `evolve tasks run --engine docker`, `evolve tasks run --engine harbor`, and
# `harbor run -e docker` directly, each at n=1 and n=2.
#   usage: evaluator-harbor/benches/harbor-overhead.sh [N_TASKS (default 12)]
# Needs: a built `evolve` (target/release or target/debug, or $EVOLVE_BIN), Docker with the
# Compose v2 plugin, the harbor CLI (ci-setup.sh installs both), and the test base image
# (testdata/build-base-image.sh). Prints a markdown table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
n_tasks="${1:-12}"
evolve="${EVOLVE_BIN:-}"
[ -n "$evolve" ] || for c in "$repo/target/release/evolve" "$repo/target/debug/evolve"; do
  [ -x "$c" ] && { evolve="$c"; break; }
done
[ -x "$evolve" ] || { echo "harbor-overhead: no evolve binary (build it, or set EVOLVE_BIN)" >&2; exit 2; }
harbor="${EVOLVE_HARBOR_BIN:-/var/cache/evolve-ci/harbor-venv/bin/harbor}"
[ -x "$harbor" ] || { echo "harbor-overhead: no harbor CLI at $harbor (run evaluator-harbor/ci-setup.sh)" >&2; exit 2; }
docker compose version >/dev/null || { echo "harbor-overhead: docker compose v2 is missing" >&2; exit 2; }
bash "$here/testdata/build-base-image.sh" >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
set_dir="$work/tasks"
for i in $(seq -w 1 "$n_tasks"); do
  t="$set_dir/trivial-$i"
  mkdir -p "$t/environment" "$t/solution" "$t/tests"
  printf 'FROM evolve-harbor-test-base:1\nWORKDIR /app\n' > "$t/environment/Dockerfile"
  printf '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "public"\n' > "$t/task.toml"
  printf 'Write done.\n' > "$t/instruction.md"
  printf '#!/bin/bash\necho done > /app/out\n' > "$t/solution/solve.sh"
  printf '#!/bin/bash\n[ -f /app/out ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n' > "$t/tests/test.sh"
  chmod +x "$t/solution/solve.sh" "$t/tests/test.sh"
done

# Seconds per trial of one command over the task set.
per_trial() {
  local start end
  start=$(date +%s.%N)
  "$@" >"$work/last.log" 2>&1 || { echo "harbor-overhead: failed: $*" >&2; tail -5 "$work/last.log" >&2; }
  end=$(date +%s.%N)
  python3 -c "print(f'{($end - $start) / $n_tasks:.2f}')"
}

echo "| runner | n=1 | n=2 |"
echo "|---|---|---|"
for runner in docker harbor direct; do
  row="| $runner"
  for n in 1 2; do
    out="$work/out-$runner-$n"
    case "$runner" in
      docker|harbor) s=$(per_trial "$evolve" tasks run "$set_dir" --engine "$runner" --n-concurrent "$n" --out "$out") ;;
      direct) s=$(HARBOR_TELEMETRY=0 per_trial "$harbor" run -p "$set_dir" -a oracle -e docker -n "$n" -k 1 -y -q --job-name bench -o "$out") ;;
    esac
    row="$row | $s s"
  done
  echo "$row |"
done
