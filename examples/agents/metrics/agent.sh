#!/bin/bash
set -u
start=$(date +%s%3N)
echo "metrics agent: mode=${AGENT_RUN_MODE:-?} model=${AGENT_MODEL:-?}" >&2
tools=0
# Only one rule: marker files. Everything else is left undone.
if [[ "${AGENT_TASK:-}" =~ \`(/app/[a-z._-]+)\`\ containing\ (the\ word\ )?\`([a-z]+)\` ]]; then
  printf '%s\n' "${BASH_REMATCH[3]}" > "${BASH_REMATCH[1]}" && tools=1
  answer="Wrote ${BASH_REMATCH[1]}."
else
  answer="I could not solve this task."
fi
end=$(date +%s%3N)
cat > "${AGENT_METRICS_FILE:-/agent-output/metrics.json}" <<JSON
{"inputTokens": 812, "outputTokens": 64, "llmCallCount": 2, "toolCallCount": $tools, "toolErrorCount": 0,
 "totalTimeMs": $((end - start)), "exitReason": "completed", "provider": "none", "model": "${AGENT_MODEL:-unknown}"}
JSON
echo "$answer"
