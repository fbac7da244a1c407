# Shared by every step's test (the task-level tests/ is copied to /tests
# under each step's own tests/).
pass() { echo 1 > /logs/verifier/reward.txt; echo "pass: $*"; exit 0; }
fail() { echo 0 > /logs/verifier/reward.txt; echo "fail: $*"; exit 0; }
