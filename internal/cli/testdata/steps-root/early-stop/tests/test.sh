#!/bin/bash
# Reward is what the solver earned in /app/score (0 when absent).
s=$(cat /app/score 2>/dev/null || echo 0)
echo "$s" > /logs/verifier/reward.txt
