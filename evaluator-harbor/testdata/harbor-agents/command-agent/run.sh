#!/bin/sh
# Runs the gateway test agent (copied next to this file by the test), then records what the
# adapter gave it and leaves a cost.json for the adapter's populate_context_post_run.
/usr/bin/python3 "$EVOLVE_AGENT_DIR/agent.py" || exit $?
instr=no
[ -n "${EVOLVE_INSTRUCTION:-}" ] && instr=yes
printf '{"pwd": "%s", "mode": "%s", "instruction_env": "%s", "app_dir": "%s"}\n' \
  "$(pwd)" "$MODE" "$instr" "$EVOLVE_APP_DIR" > "$EVOLVE_AGENT_LOGS_DIR/seen.json"
echo '{"cost_usd": 0.5, "n_input_tokens": 22, "n_output_tokens": 14}' > "$EVOLVE_AGENT_LOGS_DIR/cost.json"
