#!/bin/bash
# Overruns [verifier].timeout_sec: reward 0 and verifier_timeout, not an error.
mkdir -p /logs/verifier
sleep 300
echo 1 > /logs/verifier/reward.txt
