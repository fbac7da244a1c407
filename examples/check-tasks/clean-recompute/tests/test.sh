#!/bin/bash
mkdir -p /logs/verifier
# Recomputes the expected total from its own copy of the input; never
# runs the in-image /app/grade.sh.
want=$(awk '{s += $1} END {print s}' /tests/input.txt)
if [ "$(cat /app/total.txt 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
