#!/usr/bin/env bash
# Runs every benchmark once (each measures its own raw baseline in the same
# run), one package at a time so benchmarks do not compete for the CPUs,
# and prints the ratios against their targets. The full output goes to
# out/bench.txt. Sizes are the issues' own: PROCTOR_BENCH_EVENTS
# (projection and replay, 1000000 here; 100000 in a bare go test run),
# PROCTOR_BENCH_ROWS (dataset export, 1000000), PROCTOR_BENCH_LINES (agent
# lines, 200000), PROCTOR_BENCH_PUBLISH (bus publish, 200000).
set -euo pipefail
cd "$(dirname "$0")/.."
export PROCTOR_BENCH_EVENTS=${PROCTOR_BENCH_EVENTS:-1000000}
export PROCTOR_BENCH_ROUNDS=${PROCTOR_BENCH_ROUNDS:-1}
mkdir -p out
go test -p 1 -run '^$' -bench . -benchtime 1x -timeout 30m ./... | tee out/bench.txt |
  grep -E '^(Benchmark|ok|FAIL|---)' || true
echo
echo "ratios against raw baselines measured in the same run (target in brackets):"
awk '
BEGIN {
  target["BenchmarkPublish ratio(bus/raw)"] = ">= 0.7"
  target["BenchmarkCellOverhead ratio"] = "<= 1.2"
  target["BenchmarkOracleCell ratio"] = "<= 1.2"
  target["BenchmarkEnsureImageCached ratio"] = "<= 1.5"
  target["BenchmarkProcessExec ratio"] = "<= 3"
  target["BenchmarkProcessExec driver-p99-us"] = "<= 10000"
  target["BenchmarkAgentEventLines ratio_vs_floor"] = ">= 0.6"
  target["BenchmarkExportTaskRunsParquet x_raw_rate"] = ">= 0.8"
  target["BenchmarkExportTaskRunsParquet x_raw_size"] = "<= 1.05"
  target["BenchmarkProjection ratio_vs_floor"] = "<= 1.5"
  target["BenchmarkReplayRead ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkDiscover10k s/discover"] = "< 2"
  target["BenchmarkViewRunPage s/open"] = "< 2"
  target["BenchmarkProxyDownload/connect ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkProxyDownload/http ratio_vs_floor"] = ">= 0.8"
  target["BenchmarkProxyConnectLatency added_p99_ms"] = "<= 2"
}
/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  for (i = 3; i < NF; i += 2) {
    key = name " " $(i + 1)
    if (key in target) printf "  %-45s %10s   [%s]\n", name " " $(i + 1), $i, target[key]
  }
}' out/bench.txt
