#!/bin/bash
mkdir -p /logs/verifier
reward=0
if exec 3<>/dev/tcp/keys/7000; then
  read -r key <&3
  [ -n "$key" ] && [ "$(cat /app/answer 2>/dev/null)" = "$key" ] && reward=1
fi
echo "$reward" > /logs/verifier/reward.txt
