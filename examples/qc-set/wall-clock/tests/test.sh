#!/bin/bash
mkdir -p /logs/verifier
# Passes only when the answer is younger than a day by this machine's clock.
age=$(( $(date +%s) - $(stat -c %Y /app/answer.txt 2>/dev/null || echo 0) ))
if grep -qx 42 /app/answer.txt 2>/dev/null && [ "$age" -lt 86400 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
