#!/bin/bash
mkdir -p /logs/verifier
# The verifier knows the sum of the numbers the image holds (3 + 14 + 15),
# so an agent that rewrites /app/numbers.txt gains nothing.
if [ "$(tr -d '[:space:]' < /app/sum.txt 2>/dev/null)" = 32 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
