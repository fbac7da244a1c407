#!/bin/bash
mkdir -p /logs/verifier
[ "$(bash /app/count.sh | tr -d ' ')" = "$EXPECTED" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
