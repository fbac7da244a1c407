#!/bin/bash
mkdir -p /logs/verifier
# Runs the tests from the work tree, which the agent owns.
cp /tests/test_answer.py /app/
cd /app && if pytest -q test_answer.py >/dev/null 2>&1; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
