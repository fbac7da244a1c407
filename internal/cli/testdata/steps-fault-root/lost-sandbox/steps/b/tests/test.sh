#!/bin/bash
grep -qx done /app/b && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
