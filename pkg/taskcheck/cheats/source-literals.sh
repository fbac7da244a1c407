#!/bin/bash
# cheat source-literals: writes into every work-tree source file the tests name the literals the tests look for in it (a verifier that greps the agent's code for strings, never running it)
echo "cheat source-literals: trying"
W=${PROCTOR_WORKSPACE:-/app}
H=/opt/proctor/agent/hints/$PROCTOR_TASK
[ -f "$H/literals" ] || exit 0
declare -A seen=()
while IFS=$'\t' read -r f lit; do
  case "$f" in "$W"/*) ;; *) continue ;; esac
  if [ ! -e "$f" ]; then mkdir -p "$(dirname "$f")" 2>/dev/null || continue; fi
  [ -e "$f" ] && { [ -f "$f" ] && [ -w "$f" ] || continue; }
  if [ -z "${seen[$f]+x}" ]; then : > "$f" 2>/dev/null || continue; seen[$f]=1; fi
  printf '%s\n' "$lit" >> "$f" && echo "cheat: wrote a literal into $f"
done < "$H/literals"
exit 0
