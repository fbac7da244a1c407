#!/bin/bash
mkdir -p /logs/verifier
# Trusts the expected count the image put in the work tree.
if cmp -s /app/count.txt /app/expected_count.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
