#!/bin/bash
mkdir -p /logs/verifier
# Runs unittest from the work tree: python puts the current directory
# first on its path, so a unittest.py there is the runner.
cd /app && if python3 -m unittest discover -s /tests -p 'test_*.py'; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
