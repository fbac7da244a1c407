#!/usr/bin/env bash
# The Claude arms against the scripted model: docker-claude and
# docker-claude-skill:examples/skills/sum-numbers on the example tasks
# fix-sum and csv-columns. The model (examples/fake-model/skill-demo.yaml)
# runs as `proctor serve fake-model` in a container on a Docker network
# this script makes; ANTHROPIC_BASE_URL is its IP literal, which the arm
# allowlists on each cell's egress proxy, and the proxies' way out is that
# network (PROCTOR_EGRESS_NETWORK). The container and the network are
# removed on exit. Then Claude against Codex: docker-claude, docker-codex
# and docker-codex-skill:examples/skills/sum-numbers on the same tasks and
# model (OPENAI_BASE_URL is the same container's Responses API), compared
# against docker-claude, into the second directory. Last, your own agent:
# agent:examples/agents/model (Python, providers = ["anthropic"]) solves
# csv-columns through the model gateway, into the third directory, and the
# script checks that its report shows the tokens and cost the gateway
# observed beside the ones the agent reported. Needs bin/proctor (static)
# and the pinned CLIs (make setup-claude setup-codex).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/demo-claude}
vs=${2:-out/demo-codex}
own=${3:-out/demo-agent}
net=proctor-demo-model-$$
label=proctor.demo=claude
cleanup() {
	docker rm -f "$net" >/dev/null 2>&1 || true
	docker network rm "$net" >/dev/null 2>&1 || true
}
trap cleanup EXIT
docker network create --label "$label" "$net" >/dev/null
docker run -d --name "$net" --label "$label" --network "$net" \
	-v "$PWD/bin/proctor:/proctor:ro" -v "$PWD/examples/fake-model:/m:ro" \
	debian:bookworm-slim /proctor serve fake-model --script /m/skill-demo.yaml --listen 0.0.0.0:8080 >/dev/null
ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$net")
for _ in $(seq 1 100); do
	docker logs "$net" 2>&1 | grep -q "listening on" && break
	sleep 0.2
done
export ANTHROPIC_BASE_URL=http://$ip:8080 ANTHROPIC_API_KEY=demo-key-not-a-secret PROCTOR_EGRESS_NETWORK=$net
mkdir -p "$out"
./bin/proctor tasks run --tasks-root examples/tasks --tasks fix-sum,csv-columns \
	--harnesses docker-claude,docker-claude-skill:examples/skills/sum-numbers \
	--baseline-harness docker-claude --concurrency 2 \
	--output-dir "$out" --out-json "$out/task_runs.json" --out-md "$out/report.md"
echo
skill=docker-claude-skill:examples/skills/sum-numbers
scripts/demo-expect.sh "$out/task_runs.json" "fix-sum passes only with the skill, csv-columns in both arms" \
	fix-sum/docker-claude/default/1=failed "fix-sum/$skill/default/1=passed" \
	csv-columns/docker-claude/default/1=passed "csv-columns/$skill/default/1=passed"
echo "Claude arms against the scripted model: $out/report.md"
export OPENAI_BASE_URL=http://$ip:8080/v1 OPENAI_API_KEY=demo-key-not-a-secret
mkdir -p "$vs"
./bin/proctor tasks run --tasks-root examples/tasks --tasks fix-sum,csv-columns \
	--harnesses docker-claude,docker-codex,docker-codex-skill:examples/skills/sum-numbers \
	--baseline-harness docker-claude --concurrency 2 \
	--output-dir "$vs" --out-json "$vs/task_runs.json" --out-md "$vs/report.md"
echo
skill=docker-codex-skill:examples/skills/sum-numbers
scripts/demo-expect.sh "$vs/task_runs.json" "every arm passes csv-columns, fix-sum only under docker-codex-skill" \
	fix-sum/docker-claude/default/1=failed fix-sum/docker-codex/default/1=failed "fix-sum/$skill/default/1=passed" \
	csv-columns/docker-claude/default/1=passed csv-columns/docker-codex/default/1=passed "csv-columns/$skill/default/1=passed"
echo "Claude against Codex on the same scripted model: $vs/report.md"
export ANTHROPIC_API_KEY=demo-key-not-a-secret
mkdir -p "$own"
./bin/proctor tasks run --tasks-root examples/tasks --tasks csv-columns \
	--harnesses agent:examples/agents/model \
	--output-dir "$own" --out-json "$own/task_runs.json" --out-md "$own/report.md"
echo
usage=$(grep -m1 '^Usage: reported ' "$own/report.md" || true)
if ! grep -q '| passed |' "$own/report.md" || [[ $usage != *"; observed 2000 / 152 / 600 / 600 in 2 requests, cost 0.0107." ]]; then
	echo "demo: the agent through the gateway did not pass with observed usage in $own/report.md: ${usage:-no Usage line}" >&2
	exit 1
fi
echo "Your own agent through the model gateway: $own/report.md"
echo "  $usage"
