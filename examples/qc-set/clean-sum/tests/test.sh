#!/bin/bash
mkdir -p /logs/verifier
# The verifier sums its own copy of the input.
want=$(awk '{s += $1} END {print s}' /tests/numbers.txt)
if [ "$(tr -d '[:space:]' < /app/sum.txt 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
