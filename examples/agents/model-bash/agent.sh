#!/bin/bash
# A minimal Anpord-style agent: the task from ANPORD_PROMPT, Gemini's
# generateContent through curl (HTTPS_PROXY and CURL_CA_BUNDLE are curl's
# own), one bash tool run in the workspace, event lines on stdout. The
# first turn sends the key in the x-goog-api-key header and asks for one
# JSON answer; later turns stream (streamGenerateContent?alt=sse) with the
# key in ?key=, as Google's clients do both.
set -uo pipefail
base=${GOOGLE_GEMINI_BASE_URL:-https://generativelanguage.googleapis.com}
base=${base%/}
model=${ANPORD_MODEL:-default}
[[ $model == default ]] && model=${GEMINI_MODEL:-gemini-2.5-flash}
cd "${ANPORD_WORKSPACE:-.}" || exit 1
tools='[{"functionDeclarations":[{"name":"bash","description":"Run a bash command in the workspace; returns its output.","parameters":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}]'
contents=$(jq -cn --arg t "${ANPORD_PROMPT:-}" '[{role:"user",parts:[{text:$t}]}]')
printf '{"_tag":"Started","model":"%s"}\n' "$model"
for turn in $(seq 0 19); do
  body=$(jq -cn --argjson c "$contents" --argjson t "$tools" '{contents:$c,tools:$t}')
  if ((turn == 0)); then
    reply=$(curl -sS --fail-with-body -X POST "$base/v1beta/models/$model:generateContent" \
      -H "x-goog-api-key: ${GEMINI_API_KEY:-}" -H 'content-type: application/json' --data-binary "$body") || { echo "model call failed: $reply" >&2; exit 1; }
  else
    # A stream of Server-Sent Events: merge the chunks' parts, keep the last usage.
    stream=$(curl -sS --fail-with-body -N -X POST "$base/v1beta/models/$model:streamGenerateContent?alt=sse&key=${GEMINI_API_KEY:-}" \
      -H 'content-type: application/json' --data-binary "$body") || { echo "model call failed: $stream" >&2; exit 1; }
    reply=$(sed -n 's/^data: //p' <<<"$stream" | jq -cs '{candidates:[{content:{role:"model",parts:[.[].candidates[0].content.parts[]]}}],usageMetadata:(map(.usageMetadata // empty)|last)}')
  fi
  jq -c --arg m "$model" '.usageMetadata // {} | {_tag: "Usage", model: $m, input_tokens: ((.promptTokenCount // 0) - (.cachedContentTokenCount // 0)),
    output_tokens: (.candidatesTokenCount // 0), cache_read_input_tokens: (.cachedContentTokenCount // 0)}' <<<"$reply"
  msg=$(jq -c '.candidates[0].content' <<<"$reply")
  jq -r '.parts[] | .text // empty' <<<"$msg"
  contents=$(jq -c --argjson m "$msg" '. + [$m]' <<<"$contents")
  calls=$(jq -c '[.parts[] | .functionCall // empty]' <<<"$msg")
  [[ $(jq length <<<"$calls") == 0 ]] && break
  results='[]'
  while IFS= read -r cmd; do
    res=$(bash -c "$cmd" 2>&1); rc=$?
    jq -cn --arg c "$cmd" --argjson rc "$rc" '{_tag:"Command",command:$c,exit_code:$rc}'
    results=$(jq -c --arg o "${res: -4000}" '. + [{functionResponse:{name:"bash",response:{output:$o}}}]' <<<"$results")
  done < <(jq -r '.[] | .args.command // ""' <<<"$calls")
  contents=$(jq -c --argjson r "$results" '. + [{role:"user",parts:$r}]' <<<"$contents")
done
printf '{"_tag":"Finished","reason":"completed"}\n'
