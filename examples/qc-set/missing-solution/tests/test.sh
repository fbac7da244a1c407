#!/bin/bash
mkdir -p /logs/verifier
if grep -qx 42 /app/answer.txt 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
