#!/bin/bash
start=$(date +%s)
if getent hosts dns-check.invalid >/dev/null 2>&1; then r=0; else r=1; fi
echo "the lookup failed=$r after $(( $(date +%s) - start ))s"
echo $r > /logs/verifier/reward.txt
