#!/bin/bash
# A hostile agent: what it does depends on the task (see limits-root).
echo '{"_tag":"Started"}'
case "$PROCTOR_TASK" in
memhog)
  # tail keeps every byte of a file without a newline in memory.
  tail /dev/zero
  echo "tail exited $?" ;;
forkbomb)
  echo 42 > /app/answer
  echo "forking 2000 processes"
  # dash, so a failed fork ends the bomb instead of retrying.
  exec sh -c 'i=0; while [ $i -lt 2000 ]; do sleep 300 & i=$((i+1)); echo $i > /app/forked; done' ;;
setuid)
  rootid -u > /app/uid
  rootcat /etc/shadow > /app/stolen
  echo "uid $(cat /app/uid)" ;;
esac
