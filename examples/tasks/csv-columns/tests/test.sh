#!/bin/bash
# Three checks; reward.json carries the fraction and each check (Harbor's flat map).
# The program runs on the verifier's own copy of the data: the one in /app is the agent's to rewrite.
mkdir -p /logs/verifier
python3 - <<'PY'
import json, subprocess
out = subprocess.run(["python3", "/app/cols.py", "/tests/data.csv"], capture_output=True, text=True).stdout.split()
# no_text holds only for an answer: an empty one (a program that is missing or fails) earns nothing.
checks = {"age": "age" in out, "score": "score" in out, "no_text": bool(out) and "name" not in out and "city" not in out}
json.dump({"reward": sum(checks.values()) / 3, **{k: float(v) for k, v in checks.items()}}, open("/logs/verifier/reward.json", "w"))
PY
