# Idempotent SQS -> Lambda consumer. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
ACTIONLINT_VERSION ?= v1.7.12
FUNCTIONS := consumer reaper ingress
BUILD_DIR := .aws-sam/make
LOCAL_AWS := localstack/with-local-aws.sh
# Checks the tools the targets on the command line need; every target runs it first.
TOOLS := internal/makefile/tools.sh
# Go's build flags for a Lambda bootstrap: static, no RPC shim, reproducible, stripped.
# LAMBDA_ARCH is the template's (arm64); localstack/deploy.sh sets the host's.
# LAMBDA_TAGS adds build tags: otlp compiles in the OTLP exporter that Tracing=xray and
# Tracing=otlp need (internal/tracing.OTLPBuildTag; about 9 MB of protobuf and gRPC), as in
# `make build LAMBDA_TAGS=otlp` or `LAMBDA_TAGS=otlp sam build --no-cached`.
LAMBDA_ARCH ?= arm64
LAMBDA_TAGS ?=
empty :=
comma := ,
LAMBDA_BUILD := CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_ARCH) $(GO) build -tags $(subst $(empty) $(empty),$(comma),$(strip lambda.norpc $(LAMBDA_TAGS))) -trimpath -ldflags='-s -w'

.PHONY: help tools test check unit lint cfn-lint actionlint build deploy demo clean bench bench-e2e bench-ingress fuzz reliability scale cost local-deploy rename sim sim-holes mutation

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 24

tools: ## check that the tools of the targets named with it (alone: test and demo) are installed; name what is missing and how to install it
	@$(TOOLS) $(filter-out tools help,$(MAKECMDGOALS))

# make test runs the packages where data races would live with -race: the library, the
# functions, the local event source mapping and execution environments, the demo's engine
# and the fault proxies. The other packages drive those from outside (idemctl, the swap
# test, the rename, the Makefile checks, ...): without -race their tests cost half the CPU,
# and a data race they could reach is in code whose own tests run with -race.
RACE_PKGS := ./idem/... ./functions/consumer/ledger/ ./functions/... ./internal/runner/ ./internal/lambdaenv/ ./internal/faults/ ./internal/demo/
# The reliability suite runs last and alone (with -race: its consumers run in the test
# process): its checks hold real timing (reaps within two reaper periods, stalled commits
# fenced, invocations within their timeout) that the other packages' load stretched past
# their limits when they ran beside it.
ALONE_PKGS := ./internal/reliability/
# The others, the longest first; go list dedups and keeps the order. Among them the
# simulator (internal/sim) explores its make-test budget, seeds 1 to 10 000 (without
# -race, which slows it tenfold), in the time the swap test takes.
OTHER_PKGS = ./internal/adapt/ ./internal/tooling/ ./internal/cli/ ./internal/rename/ \
	$(shell $(GO) list ./... | grep -vE '/(idem|functions|internal/(runner|lambdaenv|faults|demo|reliability))(/|$$)')
# 4 packages at a time, the tests that call t.Parallel 8 at a time: most of the tests'
# time is waiting (idle queues, visibility timeouts, child processes).
TEST_FLAGS := -count=1 -p 4 -parallel 8 -timeout 30m

test: tools check lint cfn-lint actionlint ## all tests: gofmt/vet/tidy, golangci-lint, cfn-lint, actionlint, unit and integration tests against moto_server
	@# The packages share one moto, each test on resources of its own, but for those that
	@# load it most (idem, the examples, the consumer, the ingress, the reliability suite,
	@# the swap test's copy, the consumer's tests in the copy without the tooling), which
	@# start their own (AWSTEST_OWN_MOTO, awstest.MainOwn): moto applies DynamoDB requests
	@# one at a time on one core. The OTLP exporter, out of the default build, is tested
	@# in a build with its tag (LAMBDA_TAGS above).
	$(LOCAL_AWS) --free-port -- env AWSTEST_OWN_MOTO=1 bash -c 'status=0; \
	  AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run "^$$" -fuzz "^FuzzFingerprint$$" -fuzztime $(FUZZTIME_BRIEF) -parallel 2 ./idem/ || status=1; \
	  AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -count=1 -tags otlp -run "^TestOTLPExport$$" ./internal/tracing/ || status=1; \
	  $(GO) test -race $(TEST_FLAGS) $(RACE_PKGS) || status=1; \
	  $(GO) test $(TEST_FLAGS) $(OTHER_PKGS) || status=1; \
	  $(GO) test -race $(TEST_FLAGS) $(ALONE_PKGS) || status=1; exit $$status'

unit: tools ## the tests, without -race (faster), against moto_server on a free port
	$(LOCAL_AWS) --free-port -- $(GO) test -count=1 ./...

# gofmt looks at every .go file on disk that git does not ignore: new unstaged files
# included, files deleted from the work tree but still in the index left out.
check: tools ## gofmt, go vet, go mod tidy leave nothing to change
	@out=$$(gofmt -l $$({ git ls-files --cached --others --exclude-standard -- '*.go' 2>/dev/null || find . -name '*.go'; } \
	  | sort -u | while read -r f; do [ -f "$$f" ] && echo "$$f"; done)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@cp go.mod go.mod.bak; cp go.sum go.sum.bak; $(GO) mod tidy; \
	  if ! cmp -s go.mod go.mod.bak || ! cmp -s go.sum go.sum.bak; then \
	    mv go.mod.bak go.mod; mv go.sum.bak go.sum; echo "go mod tidy changes go.mod/go.sum"; exit 1; fi; \
	  rm -f go.mod.bak go.sum.bak

lint: tools ## golangci-lint (pinned version, built from the Go module proxy)
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

cfn-lint: tools ## validate template.yaml; any finding fails
	cfn-lint template.yaml

# The workflows a team that copies the template runs (.github/workflows): syntax,
# expressions, permissions, the jobs' graph. (The actions are pinned by commit, whose
# inputs actionlint does not know: they were checked against each action.yml.)
actionlint: tools ## lint .github/workflows (actionlint, pinned version, built from the Go module proxy); any finding fails
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION) -no-color

build: tools ## build the Lambda bootstraps (consumer, reaper, ingress) for linux/arm64 and print their sizes
	@mkdir -p $(BUILD_DIR)
	@for f in $(FUNCTIONS); do \
	  $(LAMBDA_BUILD) -o $(BUILD_DIR)/$$f/bootstrap ./functions/$$f || exit 1; \
	  printf '%-9s %s bytes (%s)\n' $$f $$(stat -c %s $(BUILD_DIR)/$$f/bootstrap) $(BUILD_DIR)/$$f/bootstrap; \
	done

# `sam build` calls these (Metadata: BuildMethod: makefile) with ARTIFACTS_DIR set.
build-ConsumerFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/consumer
build-ReaperFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/reaper
build-IngressFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/ingress

deploy: tools ## sam build && sam deploy (needs the SAM CLI and AWS credentials; see README)
	sam build && sam deploy

# No network: the old path is read from go.mod, so a renamed copy can be renamed again.
rename: tools ## rewrite the module path to MODULE (make rename MODULE=example.com/orders): go.mod, imports, other files; refuses uncommitted changes unless FORCE=1
	@$(GO) run ./internal/rename/cmd/rename -module '$(MODULE)' $(if $(filter-out 0,$(FORCE)),-force)

local-deploy: ## UNTESTED here (needs Docker): build and deploy template.yaml into LocalStack with samlocal (localstack/deploy.sh)
	localstack/deploy.sh

clean: ## remove build output
	rm -rf .aws-sam

# EXAMPLE=inventory (or any name functions/consumer/wiring lists) runs the demo and the
# reliability suite on that example instead of the wired default.
EXAMPLE ?=

demo: tools ## the main job, locally: LocalStack if Docker answers, else moto on 127.0.0.1:4566; up, traffic, crash, consumers, reaper, the example's check (EXAMPLE=name for another example)
	@echo "demo: building idemctl into .aws-sam/idemctl (the first build compiles the AWS SDK: a minute or two on a cold Go cache)"
	@$(GO) build -o .aws-sam/idemctl ./cmd/idemctl
	$(LOCAL_AWS) -- .aws-sam/idemctl demo $(if $(EXAMPLE),--example $(EXAMPLE)) $(DEMO_FLAGS)

bench: tools ## benchmarks: idem overhead, round trips (DynamoDB and SQS), batch latency under +10 ms RTT, CPU per message, cold start, the local runtime loop, reaper vs a scan (100k records), cost per million messages, bootstrap sizes
	$(GO) test -run '^$$' -bench 'FirstDelivery|Duplicate|BatchFIFO' -benchmem -count 5 ./idem/
	$(LOCAL_AWS) --free-port -- $(GO) test -count=1 -v -run 'TestRoundTrips|TestSQSCallsPerBatch' ./idem/ ./internal/runner/
	$(LOCAL_AWS) --free-port -- env BATCH_LATENCY_TABLE=1 $(GO) test -count=1 -v -run TestBatchLatencyTable ./internal/bench/
	$(LOCAL_AWS) --free-port -- $(GO) test -run '^$$' -bench ConsumerCPU -benchtime 30x -count 3 ./functions/consumer/consumerapp/
	$(LOCAL_AWS) --free-port -- env IDEM_COLDSTART=1 $(GO) test -count=1 -v -run TestColdStart ./internal/coldstart/
	$(GO) test -run '^$$' -bench 'RuntimeLoop|ColdStart' -benchtime 300x -count 6 ./internal/lambdaenv/
	$(LOCAL_AWS) --free-port -- $(GO) test -run '^$$' -bench ReaperSweep -benchtime 1x -timeout 30m ./idem/
	$(MAKE) --no-print-directory cost
	$(MAKE) --no-print-directory build

cost: tools ## cost per million messages, this consumer against a Powertools-style baseline (BENCHMARKS.md)
	@$(LOCAL_AWS) --free-port -- env COST_TABLE=1 $(GO) test -count=1 -v -run TestCostPerMillion ./internal/cost/ | grep '^|'

scale: tools ## the scale model of SCALING.md: ceilings and what to raise at 100 to 100 000 msg/s
	@SCALE_TABLE=1 $(GO) test -count=1 -v -run TestScaleTable ./internal/scale/ | grep -v -e '^=== ' -e '^--- ' -e '^PASS' -e '^ok'

# make test runs the same scenarios at small sizes.
reliability: tools ## the reliability suite at full size (RELIABILITY.md): duplicate storm, crash injection, store faults, fencing (about 25 minutes), then idem's 12 800-acquire race (2 more); EXAMPLE=name for another example
	$(LOCAL_AWS) --free-port -- env RELIABILITY=full EXAMPLE=$(EXAMPLE) $(GO) test -count=1 -v -timeout 150m ./internal/reliability/
	$(LOCAL_AWS) --free-port -- env RELIABILITY=full $(GO) test -race -count=1 -v -run '^TestConcurrentAcquireRunsOnce$$' ./idem/

# The deterministic simulator (internal/sim, RELIABILITY.md): SIM_SCHEDULES schedules from
# seed SIM_FIRST, or until SIM_SECONDS have passed, with progress every 10 s and a summary.
SIM_SCHEDULES ?= 1000000
SIM_SECONDS ?= 0
SIM_FIRST ?= 1

sim: tools ## the simulator's long run: SIM_SCHEDULES schedules (default 1 000 000; make test runs 10 000) or SIM_SECONDS seconds, from seed SIM_FIRST; a broken promise prints its seed and replay command
	$(GO) test -count=1 -timeout 0 -v -run 'TestSim$$' ./internal/sim -schedules $(SIM_SCHEDULES) -seconds $(SIM_SECONDS)s -first $(SIM_FIRST)

sim-holes: tools ## put each hole of internal/sim/holes (holeN.patch, found under issues 22 to 39) back in a copy and count the seeds of the simulator's make-test budget that find it (FAST=1: stop at the first)
	internal/sim/holes/check.sh

# The mutation score (internal/mutation, RELIABILITY.md "Mutation score"): each mutant of
# MUTATION_PKGS (files matching MUTATION_FILES, operators MUTATION_OPS) runs the killers
# MUTATION_KILLERS in order until one fails: the simulator over MUTATION_SIM_SCHEDULES seeds,
# the package's own tests, the tests under functions/ that import it (the last two on one
# moto). Resumable: the report (MUTATION_OUT/mutation.md and .json) keeps every decided
# mutant of an unchanged file; MUTATION_FLAGS='-retry-survivors -only-survivors' runs the
# survivors again. Not part of make test.
MUTATION_PKGS ?= ./idem/ ./idem/canonjson/ ./idem/persistence/ ./idem/persistence/memstore/ ./idem/outbox/ ./idem/reaper/ ./idem/sqsbatch/ ./idem/sqsmsg/ ./functions/ingress/ingressapp/
MUTATION_FILES ?=
MUTATION_OPS ?= all
MUTATION_KILLERS ?= sim,own,functions
MUTATION_SIM_SCHEDULES ?= 2000
MUTATION_TIMEOUT_FACTOR ?= 3
MUTATION_WORKERS ?= 1
MUTATION_OUT ?= .aws-sam/mutation
MUTATION_FLAGS ?=

mutation: tools ## the mutation score of idem/ and the ingress (MUTATION_PKGS, MUTATION_FILES, MUTATION_OPS, MUTATION_KILLERS, MUTATION_SIM_SCHEDULES): hours; resumable; report in MUTATION_OUT
	$(GO) build -o .aws-sam/mutation-driver ./internal/mutation/cmd/mutation
	$(LOCAL_AWS) --free-port -- .aws-sam/mutation-driver -pkgs '$(MUTATION_PKGS)' -files '$(MUTATION_FILES)' \
	  -ops '$(MUTATION_OPS)' -killers '$(MUTATION_KILLERS)' -sim-schedules $(MUTATION_SIM_SCHEDULES) \
	  -timeout-factor $(MUTATION_TIMEOUT_FACTOR) -workers $(MUTATION_WORKERS) -out $(MUTATION_OUT) $(MUTATION_FLAGS)

# The fuzz targets call no AWS API: a loopback AWS_ENDPOINT_URL that nothing serves keeps
# awstest.Main from starting moto in the fuzzing process and in each of its workers.
# make test fuzzes FuzzFingerprint (two bodies that decode differently never share a
# fingerprint) for FUZZTIME_BRIEF on 2 workers, beyond its seeds, which every go test runs.
FUZZTIME ?= 30s
FUZZTIME_BRIEF ?= 10s

fuzz: tools ## run each fuzz target for FUZZTIME (default 30s), one after another; seeds also run in `make test`
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzRecordKey$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzMessageKey$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzBatchRecord$$' -fuzztime $(FUZZTIME) ./idem/
	@# each example's decoder: every package under functions/consumer with a FuzzDecode
	for d in $$(grep -l '^func FuzzDecode' functions/consumer/*/*_test.go | xargs -n1 dirname | sort -u); do \
	  AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./$$d/ || exit 1; done
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzFingerprint$$' -fuzztime $(FUZZTIME) ./idem/

# The ingress under a scripted load (BENCHMARKS.md, "The ingress"): INGRESS_LOAD_REQUESTS
# first POSTs, as many retries and status reads, by INGRESS_LOAD_CLIENTS clients, with
# the ingress in this process and then as 4 execution environments of its bootstrap.
INGRESS_LOAD_REQUESTS ?= 1000
INGRESS_LOAD_CLIENTS ?= 8
bench-ingress: tools ## the ingress under load over real HTTP on loopback against moto: POST and GET latency (median, p99), requests/s, AWS requests per request
	@for mode in in-process environments; do \
	  $(LOCAL_AWS) --free-port -- env INGRESS_LOAD=1 INGRESS_LOAD_MODE=$$mode INGRESS_LOAD_REQUESTS=$(INGRESS_LOAD_REQUESTS) \
	    INGRESS_LOAD_CLIENTS=$(INGRESS_LOAD_CLIENTS) $(GO) test -count=1 -v -timeout 30m -run TestIngressLoad ./internal/bench/ \
	    | grep -o '|.*' || exit 1; \
	done

E2E_MESSAGES ?= 5000
E2E_CONSUMERS ?= 1 2 4 8
bench-e2e: tools ## end-to-end throughput, CPU per record and peak RSS of idemctl run --in-process against moto, with E2E_CONSUMERS consumers (1 2 4 8)
	$(GO) build -o .aws-sam/idemctl ./cmd/idemctl
	$(LOCAL_AWS) --free-port -- bash -c 'set -e; for n in $(E2E_CONSUMERS); do \
	  eval "$$(.aws-sam/idemctl up --stack e2e$$n-$$RANDOM 2>/dev/null)"; \
	  .aws-sam/idemctl send --count $(E2E_MESSAGES) --accounts 50 --seed $$n 2>&1 | tail -1; \
	  echo "consumers=$$n"; .aws-sam/idemctl run --in-process --consumers $$n --until-idle 2s --wait 1s 2>&1 >/dev/null | tail -3; \
	done'
