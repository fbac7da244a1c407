#!/bin/bash
mkdir -p /logs/verifier
reward=0
if exec 3<>/dev/tcp/api/7001; then
  read -r greeting <&3
  [ "$greeting" = "hello from build args" ] && [ "$(cat /app/answer 2>/dev/null)" = "$greeting" ] && reward=1
fi
echo "$reward" > /logs/verifier/reward.txt
