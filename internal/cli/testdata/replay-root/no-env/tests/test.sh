#!/bin/bash
mkdir -p /logs/verifier
if [ -f /app/out.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
