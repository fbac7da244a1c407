#!/bin/bash
# Three checks; reward.json carries the fraction and each check (Harbor's flat map).
mkdir -p /logs/verifier
python3 - <<'PY'
import json, subprocess
out = subprocess.run(["python3", "/app/cols.py", "/app/data.csv"], capture_output=True, text=True).stdout.split()
checks = {"age": "age" in out, "score": "score" in out, "no_text": "name" not in out and "city" not in out}
json.dump({"reward": sum(checks.values()) / 3, **{k: float(v) for k, v in checks.items()}}, open("/logs/verifier/reward.json", "w"))
PY
