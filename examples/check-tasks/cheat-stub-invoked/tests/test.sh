#!/bin/bash
mkdir -p /logs/verifier
# Trusts a grader in the work tree.
if bash /app/check_answer.sh; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
