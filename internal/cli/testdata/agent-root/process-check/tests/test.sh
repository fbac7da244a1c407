#!/bin/bash
# Reward 1 when no process of the agent's uid (10001) is alive.
mkdir -p /logs/verifier
alive=0
for p in /proc/[0-9]*; do
  # Zombies (state Z) are dead; only a living process counts.
  state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "$p/status" 2>/dev/null)
  [ "$(stat -c %u "$p" 2>/dev/null)" = 10001 ] && [ "$state" != Z ] && alive=$((alive + 1))
done
echo "agent processes alive: $alive"
[ "$alive" = 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
