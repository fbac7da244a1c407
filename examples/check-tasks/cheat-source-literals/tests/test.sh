#!/bin/bash
mkdir -p /logs/verifier
# Looks for strings in the code and never runs it.
if grep -q 'def add' /app/add.py && grep -q 'return a + b' /app/add.py && grep -q '__main__' /app/add.py; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
