#!/bin/bash
# The ticker started in the first step still runs: the sandbox was thawed.
a=$(cat /app/tick); sleep 1.5; b=$(cat /app/tick)
echo "tick $a -> $b"
[ -f /app/started ] && [ "$a" != "$b" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
