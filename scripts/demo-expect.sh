#!/usr/bin/env bash
# Usage: scripts/demo-expect.sh ARTIFACT WHAT CELL=OUTCOME...
# Checks that each named cell of the run whose task_runs.json is ARTIFACT
# ended with OUTCOME, as `proctor runs show RUN --cells` reports it. On a
# match prints "demo: checked: WHAT"; else names every cell that differs
# (expected and got) and exits 1, so `make demo` fails loudly. PROCTOR is
# the proctor binary (default ./bin/proctor).
set -euo pipefail
artifact=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") what=$2
cd "$(dirname "$0")/.."
shift 2
run=$(sed -n 's/^    "id": "\([0-9A-Z]*\)",$/\1/p' "$artifact" | head -n 1)
if [[ -z $run ]]; then
	echo "demo: $artifact names no run (\"run\": {\"id\": ...})" >&2
	exit 1
fi
cells=$("${PROCTOR:-./bin/proctor}" runs show "$run" --cells)
bad=0
for want in "$@"; do
	cell=${want%=*} outcome=${want##*=}
	got=$(awk -v c="$cell" '$1 == "cell" && $2 == c { print $3 }' <<<"$cells")
	if [[ $got != "$outcome" ]]; then
		echo "demo: MISMATCH in run $run: $cell: expected $outcome, got ${got:-no such cell}" >&2
		bad=1
	fi
done
if ((bad)); then
	echo "demo: the run did not end as expected ($what); see $artifact and its report" >&2
	exit 1
fi
echo "demo: checked: $what"
