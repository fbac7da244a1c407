#!/usr/bin/env bash
# Runs every benchmark 3 times (each measures its own bare floor in the
# same run), one package at a time so benchmarks do not compete for the
# CPUs, and prints each target metric as median [min..max] against its
# target, with the CPU time other processes took meanwhile (from
# /proc/stat: all busy time less this script's children and less what the
# Docker engine spent on the benchmarks' containers), flagging a run
# taken on a busy machine (others took more than 25 % of the CPUs). The
# full output goes to out/bench.txt. Sizes are the issues' own:
# PROCTOR_BENCH_EVENTS (projection, replay and the cold start's store,
# 1000000 here; 100000 in a bare go test run),
# PROCTOR_BENCH_THROUGHPUT_CELLS (cell throughput at concurrency 4, 32), PROCTOR_BENCH_ROWS (dataset export, 1000000),
# PROCTOR_BENCH_LINES (agent lines, 200000), PROCTOR_BENCH_PUBLISH (bus
# publish, 200000); PROCTOR_BENCH_COUNT the runs (3).
set -euo pipefail
cd "$(dirname "$0")/.."
export PROCTOR_BENCH_EVENTS=${PROCTOR_BENCH_EVENTS:-1000000}
export PROCTOR_BENCH_ROUNDS=${PROCTOR_BENCH_ROUNDS:-2}
count=${PROCTOR_BENCH_COUNT:-3}
mkdir -p out
: > out/bench.txt
: > out/bench-load.txt
hz=$(getconf CLK_TCK)
ncpu=$(nproc)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
children() { awk -v hz="$hz" '{print ($14+$15+$16+$17)}' /proc/$$/stat; }
# engine: the CPU (in clock ticks) the Docker engine took for the
# benchmarks' containers, which is theirs, not another process's: dockerd
# and containerd with what they reaped, and the containers' cgroup
# (cgroup v1 cpuacct or v2 cgroupfs driver; 0 where neither is found).
engine() {
  local t=0 p
  for p in $(pgrep -x dockerd) $(pgrep -x containerd); do
    t=$((t + $(awk '{print $14+$15+$16+$17}' /proc/$p/stat 2>/dev/null || echo 0)))
  done
  if [[ -r /sys/fs/cgroup/cpuacct/docker/cpuacct.usage ]]; then
    t=$((t + $(cat /sys/fs/cgroup/cpuacct/docker/cpuacct.usage) * hz / 1000000000))
  elif [[ -r /sys/fs/cgroup/docker/cpu.stat ]]; then
    t=$((t + $(awk '/^usage_usec/{print $2}' /sys/fs/cgroup/docker/cpu.stat) * hz / 1000000))
  fi
  echo "$t"
}
for pkg in $(go list ./... ); do
  grep -lq 'func Benchmark' $(go list -f '{{range .TestGoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .XTestGoFiles}}{{$.Dir}}/{{.}} {{end}}' "$pkg") /dev/null 2>/dev/null || continue
  b0=$(busy); c0=$(children); e0=$(engine); t0=$(date +%s.%N)
  go test -p 1 -run '^$' -bench . -benchtime 1x -count "$count" -timeout 60m "$pkg" >> out/bench.txt 2>&1 || true
  b1=$(busy); c1=$(children); e1=$(engine); t1=$(date +%s.%N)
  awk -v p="$pkg" -v b="$((b1 - b0))" -v c="$((c1 - c0))" -v e="$((e1 - e0))" -v hz="$hz" -v n="$ncpu" -v w0="$t0" -v w1="$t1" 'BEGIN {
    other = (b - c - e) / hz; if (other < 0) other = 0; wall = w1 - w0
    flag = (other > 0.25 * wall * n) ? "  BUSY MACHINE: ratios unreliable" : ""
    printf "%-55s wall %6.1f s, other processes %6.1f CPU-s (the engine for its containers %.1f apart)%s\n", p, wall, other, e / hz, flag
  }' | tee -a out/bench-load.txt
done
echo
echo "target metrics, median [min..max] over $count runs (target in brackets):"
awk '
BEGIN {
  target["BenchmarkPublish ratio(bus/raw)"] = ">= 0.7"
  target["BenchmarkPublish ratio(bus/raw-msgid)"] = "beside: against publish with Nats-Msg-Id"
  target["BenchmarkCellOverhead ratio"] = "<= 1.2"
  target["BenchmarkOracleCell ratio"] = "<= 1.2"
  target["BenchmarkClaudeCell ratio"] = "<= 1.2"
  target["BenchmarkClaudeCell floor-ms/cell"] = "floor"
  target["BenchmarkClaudeCell proctor-ms/cell"] = "proctor"
  target["BenchmarkClaudeCell installs-measured"] = "== 0 (once per task image)"
  target["BenchmarkEnsureImageCached ratio"] = "<= 1.5"
  target["BenchmarkProcessExec ratio"] = "<= 3"
  target["BenchmarkProcessExec driver-p99-us"] = "<= 10000"
  target["BenchmarkAgentEventLines ratio_vs_floor"] = ">= 0.6"
  target["BenchmarkAgentEventLines ratio_vs_msgid"] = "beside: against publish with Nats-Msg-Id"
  target["BenchmarkExportTaskRunsParquet x_raw_rate"] = ">= 0.8"
  target["BenchmarkExportTaskRunsParquet x_raw_size"] = "<= 1.05"
  target["BenchmarkProjection ratio_vs_floor"] = "<= 1.5"
  target["BenchmarkProjection floor_s"] = "floor"
  target["BenchmarkProjection proctor_s"] = "proctor"
  target["BenchmarkReplayRead ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkReplayRead floor_s"] = "floor"
  target["BenchmarkReplayRead proctor_s"] = "proctor"
  target["BenchmarkCellThroughput ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkCellThroughput latency_ratio"] = "<= 1.2"
  target["BenchmarkCellThroughput floor-cells/s"] = "floor"
  target["BenchmarkCellThroughput proctor-cells/s"] = "proctor"
  target["BenchmarkColdStart budget_ratio"] = "<= 1 (proctor_s <= 1.5 floor_s + 0.5)"
  target["BenchmarkColdStart floor_s"] = "floor"
  target["BenchmarkColdStart proctor_s"] = "proctor"
  target["BenchmarkDiscover10k s/discover"] = "< 2"
  target["BenchmarkViewRunPage s/open"] = "< 2"
  target["BenchmarkProxyDownload/connect ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkProxyDownload/http ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkProxyConnectLatency added_p99_ms"] = "<= 2"
  target["BenchmarkGatewayStream added_ms_per_call"] = "<= 2"
  target["BenchmarkGatewayStream ratio_vs_tunnel"] = ">= 0.9"
  target["BenchmarkGatewayStream events_ratio_vs_tunnel"] = "beside: a model-like stream of small events"
  target["BenchmarkGatewayStream connect_added_ms"] = "beside: the first call's second handshake"
}
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  for (i = 3; i < NF; i += 2) {
    key = name " " $(i + 1)
    if (key in target) { n[key]++; v[key, n[key]] = $i + 0 }
  }
}
END {
  for (key in n) {
    m = n[key]
    for (i = 1; i <= m; i++) a[i] = v[key, i]
    for (i = 2; i <= m; i++) { x = a[i]; j = i - 1; while (j >= 1 && a[j] > x) { a[j + 1] = a[j]; j-- }; a[j + 1] = x }
    med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    printf "  %-50s %10.4g [%.4g..%.4g]   [%s]\n", key, med, a[1], a[m], target[key]
  }
}' out/bench.txt | sort
