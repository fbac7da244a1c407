#!/bin/bash
# Ignores SIGTERM, starts a background child, and sleeps far past its budget.
trap '' TERM
echo '{"_tag":"Started"}'
(trap '' TERM; while true; do sleep 0.2; done) &
sleep 600
