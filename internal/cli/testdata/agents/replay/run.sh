#!/bin/bash
echo '{"_tag":"Started"}'
printf '%s\n' "$PROCTOR_PROMPT" | sed -n 's/^RUN: //p' > /tmp/replay.sh
echo "replaying $(wc -l < /tmp/replay.sh) line(s)"
bash /tmp/replay.sh
