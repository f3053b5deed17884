#!/bin/bash
correct=0
style=0
[ "$(cat /app/answer.txt)" = "42" ] && correct=1
[ -s /app/note.txt ] && style=0.5
printf '{"reward": %s, "style": %s}\n' "$correct" "$style" > /logs/verifier/reward.json
