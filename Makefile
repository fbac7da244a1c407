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

## test: vet, every package's tests against the real engine, then short fuzz runs
test: setup-node setup-browser setup-claude setup-codex
	$(GO) vet ./...
	$(GO) test -count=1 -p 2 -timeout 30m ./...
	$(MAKE) fuzz FUZZTIME=20000x

## e2e: the long end-to-end variants `make test` skips (PROCTOR_E2E=long; docs/testing.md lists them and why), with every other test of their packages
e2e: setup-node setup-browser setup-claude setup-codex
	PROCTOR_E2E=long $(GO) test -count=1 -p 1 -timeout 90m ./internal/cli/ ./pkg/harness/

## fuzz: run each fuzz target for FUZZTIME inputs (default 200000x), one at a time; a count, not a duration: go1.26's fuzz coordinator can fail a duration run at its deadline with "context deadline exceeded" and no crasher (golang/go#75804, fixed in go1.27)
FUZZTIME ?= 200000x
# FUZZMIN bounds the minimizing of each new input (go's default is 60 s
# for each, which let one run of FuzzReport stand a minute at 0 execs/s).
FUZZMIN ?= 500x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzSplitFrontmatter$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/task
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/task
	$(GO) test -run '^$$' -fuzz '^FuzzAppendJSONString$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/dataset
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeMatchesJSON$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/events
	$(GO) test -run '^$$' -fuzz '^FuzzReport$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/artifact
	$(GO) test -run '^$$' -fuzz '^FuzzText$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/textsafe
	$(GO) test -run '^$$' -fuzz '^FuzzParseReward$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) ./pkg/harness

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

## scale-test: the scale rig at its smallest (TestScaleRigTiny: 3 servers, 2 workers, 50 cells and a single-node reference; 25-40 s, so not in `make test`)
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
