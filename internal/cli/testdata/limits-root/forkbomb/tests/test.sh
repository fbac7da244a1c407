#!/bin/bash
# Runs only if the verifier can start processes after the agent's bomb;
# reports how many processes the bomb got as an extra reward key.
mkdir -p /logs/verifier
ok=0; [ "$(cat /app/answer 2>/dev/null)" = 42 ] && ok=1
printf '{"reward": %s, "forked": %s}\n' "$ok" "$(cat /app/forked 2>/dev/null || echo 0)" > /logs/verifier/reward.json
