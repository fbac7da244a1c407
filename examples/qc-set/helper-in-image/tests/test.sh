#!/bin/bash
mkdir -p /logs/verifier
if python3 /usr/local/lib/grader/grade.py; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
