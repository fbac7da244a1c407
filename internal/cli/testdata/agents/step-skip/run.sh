#!/bin/bash
# It does step a's work; in step b it puts a directory where the file
# should be, so the step's test.sh aborts (set -e) before it writes a
# reward. A roll-up that leaves the unverified step out passes the cell.
echo '{"_tag":"Started"}'
case "$PROCTOR_PROMPT" in
*/app/a*) echo done > /app/a ;;
*) rm -rf /app/b; mkdir /app/b ;;
esac
echo "did my part"
