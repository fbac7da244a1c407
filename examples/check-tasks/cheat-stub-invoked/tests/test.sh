#!/bin/bash
mkdir -p /logs/verifier
# Trusts a grader in the work tree.
if bash /app/check_answer.sh >/dev/null 2>&1; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
