#!/bin/bash
mkdir -p /logs/verifier
if [ "$(/app/answer 2>/dev/null)" = "189" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
