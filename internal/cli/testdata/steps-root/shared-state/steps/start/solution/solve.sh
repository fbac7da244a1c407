#!/bin/bash
echo started > /app/started
nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /app/tick; sleep 0.2; done' >/dev/null 2>&1 &
