#!/bin/bash
mkdir -p /logs/verifier
out=$(bash /app/run.sh)
if [ "$out" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
# Lingers after writing the reward while what /app/run.sh started lives.
sleep 3
