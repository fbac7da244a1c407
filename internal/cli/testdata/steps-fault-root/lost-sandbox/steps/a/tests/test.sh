#!/bin/bash
# A process left holding the script's output (stopped at its exit): the
# engine handles the step's pause events seconds late, and the resume
# waits for them.
sleep 1000 &
grep -qx done /app/a && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
