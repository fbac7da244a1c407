#!/bin/bash
. /tests/helper.sh
[ "$STEP" = scaffold ] || fail "[steps.verifier.env] STEP not set"
[ "$GREETING" = hello ] || fail "the task-level [verifier.env] was not merged"
[ -f /app/.scaffold-ready ] || fail "workdir/setup.sh did not run"
[ ! -e /app/setup.sh ] || fail "workdir/setup.sh was left in the working directory"
cmp -s /app/notes.txt /app/template.txt || fail "notes.txt is not the template"
pass "scaffold ready"
