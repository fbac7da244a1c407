#!/bin/bash
mkdir -p /logs/verifier
# The check's result is never used: every cell gets 1.
grep -qx 42 /app/answer.txt 2>/dev/null || echo "wrong answer"
echo 1 > /logs/verifier/reward.txt
