#!/usr/bin/env bash
# Brings up deploy/docker-compose.yml (3-node NATS JetStream cluster with
# authentication, a control node, two worker nodes on this machine's Docker
# engine), runs example tasks through the oracle on it, kills one worker and
# one NATS node with SIGKILL mid-run, and checks that the run still finishes
# right:
#   - the driver (`proctor tasks run --nats ...`) exits 0 and writes the artifact;
#   - every planned cell has exactly one row, every row passed (oracle);
#   - in the event log no cell has more than one Verdict, and each cell's
#     last attempt has exactly one terminal event (Verdict or CellErrored);
#   - `proctor runs fetch RUN` from a container that sees none of the
#     nodes' disks writes the same outputs as the driver did; `proctor gc
#     --run RUN` removes them from the bucket, a second gc finds nothing
#     and a fetch then fails;
#   - no container or network of the run is left on the engine, and no
#     cell directory in worker-2's home; worker-1, started again, sweeps
#     the cell directories its killed predecessor left.
# Then, on the same cluster, run control from a second process (one-off
# containers of the control service) while the cells of a second run (a
# slow task, oracle) run on both workers:
#   - `runs pause --now` reports the solves frozen (the engine holds their
#     containers paused) and no other cell starts;
#   - `runs cancel --cell` stops one frozen cell (its containers removed),
#     errored, class cancelled;
#   - `runs continue` reports the thaws; `runs requeue --outcome errored
#     --class cancelled` runs the cancelled cell again (attempt 2);
#   - the driver exits 0, every row passed, the requeued one in 2 attempts,
#     `proctor replay` gives the artifact's bytes, and no container,
#     network or worker's cell directory of the run is left.
# Then `docker-compose down -v`. Prints PASS or FAIL with the reasons and
# exits non-zero on failure. Needs root (or the docker group), docker-compose
# (scripts/setup.sh --compose), go and python3.
#
# Usage: deploy/cluster-test.sh
#
# Environment:
#   CLUSTER_TASKS     tasks to run (default fix-sum,csv-columns,count-words,noisy-daemon)
#   CLUSTER_REPEATS   attempts per task (default 3)
#   CLUSTER_KEEP      1: leave the cluster up and the data directory on failure
#   CLUSTER_LOGS      a file to write every service's log to before the teardown
#   PROCTOR_ACK_WAIT  workers' --ack-wait (default 15s): how soon a dead worker's jobs return
#   PROCTOR_NODE_LOST the aggregator's --node-lost (default 30s): how soon the
#                     cells a dead worker was to verify are errored (infra)
#                     and retried on the other worker
#   CLUSTER_RESTART_WORKER  1: start worker-1 again 2×ack-wait + 20 s after
#                     the kill (a supervisor bringing it back) instead of
#                     leaving it dead
#   CLUSTER_PHASES    which parts run (default kill,control): kill is the
#                     run whose worker and NATS node are killed, control
#                     the run controlled from a second process
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

tasks=${CLUSTER_TASKS:-fix-sum,csv-columns,count-words,noisy-daemon}
repeats=${CLUSTER_REPEATS:-3}
export PROCTOR_ACK_WAIT=${PROCTOR_ACK_WAIT:-15s}
export PROCTOR_NODE_LOST=${PROCTOR_NODE_LOST:-30s}
export PROCTOR_DEPLOY_TAG=${PROCTOR_DEPLOY_TAG:-local}
project=proctor-deploy-$$
t0=$SECONDS

say() { printf 'cluster-test [%3ds]: %s\n' $((SECONDS - t0)) "$*"; }
failures=()
fail() { failures+=("$*"); say "FAIL: $*"; }
die() {
  fail "$*"
  exit 1
}

for tool in docker docker-compose go python3; do
  command -v "$tool" >/dev/null || { echo "cluster-test: $tool not found (scripts/setup.sh --compose installs docker-compose)" >&2; exit 2; }
done

# The data directory is bind-mounted at its own path into every proctor
# container: workers start sandboxes on the host's engine, which resolves
# the cells' bind mounts on the host.
data=$(mktemp -d "${TMPDIR:-/tmp}/proctor-deploy.XXXXXX")
data=$(cd "$data" && pwd -P)
export PROCTOR_DEPLOY_DATA=$data
export PROCTOR_DEPLOY_INPUTS=$repo/examples
rnd() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
PROCTOR_SERVICE_PASSWORD=$(rnd)
PROCTOR_OBSERVER_PASSWORD=$(rnd)
PROCTOR_ROUTE_PASSWORD=$(rnd)
export PROCTOR_SERVICE_PASSWORD PROCTOR_OBSERVER_PASSWORD PROCTOR_ROUTE_PASSWORD

dc() { docker-compose -p "$project" -f "$repo/deploy/docker-compose.yml" "$@"; }
# A worker keeps each cell attempt's directory in its own home,
# $PROCTOR_HOME/cells/<run>/<cell hash>/<attempt>/, until it stores it
# for the driver, which writes it under --output-dir when the verdict
# arrives.
# cell_hashes TASKS REPEATS prints "<cell hash> <cell id>" for the oracle
# cells of TASKS (comma-separated); cell_of MAP RUNLOG prints the id of
# the cell whose attempt directory holds RUNLOG.
cell_hashes() {
  local t r id
  for t in ${1//,/ }; do
    for ((r = 1; r <= $2; r++)); do
      id="$t/oracle/default/$r"
      printf '%s %s\n' "$(printf '%s' "$id" | sha256sum | cut -c1-16)" "$id"
    done
  done
}
cell_of() { awk -v h="$(basename "$(dirname "$(dirname "$2")")")" '$1 == h {print $2}' "$1"; }
# attempt_dirs HOME RUN prints the cell attempt directories of RUN a
# worker's home holds.
attempt_dirs() { find "$1/cells/$2" -mindepth 2 -maxdepth 2 -type d 2>/dev/null || true; }
# run_dirs HOME RUN prints what a worker's home holds of RUN's cells
# (cell and attempt directories): nothing once the run has ended and the
# worker has swept.
run_dirs() { find "$1/cells/$2" -mindepth 1 -maxdepth 2 2>/dev/null || true; }
# swept_w1 checks that worker-1, started again after its kill, swept the
# cell directories of the kill run its predecessor left (at start, then
# every --ack-wait).
swept_w1() {
  [[ -n ${run_id:-} && -s $data/w1-left ]] || return 0
  local deadline=$((SECONDS + ${PROCTOR_ACK_WAIT%s} + 30)) n
  while n=$(run_dirs "$data/home/worker-1" "$run_id" | wc -l) && ((n > 0)); do
    if ((SECONDS >= deadline)); then
      fail "worker-1, started again, kept $n of the cell and attempt directories its killed predecessor left ($(wc -l <"$data/w1-left") attempts)"
      return
    fi
    sleep 1
  done
  say "worker-1, started again, swept the $(wc -l <"$data/w1-left") cell directories its killed predecessor left"
}
# run_cli runs proctor in a one-off container of the control service on
# the project's network (credentials from the service's environment).
run_cli() { dc run --rm --no-deps -T control "$@"; }

driver_pid=""
finish() {
  local rc=$?
  if [[ -n $driver_pid ]] && kill -0 "$driver_pid" 2>/dev/null; then kill "$driver_pid" 2>/dev/null || true; fi
  if ((${#failures[@]} > 0)) || ((rc != 0)); then
    for log in "$data/driver.log" "$data/ctl-driver.log"; do
      if [[ -f $log ]]; then
        echo "--- $(basename "$log") (last 30 lines)"
        tail -n 30 "$log"
      fi
    done
    if [[ -n ${run_id:-} ]]; then
      echo "--- proctor runs show $run_id"
      run_cli runs show "$run_id" 2>&1 | tail -n 12 || true
    fi
    echo "--- service logs (last 15 lines each)"
    dc logs --no-color --tail 15 control worker-1 worker-2 2>/dev/null || true
  fi
  if [[ -n ${CLUSTER_LOGS:-} ]]; then
    dc logs --no-color --timestamps >"$CLUSTER_LOGS" 2>&1 || true
  fi
  if [[ ${CLUSTER_KEEP:-0} == 1 ]] && ((${#failures[@]} > 0 || rc != 0)); then
    say "CLUSTER_KEEP=1: left project $project up and $data in place"
  else
    # The one-off containers first (a driver or a fetch cut short): the
    # project's network cannot go while they are attached to it.
    docker ps -aq --filter "label=com.docker.compose.project=$project" --filter label=com.docker.compose.oneoff=True |
      xargs -r docker rm -f >/dev/null 2>&1 || true
    docker rm -f "$project-fetch" >/dev/null 2>&1 || true
    dc down -v --remove-orphans >/dev/null 2>&1 || true
    # Cells the run left (only if a check below already failed on them).
    for r in ${run_id:-} ${ctl_run:-}; do
      docker ps -aq --filter "label=proctor.run=$r" | xargs -r docker rm -f >/dev/null 2>&1 || true
      docker network ls -q --filter "label=proctor.run=$r" | xargs -r docker network rm >/dev/null 2>&1 || true
    done
    rm -rf "$data"
  fi
  if ((${#failures[@]} == 0)) && ((rc == 0)); then
    say "PASS (wall time $((SECONDS - t0)) s)"
  else
    say "FAIL (wall time $((SECONDS - t0)) s):"
    for f in "${failures[@]}"; do echo "  - $f"; done
    ((rc != 0)) || rc=1
  fi
  exit "$rc"
}
trap finish EXIT
# A test cut short by a signal has not passed (the EXIT trap alone would
# see the status of the last command).
for sig in INT TERM HUP; do
  # shellcheck disable=SC2064
  trap "fail 'interrupted by SIG$sig'; exit 1" "$sig"
done

# 1. Images, built here from the pinned sources: no registry.
say "building bin/proctor and nats-server (go.mod's version), images proctor-deploy/*:$PROCTOR_DEPLOY_TAG"
make -s build
ctx=$data/images
mkdir -p "$ctx/nats" "$ctx/proctor"
CGO_ENABLED=0 go build -o "$ctx/nats/nats-server" github.com/nats-io/nats-server/v2
cp deploy/images/nats/Dockerfile "$ctx/nats/"
cp bin/proctor deploy/images/proctor/Dockerfile "$ctx/proctor/"
docker build -q --label proctor.deploy=image -t "proctor-deploy/nats:$PROCTOR_DEPLOY_TAG" "$ctx/nats" >/dev/null
docker build -q --label proctor.deploy=image -t "proctor-deploy/proctor:$PROCTOR_DEPLOY_TAG" "$ctx/proctor" >/dev/null
rm -rf "$ctx"

# 2. The cluster.
say "starting project $project (data $data)"
dc up -d >/dev/null 2>&1 || die "docker-compose up failed: $(dc up -d 2>&1 | tail -n 5)"


say "waiting for the JetStream cluster (meta leader, R3 run index)"
deadline=$((SECONDS + 90))
until run_cli runs list >/dev/null 2>&1; do
  ((SECONDS < deadline)) || die "the cluster did not answer 'proctor runs list' within 90 s"
  sleep 2
done

phases=${CLUSTER_PHASES:-kill,control}
phase() { [[ ",$phases," == *",$1,"* ]]; }

if phase kill; then
# 3. The run, driven from a one-off container; it blocks until the run ends.
ncells=$(($(tr ',' '\n' <<<"$tasks" | grep -c .) * repeats))
say "run: $tasks × oracle × $repeats repeats = $ncells cells (retries 2)"
mkdir -p "$data/out"
run_cli tasks run --tasks-root "$PROCTOR_DEPLOY_INPUTS/tasks" --tasks "$tasks" --harnesses oracle \
  --repeats "$repeats" --retries 2 --output-dir "$data/out" \
  --out-json "$data/task_runs.json" --out-md "$data/report.md" >"$data/driver.log" 2>&1 &
driver_pid=$!

deadline=$((SECONDS + 60))
run_id=""
until [[ -n $run_id ]]; do
  ((SECONDS < deadline)) || die "the driver printed no run id within 60 s"
  kill -0 "$driver_pid" 2>/dev/null || die "the driver exited before its run started"
  run_id=$(sed -n 's/^run \([0-9A-Z]\{26\}\): .*/\1/p' "$data/driver.log" | head -n 1)
  [[ -n $run_id ]] || sleep 1
done
say "run $run_id started"

sandboxes() { docker ps -q --filter "label=proctor.run=$run_id" --filter label=proctor.cell | wc -l; }
cell_hashes "$tasks" "$repeats" >"$data/cells.map"
# launching_on_worker1 prints a cell whose latest attempt runs on worker-1
# and has not ended its solve (its launch job is in flight), from the
# cells' run.log in worker-1's home.
launching_on_worker1() {
  local f
  for f in "$data/home/worker-1/cells/$run_id"/*/*/run.log; do
    [[ -f $f ]] || continue
    if awk '/ attempt [0-9]+ on node /{n=$NF; e=0} /solve ended|errored/{e=1} END{exit !(n=="worker-1" && !e)}' "$f"; then
      cell_of "$data/cells.map" "$f"
      return 0
    fi
  done
  return 1
}

# 4. Mid-run: once worker-1 is launching a cell, kill it and one NATS node.
deadline=$((SECONDS + 240))
until victim=$(launching_on_worker1); do
  ((SECONDS < deadline)) || die "worker-1 launched no cell of the run within 240 s"
  kill -0 "$driver_pid" 2>/dev/null || die "the run ended before the kills"
  sleep 0.2
done
w1=$(dc ps -q worker-1)
n2=$(dc ps -q nats-2)
docker kill -s KILL "$w1" >/dev/null
docker kill -s KILL "$n2" >/dev/null
killed_at=$((SECONDS - t0))
say "killed worker-1 and nats-2 with SIGKILL (worker-1 was launching $victim; $(sandboxes) sandboxes of the run running)"
# The cell attempt directories the dead worker-1 left in its home: the
# worker that takes its place sweeps them (checked once it has started).
attempt_dirs "$data/home/worker-1" "$run_id" >"$data/w1-left"
say "worker-1 left $(wc -l <"$data/w1-left") cell attempt directories of the run in its home"

# 5. The run must finish on worker-2 and two NATS nodes. Launch jobs are
# shared: worker-1's come back to worker-2 after --ack-wait. Verify jobs
# are bound to the node whose engine holds the sandbox: a cell worker-1
# was to verify is errored (infra, "node worker-1 lost") once worker-1
# has been silent for --node-lost, and --retries runs it again on
# worker-2. With CLUSTER_RESTART_WORKER=1 worker-1 is started again
# instead, as its supervisor (the engine's restart policy, systemd's
# Restart=) would, once worker-2 had time for the redelivered launch jobs.
ack=${PROCTOR_ACK_WAIT%s}
restart_at=$((SECONDS + 2 * ack + 20))
[[ ${CLUSTER_RESTART_WORKER:-0} == 1 ]] || restart_at=$((SECONDS + 100000))
restarted=""
deadline=$((SECONDS + 300))
while kill -0 "$driver_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || die "the run did not finish within 300 s of the kills"
  if [[ -z $restarted ]] && ((SECONDS >= restart_at)); then
    dc start worker-1 >/dev/null 2>&1 || die "docker-compose start worker-1 failed"
    restarted=$((SECONDS - t0))
    say "started worker-1 again (the run had not finished $((2 * ack + 20)) s after the kills)"
  fi
  sleep 1
done
set +e
wait "$driver_pid"
driver_rc=$?
set -e
driver_pid=""
say "driver exited $driver_rc (kills at ${killed_at} s${restarted:+, worker-1 back at $restarted s})"
((driver_rc == 0)) || fail "proctor tasks run exited $driver_rc"
say "$victim: $(grep -E ' attempt [0-9]+ on node ' "$data/out/$run_id/$victim/run.log" | sed 's/^[^ ]* //' | paste -sd ';' -)"
if ! grep -Eq ' attempt [0-9]+ on node worker-2' "$data/out/$run_id/$victim/run.log"; then
  [[ -n $restarted ]] || fail "$victim, launching on worker-1 at the kill, never ran on worker-2"
fi

# 6. The artifact and the event log.
run_cli events export "$run_id" --format jsonl --out "$data/events.jsonl" >/dev/null 2>&1 ||
  fail "proctor events export $run_id failed"
if [[ -f $data/task_runs.json ]]; then
  if ! python3 - "$data/task_runs.json" "$data/events.jsonl" "$ncells" <<'PY'; then
import collections, json, sys
art, log, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
bad = []
a = json.load(open(art))
rows = a["results"]
ids = [r["cell_id"] for r in rows]
if len(rows) != want:
    bad.append(f"artifact has {len(rows)} rows, want {want}")
dup = [c for c, n in collections.Counter(ids).items() if n > 1]
if dup:
    bad.append(f"cells with more than one row: {dup}")
outcomes = collections.Counter(r["outcome"] for r in rows)
for r in rows:
    if not r["passed"]:
        bad.append(f"{r['cell_id']}: {r['outcome']} {r.get('error_class', '')} {r.get('error', '')[:200]}")
attempts = sum(r.get("attempts", 1) for r in rows)
seen, verdicts, terminal, last = set(), collections.Counter(), collections.Counter(), {}
try:
    for line in open(log):
        e = json.loads(line)
        if e["id"] in seen:
            continue
        seen.add(e["id"])
        c = e.get("cell_id")
        if not c:
            continue
        last[c] = max(last.get(c, 0), e.get("attempt", 0))
        if e["type"] == "Verdict":
            verdicts[c] += 1
        if e["type"] in ("Verdict", "CellErrored"):
            terminal[(c, e.get("attempt", 0))] += 1
except FileNotFoundError:
    bad.append("no event log exported")
for c, n in verdicts.items():
    if n > 1:
        bad.append(f"{c}: {n} Verdict events in the log")
for c in ids:
    n = terminal[(c, last.get(c, 0))]
    if n != 1:
        bad.append(f"{c}: {n} terminal events in its last attempt {last.get(c, 0)}")
print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
      + f"; rows {len(rows)}, attempts {attempts}, events {len(seen)}")
for b in bad:
    print("BAD: " + b)
sys.exit(1 if bad else 0)
PY
    fail "the artifact or the event log is wrong (BAD lines above)"
  fi
else
  fail "no artifact at $data/task_runs.json"
fi

# The workers read OOM kills and the freeze's process count from the
# host's cgroups (pid: host, PROCTOR_CGROUP_ROOT): no cell may say unknown.
unknown=$( (grep -rl "OOM kills unknown" "$data" 2>/dev/null || true) | wc -l)
if ((unknown > 0)); then
  fail "$unknown cell logs say \"OOM kills unknown\" (the workers do not see the host's cgroups)"
fi

# 7. The stored outputs, fetched by a process that sees none of the
# nodes' disks (a container on the project's network with only an empty
# directory mounted), are the driver's; `proctor gc --run` on the control
# node then removes them, a second gc finds nothing, and a fetch fails.
mkdir -p "$data/fetched"
fetched=$(PROCTOR_NATS_PASSWORD=$PROCTOR_SERVICE_PASSWORD docker run --rm --name "$project-fetch" --network "${project}_bus" \
  -e PROCTOR_NATS_URL=nats://nats-1:4222,nats://nats-3:4222 -e PROCTOR_NATS_USER=proctor -e PROCTOR_NATS_PASSWORD \
  -v "$data/fetched:/fetched" "proctor-deploy/proctor:$PROCTOR_DEPLOY_TAG" runs fetch "$run_id" --output-dir /fetched 2>&1) ||
  fail "proctor runs fetch $run_id from a machine without the workers' disks failed: $fetched"
say "runs fetch elsewhere: $(tail -n 1 <<<"$fetched")"
nlogs=$(find "$data/fetched" -name run.log | wc -l)
((nlogs == ncells)) || fail "runs fetch wrote $nlogs cell run.log files, want $ncells"
if ! outdiff=$(diff -r "$data/out/$run_id" "$data/fetched" 2>&1); then
  fail "the outputs runs fetch wrote differ from the driver's: $(head -n 5 <<<"$outdiff" | tr '\n' ';')"
fi
gc1=$(run_cli gc --run "$run_id" 2>&1) || fail "proctor gc --run $run_id failed: $gc1"
grep -v '^Creating ' <<<"$gc1" | sed 's/^/    /'
freed=$(sed -n 's/^removed \([0-9]*\) stored objects\?, .*/\1/p' <<<"$gc1")
((${freed:-0} >= ncells)) || fail "gc --run $run_id removed ${freed:-no} stored objects, want at least $ncells (each cell's output): $gc1"
gc2=$(run_cli gc --run "$run_id" 2>&1) || fail "the second proctor gc --run $run_id failed: $gc2"
grep -q '^removed 0 stored objects, 0 bytes' <<<"$gc2" || fail "the second gc --run $run_id found something: $gc2"
if refetch=$(run_cli runs fetch "$run_id" --output-dir /tmp/refetch 2>&1); then
  fail "runs fetch $run_id succeeded after gc: $refetch"
elif ! grep -q 'proctor gc removes the stored outputs' <<<"$refetch"; then
  fail "runs fetch $run_id after gc failed without saying gc removed the outputs: $(tail -n 3 <<<"$refetch")"
fi
say "gc --run: $(grep '^removed .* stored' <<<"$gc1"); again: $(grep '^removed .* stored' <<<"$gc2")"

# 8. Nothing of the run's cells left: worker-2 reaps what worker-1 left at
# its next reap (every --ack-wait), and removes its cell directories
# (at their terminal event, else its sweep); allow two rounds.
deadline=$((SECONDS + 2 * ${PROCTOR_ACK_WAIT%s} + 15))
while :; do
  left_c=$(docker ps -aq --filter "label=proctor.run=$run_id" | wc -l)
  left_n=$(docker network ls -q --filter "label=proctor.run=$run_id" | wc -l)
  left_d=$(run_dirs "$data/home/worker-2" "$run_id" | wc -l)
  ((left_c + left_n + left_d == 0)) && break
  if ((SECONDS >= deadline)); then
    fail "$left_c containers, $left_n networks and $left_d cell directories on worker-2 of run $run_id left after the run"
    break
  fi
  sleep 1
done
((left_c + left_n + left_d == 0)) && say "no container, network or worker-2 cell directory of run $run_id remains"
[[ -z $restarted ]] || swept_w1
fi


if phase control; then
# 9. Run control from a second process while cells run on both workers.
# A slow task (a line every 0.25 s, about 30 s) in the shared data
# directory, 6 repeats: 4 cells at once on the 2 workers.
ctl_tasks=$data/ctl-tasks
mkdir -p "$ctl_tasks/slow/environment" "$ctl_tasks/slow/solution" "$ctl_tasks/slow/tests"
printf 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n' >"$ctl_tasks/slow/task.toml"
echo "Write 1 to 120 into /app/ticks, one a line, slowly." >"$ctl_tasks/slow/instruction.md"
printf 'FROM debian:bookworm-slim\nWORKDIR /app\n' >"$ctl_tasks/slow/environment/Dockerfile"
cat >"$ctl_tasks/slow/solution/solve.sh" <<'SH'
#!/bin/bash
for i in $(seq 1 120); do echo "$i" >> /app/ticks; sleep 0.25; done
SH
cat >"$ctl_tasks/slow/tests/test.sh" <<'SH'
#!/bin/bash
mkdir -p /logs/verifier
if [ "$(seq 1 120)" = "$(cat /app/ticks 2>/dev/null)" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
SH
chmod +x "$ctl_tasks/slow/solution/solve.sh" "$ctl_tasks/slow/tests/test.sh"
ctl_cells=6
# The kill phase leaves worker-1 dead unless CLUSTER_RESTART_WORKER=1:
# start it again (a no-op when it runs), as its supervisor would.
dc start worker-1 >/dev/null 2>&1 || die "docker-compose start worker-1 failed"
swept_w1
say "control run: slow × oracle × $ctl_cells repeats, controlled from a second process"
mkdir -p "$data/ctl-out"
run_cli tasks run --tasks-root "$ctl_tasks" --tasks slow --harnesses oracle --repeats "$ctl_cells" \
  --output-dir "$data/ctl-out" --out-json "$data/ctl.json" --out-md "$data/ctl.md" >"$data/ctl-driver.log" 2>&1 &
driver_pid=$!
deadline=$((SECONDS + 60))
ctl_run=""
until [[ -n $ctl_run ]]; do
  ((SECONDS < deadline)) || die "the control run's driver printed no run id within 60 s"
  kill -0 "$driver_pid" 2>/dev/null || die "the control run's driver exited before its run started"
  ctl_run=$(sed -n 's/^run \([0-9A-Z]\{26\}\): .*/\1/p' "$data/ctl-driver.log" | head -n 1)
  [[ -n $ctl_run ]] || sleep 1
done
say "control run $ctl_run started"

# solving prints "cell node" for each cell of the control run whose
# solve has begun and not ended, from the cells' run.log in the workers'
# homes.
cell_hashes slow "$ctl_cells" >"$data/ctl-cells.map"
solving() {
  local f
  for f in "$data/home"/worker-*/cells/"$ctl_run"/*/*/run.log; do
    [[ -f $f ]] || continue
    awk -v cell="$(cell_of "$data/ctl-cells.map" "$f")" '
      / attempt [0-9]+ on node /{n=$NF; s=0; e=0}
      / solve: /{s=1}
      /solve ended|errored/{e=1}
      END{if (s && !e) print cell, n}' "$f"
  done
}
deadline=$((SECONDS + 240))
# (Each check reads a variable: with pipefail, `... | grep -q` fails when
# grep stops reading early.)
until now_solving=$(solving) && [[ $now_solving == *" worker-1"* && $now_solving == *" worker-2"* ]]; do
  ((SECONDS < deadline)) || die "no solve of the control run ran on both workers within 240 s ($(tr '\n' ';' <<<"$now_solving"))"
  kill -0 "$driver_pid" 2>/dev/null || die "the control run ended before the controls"
  sleep 0.5
done
say "solving: $(solving | tr '\n' ';')"

ctl_pause=$(run_cli runs pause "$ctl_run" --now --why "cluster test: look at it" 2>&1) || die "runs pause --now failed: $ctl_pause"
printf '%s\n' "$ctl_pause" | sed 's/^/    /'
grep -Eq '^  frozen +[^ ]+: [0-9]+ processes stopped' <<<"$ctl_pause" || fail "runs pause --now reported no frozen solve"
frozen_cell=$(sed -n 's/^  frozen *\([^ ]*\): .*/\1/p' <<<"$ctl_pause" | head -n 1)
npaused=$(docker ps -q --filter "label=proctor.run=$ctl_run" --filter status=paused | wc -l)
((npaused > 0)) || fail "pause --now: no container of run $ctl_run is paused on the engine"
say "pause --now: $npaused containers paused"

victim=${frozen_cell:-$(solving | head -n 1 | cut -d' ' -f1)}
[[ -n $victim ]] || die "no cell to cancel"
run_cli runs cancel "$ctl_run" --cell "$victim" --why "cluster test: stuck" >/dev/null 2>&1 || fail "runs cancel --cell $victim failed"
deadline=$((SECONDS + 120))
until (($(docker ps -aq --filter "label=proctor.run=$ctl_run" --filter "label=proctor.cell=$victim" | wc -l) == 0)); do
  ((SECONDS < deadline)) || { fail "the cancelled cell $victim still has containers 120 s after the cancel"; break; }
  sleep 0.5
done
say "cancelled $victim: its containers are gone"

ctl_cont=$(run_cli runs continue "$ctl_run" --why "cluster test: go on" 2>&1) || die "runs continue failed: $ctl_cont"
printf '%s\n' "$ctl_cont" | sed 's/^/    /'
grep -Eq '^  thawed ' <<<"$ctl_cont" || fail "runs continue reported no thaw"

# The cancelled cell's row, then its requeue while the run is live.
deadline=$((SECONDS + 120))
until show=$(run_cli runs show "$ctl_run" --cells 2>/dev/null) && [[ $show == *"$victim errored"* ]]; do
  ((SECONDS < deadline)) || { fail "$victim is not errored 120 s after its cancel"; break; }
  sleep 1
done
ctl_req=$(run_cli runs requeue "$ctl_run" --outcome errored --class cancelled --why "cluster test: again" 2>&1) ||
  fail "runs requeue failed: $ctl_req"
printf '%s\n' "$ctl_req" | sed 's/^/    /'

deadline=$((SECONDS + 300))
while kill -0 "$driver_pid" 2>/dev/null; do
  ((SECONDS < deadline)) || die "the control run did not finish within 300 s of the requeue"
  sleep 1
done
set +e
wait "$driver_pid"
ctl_rc=$?
set -e
driver_pid=""
say "control run's driver exited $ctl_rc"
((ctl_rc == 0)) || fail "the control run's tasks run exited $ctl_rc"
if [[ -f $data/ctl.json ]]; then
  python3 - "$data/ctl.json" "$ctl_cells" "$victim" <<'PY' || fail "the control run's artifact is wrong (BAD lines above)"
import json, sys
a = json.load(open(sys.argv[1]))
want, victim = int(sys.argv[2]), sys.argv[3]
bad = []
rows = a["results"]
if len(rows) != want:
    bad.append(f"{len(rows)} rows, want {want}")
for r in rows:
    if not r["passed"]:
        bad.append(f"{r['cell_id']}: {r['outcome']} {r.get('error_class', '')} {r.get('error', '')[:200]}")
    if r["cell_id"] == victim and r.get("attempts", 1) != 2:
        bad.append(f"{victim}: {r.get('attempts', 1)} attempts, want 2 (cancelled, then requeued)")
print("control run: " + ", ".join(f"{r['cell_id']} {r['outcome']}" for r in rows))
for b in bad:
    print("BAD: " + b)
sys.exit(1 if bad else 0)
PY
  run_cli replay "$ctl_run" --out-json "$data/ctl-replay.json" >/dev/null 2>&1 || fail "proctor replay $ctl_run failed"
  cmp -s "$data/ctl.json" "$data/ctl-replay.json" || fail "the replay of $ctl_run differs from its artifact"
else
  fail "no artifact at $data/ctl.json"
fi
run_cli events export "$ctl_run" --format jsonl --out "$data/ctl-events.jsonl" >/dev/null 2>&1 || fail "events export $ctl_run failed"
for ty in SolveFrozen SolveThawed RunControl; do
  grep -q "\"type\":\"$ty\"" "$data/ctl-events.jsonl" 2>/dev/null || fail "no $ty event in the control run's log"
done
deadline=$((SECONDS + 2 * ${PROCTOR_ACK_WAIT%s} + 15))
while :; do
  left_c=$(docker ps -aq --filter "label=proctor.run=$ctl_run" | wc -l)
  left_n=$(docker network ls -q --filter "label=proctor.run=$ctl_run" | wc -l)
  left_d=$( (run_dirs "$data/home/worker-1" "$ctl_run"; run_dirs "$data/home/worker-2" "$ctl_run") | wc -l)
  ((left_c + left_n + left_d == 0)) && break
  if ((SECONDS >= deadline)); then
    fail "$left_c containers, $left_n networks and $left_d workers' cell directories of run $ctl_run left after the run"
    break
  fi
  sleep 1
done
((left_c + left_n + left_d == 0)) && say "no container, network or worker's cell directory of run $ctl_run remains"
fi
