#!/bin/bash
# Claims success without doing anything. It also shows the two other ways
# an agent's operations are counted: a JSON line appended to
# $PROCTOR_OPERATIONS_FILE (a structured operation) and a stderr line that
# mentions a tool (a low-fidelity one).
set -u
echo "Reading the task: ${PROCTOR_TASK:-?}."
printf '{"type":"inspect","task":"%s"}\n' "${PROCTOR_TASK:-}" >> "${PROCTOR_OPERATIONS_FILE:-/dev/null}"
echo "no tool needed for this one" >&2
echo "I fixed the problem and all tests pass. The task is solved."
