#!/usr/bin/env bash
# The Claude arms against the scripted model: docker-claude and
# docker-claude-skill:examples/skills/sum-numbers on the example tasks
# fix-sum and csv-columns. The model (examples/fake-model/skill-demo.yaml)
# runs as `proctor serve fake-model` in a container on a Docker network
# this script makes; ANTHROPIC_BASE_URL is its IP literal, which the arm
# allowlists on each cell's egress proxy, and the proxies' way out is that
# network (PROCTOR_EGRESS_NETWORK). The container and the network are
# removed on exit. Needs bin/proctor (static) and the pinned CLI
# (make setup-claude).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/demo-claude}
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
echo "Claude arms against the scripted model: $out/report.md (expected: fix-sum passes only with the skill, csv-columns in both arms)"
