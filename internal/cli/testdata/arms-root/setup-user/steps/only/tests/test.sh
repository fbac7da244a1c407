#!/bin/bash
s=$(cat /app/setup_uid 2>/dev/null); a=$(cat /app/solve_uid 2>/dev/null)
echo "setup.sh ran as uid $s, the solve as uid $a"
[ -n "$s" ] && [ "$s" = "$a" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
