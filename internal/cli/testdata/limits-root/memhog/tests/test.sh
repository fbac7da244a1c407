#!/bin/bash
mkdir -p /logs/verifier
[ "$(cat /app/answer 2>/dev/null)" = 42 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
