#!/bin/bash
mkdir -p /logs/verifier
# The expected answer lives only under tests/.
if diff -q /app/counts.txt /tests/expected.txt >/dev/null 2>&1; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
