#!/bin/bash
# A command harness that scores its own work: it passes a task when the task
# ships a reference solution and a verifier, writing reward.txt into the
# output dir, and reports what it looked at as operations.
# Usage (from the tasks root's parent): bash commands/has-solution.sh {task_path} {output_dir}
set -u
task_path=$1 out=$2
checks=0
for f in solution/solve.sh oracle/solve.sh tests/test.sh verifier/test.sh; do
  if [ -f "$task_path/$f" ]; then
    checks=$((checks + 1))
    echo "PROCTOR_OP {\"type\":\"file_found\",\"path\":\"$f\"}"
  fi
done
printf '{"type":"checked","files":%d}\n' "$checks" >> "${PROCTOR_OPERATIONS_FILE:-/dev/null}"
if [ "$checks" -ge 2 ]; then echo 1; else echo 0; fi > "$out/reward.txt"
echo "checked $(basename "$task_path"): $checks files"
