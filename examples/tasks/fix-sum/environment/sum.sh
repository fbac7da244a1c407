#!/bin/bash
# Bug: skips the first line.
tail -n +2 /app/numbers.txt | paste -sd+ | bc 2>/dev/null || awk 'NR>1{s+=$1} END{print s}' /app/numbers.txt
