#!/bin/bash
# The task-level test, used by steps without their own test.sh (extend).
. /tests/helper.sh
[ "$GREETING" = hello ] || fail "[verifier.env] GREETING not set"
[ -z "$STEP" ] || fail "the scaffold step's STEP leaked into another step's verifier"
[ -f /tests/expected.txt ] || fail "the step's tests/ was not copied over the task's"
cmp -s /app/notes.txt /tests/expected.txt || fail "notes.txt differs from expected.txt"
pass "notes extended"
