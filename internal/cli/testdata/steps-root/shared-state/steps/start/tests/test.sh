[ -f /app/started ] && [ -f /app/tick ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
