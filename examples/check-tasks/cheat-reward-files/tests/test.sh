#!/bin/bash
mkdir -p /logs/verifier
# Keeps a score across runs in /tmp and trusts it.
[ -f /tmp/reward.txt ] || { grep -qx 42 /app/answer.txt 2>/dev/null && echo 1 || echo 0; } > /tmp/reward.txt
cp /tmp/reward.txt /logs/verifier/reward.txt
