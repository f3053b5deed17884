#!/bin/bash
# The reference solution is deliberately incomplete: it solves one of four parts.
touch /app/a
echo "solve.sh ran in $(pwd)"
