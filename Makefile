# proctor's entry points. `make test` is what CI runs (.ci/run).

GO ?= go

.PHONY: all build setup setup-node setup-browser setup-claude setup-codex setup-compose test e2e fuzz vet bench soak scale scale-test demo deploy-test docs clean

all: build

## build: compile the proctor binary into bin/proctor (static: the isolation probe copies it into task containers)
build:
	CGO_ENABLED=0 $(GO) build -o bin/proctor ./cmd/proctor

## setup: make sure a Docker engine answers and the base images exist
setup:
	scripts/setup.sh

## setup-node: setup, plus the Node.js dataset readers in .cache/node
setup-node:
	scripts/setup.sh --node

## setup-browser: setup, plus Debian's chromium for the viewer's headless browser tests
setup-browser:
	scripts/setup.sh --browser

## setup-claude: setup, plus the pinned Claude Code CLI in .cache/claude (the docker-claude arms)
setup-claude:
	scripts/setup.sh --claude

## setup-codex: setup, plus the pinned OpenAI Codex CLI in .cache/codex (the docker-codex arms)
setup-codex:
	scripts/setup.sh --codex

## setup-compose: setup, plus Debian's docker-compose (deploy/)
setup-compose:
	scripts/setup.sh --compose

## vet: static checks
vet:
	$(GO) vet ./...

## test: vet, then every package's tests against the real engine (the longest packages first) with the short fuzz runs beside them at the lowest priority (nice 19; their output in out/fuzz.log, shown when the tests end)
# TEST_FIRST: the packages whose tests take longest, started first. go test
# runs packages in the order they are named, and -p bounds builds and test
# binaries together: a long package started last runs alone at the end, and
# two long ones running at once hold both slots (docs/testing.md).
# The static proctor the Docker tests run (testutil.ProctorBinary) is
# compiled once before them, not by each test binary that starts at once.
TEST_FIRST ?= ./internal/cli ./pkg/sandbox/docker ./pkg/harness ./internal/view ./internal/pipeline ./pkg/projection
test: setup-node setup-browser setup-claude setup-codex
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) build -o /dev/null ./cmd/proctor
	@mkdir -p out
	@echo "nice -n 19 $(MAKE) fuzz FUZZTIME=20000x > out/fuzz.log &"
	@echo "$(GO) test -count=1 -p 2 -timeout 30m $(TEST_FIRST) ./..."
	@nice -n 19 $(MAKE) --no-print-directory fuzz FUZZTIME=20000x > out/fuzz.log 2>&1 & fuzz=$$!; \
	$(GO) test -count=1 -p 2 -timeout 30m $(TEST_FIRST) ./...; tests=$$?; \
	wait $$fuzz; fuzzed=$$?; \
	echo "make fuzz FUZZTIME=20000x (beside the tests, out/fuzz.log):"; cat out/fuzz.log; \
	if [ $$fuzzed -ne 0 ]; then echo "make fuzz failed: out/fuzz.log"; fi; \
	[ $$tests -eq 0 ] && [ $$fuzzed -eq 0 ]

## e2e: the long end-to-end variants `make test` skips (PROCTOR_E2E=long; docs/testing.md lists them and why), with every other test of their packages
e2e: setup-node setup-browser setup-claude setup-codex
	PROCTOR_E2E=long $(GO) test -count=1 -p 1 -timeout 90m ./internal/cli/ ./pkg/harness/

## fuzz: run each fuzz target for FUZZTIME inputs (default 200000x), one at a time; a count, not a duration: go1.26's fuzz coordinator can fail a duration run at its deadline with "context deadline exceeded" and no crasher (golang/go#75804, fixed in go1.27)
FUZZTIME ?= 200000x
# FUZZMIN bounds the minimizing of each new input (go's default is 60 s
# for each, which let one run of FuzzReport stand a minute at 0 execs/s).
FUZZMIN ?= 500x
# -timeout: go test's default of 10 minutes is the whole run's, workers
# included; a run beside the tests at nice 19 can take longer than that.
FUZZFLAGS = -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout 30m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzSplitFrontmatter$$' $(FUZZFLAGS) ./pkg/task
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' $(FUZZFLAGS) ./pkg/task
	$(GO) test -run '^$$' -fuzz '^FuzzAppendJSONString$$' $(FUZZFLAGS) ./pkg/dataset
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMatchesJSON$$' $(FUZZFLAGS) ./pkg/events
	$(GO) test -run '^$$' -fuzz '^FuzzReport$$' $(FUZZFLAGS) ./pkg/artifact
	$(GO) test -run '^$$' -fuzz '^FuzzText$$' $(FUZZFLAGS) ./pkg/textsafe
	$(GO) test -run '^$$' -fuzz '^FuzzParseReward$$' $(FUZZFLAGS) ./pkg/harness
	$(GO) test -run '^$$' -fuzz '^FuzzParseLineFastMatchesJSON$$' $(FUZZFLAGS) ./pkg/harness

## bench: run each benchmark 3 times; print median [min..max] of each ratio against its floor and the CPU other processes took
bench: setup-node setup-browser setup-claude
	scripts/bench.sh

## soak: the long-test set (not in `make test`): 500 oracle cells printing 5 MB each at concurrency 8 on the embedded server, RSS, heap, goroutines and fds sampled every 50 cells (PROCTOR_SOAK_CELLS, PROCTOR_SOAK_EVERY, PROCTOR_SOAK_MB)
soak: setup
	PROCTOR_SOAK=1 $(GO) test -count=1 -p 1 -v -run '^TestSoak$$' -timeout 4h ./internal/cli/

## scale: the scale rig (deploy/scale; not in `make test`): a 3-node JetStream cluster, the planner and aggregator, SCALE_WORKERS simulated worker nodes, runs offered at SCALE_RATE cells/h for SCALE_DURATION with faults; SCALE_FLAGS adds rig flags (`bin/proctor-scale rig -h`)
SCALE_WORKERS ?= 50
SCALE_RATE ?= 10000
SCALE_DURATION ?= 10m
SCALE_FLAGS ?=
scale:
	$(GO) build -o bin/nats-server github.com/nats-io/nats-server/v2
	$(GO) build -o bin/proctor-scale ./deploy/scale
	bin/proctor-scale rig --nats-server bin/nats-server --workers $(SCALE_WORKERS) --rate $(SCALE_RATE) --duration $(SCALE_DURATION) --profile --report out/scale-report.txt $(SCALE_FLAGS)

## scale-test: the scale rig at its smallest (TestScaleRigTiny: 3 servers, 2 workers, 50 cells and a single-node reference; 15-40 s, so not in `make test`)
scale-test:
	PROCTOR_SCALE_TEST=1 $(GO) test -count=1 -p 1 -v -run '^TestScaleRigTiny$$' ./internal/scalerig/

## demo: run the example tasks through the oracle and the three example agents, checking the oracle's outcomes (report in out/demo: difficulty rollup, per-task cost, ⚠️ on the overclaiming agent's cells), then the Claude arms against the scripted model (out/demo-claude), Claude against the Codex arms (out/demo-codex) and an agent:<dir> agent through the model gateway, observed tokens and cost beside its own (out/demo-agent)
demo: setup setup-claude setup-codex build
	@echo "examples/tasks holds three tasks built to go wrong, to show how proctor reports them (examples/tasks/README.md):"
	@echo "  needs-token  errored before any build (unresolved_env; the 'warning: needs-token' line below says why)"
	@echo "  slow-check   verifier_timeout (reward 0);  bad-reward  verifier_error (no verdict, never a 0)"
	./bin/proctor tasks run --tasks-root examples/tasks --all \
		--harnesses oracle,agent:examples/agents/scripted,agent:examples/agents/metrics,agent:examples/agents/overclaim \
		--baseline-harness agent:examples/agents/scripted \
		--output-dir out/demo --out-json out/demo/task_runs.json --out-md out/demo/report.md
	@echo
	@scripts/demo-expect.sh out/demo/task_runs.json "the oracle passes the six sound tasks; needs-token, slow-check and bad-reward go wrong as built" \
		$(foreach t,fix-sum csv-columns count-words noisy-daemon home-workdir notes-steps,$(t)/oracle/default/1=passed) \
		needs-token/oracle/default/1=errored slow-check/oracle/default/1=verifier_timeout bad-reward/oracle/default/1=verifier_error
	@echo "report and its figures: out/demo/report.md (pass-rate.svg, paired-diff.svg, cost-pass-rate.svg, outcome-grid.svg beside it)"
	@echo "browse the runs, live:  ./bin/proctor view   (then open http://127.0.0.1:8080/runs)"
	scripts/demo-claude.sh out/demo-claude out/demo-codex out/demo-agent

## deploy-test: bring up deploy/docker-compose.yml, run example tasks, kill -9 a worker and a NATS node mid-run, check the artifact; control a second run from a second process (deploy/cluster-test.sh)
deploy-test: setup-compose
	deploy/cluster-test.sh

## docs: rewrite docs/cli.md from the command tree (TestCLIReference fails when it is out of date)
docs:
	$(GO) run ./cmd/proctor docs cli > docs/cli.md

## clean: remove build and demo outputs
clean:
	rm -rf bin out
