#!/bin/bash
mkdir -p /logs/verifier
if [ -s /app/done ] && [ "$(seq 1 "$(cat /app/done)")" = "$(cat /app/ticks)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
