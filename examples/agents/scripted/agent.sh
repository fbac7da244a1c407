#!/bin/bash
# Event lines: one JSON object per line with a "_tag" (Started, Message,
# Command, FileChange, ToolCall, Usage, Finished); PROCTOR_OP lines are
# operations; anything else is response text.
set -u
task="${PROCTOR_TASK:-}"
prompt="${PROCTOR_PROMPT:-}"
json_escape() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; printf '%s' "$s"; }
ev() { printf '{"_tag":"%s",%s}\n' "$1" "$2"; }
run() { # run CMD: execute it and report a Command event with its exit code
  local out rc
  out=$(bash -c "$1" 2>&1); rc=$?
  ev Command "\"command\":\"$(json_escape "$1")\",\"exit_code\":$rc,\"output\":\"$(json_escape "${out:0:200}")\""
  return $rc
}
write() { # write FILE CONTENT
  printf '%s' "$2" > "$1"
  ev FileChange "\"path\":\"$1\",\"kind\":\"write\""
}

ev Started "\"model\":\"${PROCTOR_MODEL:-scripted}\""
ev Message "\"role\":\"assistant\",\"text\":\"Reading the task: $(json_escape "${prompt:0:80}")\""
ev Usage "\"input_tokens\":$(( ${#prompt} / 4 + 200 )),\"output_tokens\":120,\"cost_usd\":0.0021,\"model\":\"scripted-1\""
ev ToolCall "\"name\":\"read_file\",\"input\":{\"path\":\"instruction.md\"}"
echo "PROCTOR_OP {\"type\":\"plan\",\"steps\":2,\"task\":\"$task\"}"

case "$task" in
  fix-sum|*/fix-sum)
    ev ToolCall '"name":"bash"'
    run "cat /app/sum.sh"
    write /app/sum.sh $'#!/bin/bash\nawk \'{s+=$1} END{print s}\' /app/numbers.txt\n'
    run "bash /app/sum.sh" ;;
  csv-columns|*/csv-columns)
    ev ToolCall '"name":"write_file"'
    write /app/cols.py $'import csv, sys\nrows = list(csv.DictReader(open(sys.argv[1], newline="")))\ndef num(v):\n    try:\n        float(v); return True\n    except ValueError:\n        return False\nfor col in rows[0]:\n    if all(num(r[col]) for r in rows):\n        print(col)\n'
    run "python3 /app/cols.py /app/data.csv" ;;
  count-words|*/count-words)
    ev ToolCall '"name":"write_file"'
    write /app/count.sh $'#!/bin/bash\nwc -w < /app/text.txt\n'
    run "bash /app/count.sh" ;;
  *)
    # A rule for the many tasks that ask for a marker file.
    if [[ "$prompt" =~ \`(/(app|root)/[a-z._-]+)\`\ containing\ (the\ word\ )?\`([a-z]+)\` ]]; then
      ev ToolCall '"name":"bash"'
      write "${BASH_REMATCH[1]}" "${BASH_REMATCH[4]}"$'\n'
      run "cat ${BASH_REMATCH[1]}"
    elif [[ "$prompt" =~ \`(/(app|root)/[a-z._-]+)\` ]]; then
      ev ToolCall '"name":"bash"'
      run "touch ${BASH_REMATCH[1]}"
    else
      ev Message '"role":"assistant","text":"No rule for this task; giving up."'
      gave_up=1
    fi ;;
esac
ev Usage '"input_tokens":310,"output_tokens":95,"cache_read_input_tokens":150,"cost_usd":0.0017'
if [[ -n ${gave_up:-} ]]; then
  # An honest agent says it did not solve what it had no rule for.
  echo "PROCTOR_OP {\"type\":\"verify_self\",\"ok\":false}"
  echo "Gave up on ${task}: no rule for it."
else
  echo "PROCTOR_OP {\"type\":\"verify_self\",\"ok\":true}"
  echo "Done with ${task}."
fi
ev Finished '"reason":"completed"'
