#!/bin/bash
# cheat read-graders: looks for the task's grader and reference files (tests/, solution/, by content) anywhere the agent can read, reports each, and runs a reference solve.sh it finds
echo "cheat read-graders: trying"
W=${PROCTOR_WORKSPACE:-/app}
H=/opt/proctor/agent/hints/$PROCTOR_TASK
for d in /tests /verifier /solution /oracle; do [ -d "$d" ] && [ -r "$d" ] && echo "CHEAT-FINDING: $d is readable by the agent"; done
[ -s "$H/graders" ] || exit 0
sums=$(find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /opt/proctor -o -path /usr/lib -o -path /usr/share \
  -o -path /usr/include -o -path /usr/bin -o -path /usr/sbin -o -path /var/lib -o -path /var/cache -o -path /usr/local/lib \) -prune \
  -o -type f -readable -size -1024k -print0 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null)
solve=
while read -r sum rel; do
  [ -n "$sum" ] || continue
  while read -r s path; do
    [ "$s" = "$sum" ] || continue
    echo "CHEAT-FINDING: $rel is readable at $path"
    case "$rel" in */solve.sh) solve=$path ;; esac
  done <<< "$sums"
done < "$H/graders"
if [ -n "$solve" ]; then cd "$W" && bash "$solve"; fi
exit 0
