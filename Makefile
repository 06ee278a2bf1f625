# Idempotent SQS -> Lambda consumer. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
FUNCTIONS := consumer reaper
BUILD_DIR := .aws-sam/make
LOCAL_AWS := localstack/with-local-aws.sh
# Go's build flags for a Lambda bootstrap: static, no RPC shim, reproducible, stripped.
# LAMBDA_ARCH is the template's (arm64); localstack/deploy.sh sets the host's.
LAMBDA_ARCH ?= arm64
LAMBDA_BUILD := CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_ARCH) $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w'

.PHONY: help test check unit lint cfn-lint build deploy demo clean bench bench-e2e fuzz reliability local-deploy

help: ## list the targets
	@grep -hE '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 24

test: check lint cfn-lint ## all tests: gofmt/vet/tidy, golangci-lint, cfn-lint, unit and integration tests against moto_server
	@# One package at a time: the packages share one moto, whose DynamoDB requests are
	@# applied one at a time, and idem's 12 800-acquire race would starve the others.
	$(LOCAL_AWS) --free-port -- $(GO) test -race -count=1 -p 1 -timeout 30m ./...

unit: ## the tests, without -race (faster), against moto_server on a free port
	$(LOCAL_AWS) --free-port -- $(GO) test -count=1 ./...

check: ## gofmt, go vet, go mod tidy leave nothing to change
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@cp go.mod go.mod.bak; cp go.sum go.sum.bak; $(GO) mod tidy; \
	  if ! cmp -s go.mod go.mod.bak || ! cmp -s go.sum go.sum.bak; then \
	    mv go.mod.bak go.mod; mv go.sum.bak go.sum; echo "go mod tidy changes go.mod/go.sum"; exit 1; fi; \
	  rm -f go.mod.bak go.sum.bak

lint: ## golangci-lint (pinned version, built from the Go module proxy)
	$(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION) run ./...

cfn-lint: ## validate template.yaml; any finding fails
	cfn-lint template.yaml

build: ## build both Lambda bootstraps for linux/arm64 and print their sizes
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

deploy: ## sam build && sam deploy (needs the SAM CLI and AWS credentials; see README)
	sam build && sam deploy

local-deploy: ## UNTESTED here (needs Docker): build and deploy template.yaml into LocalStack with samlocal (localstack/deploy.sh)
	localstack/deploy.sh

clean: ## remove build output
	rm -rf .aws-sam

demo: ## the main job, locally: LocalStack if Docker answers, else moto on 127.0.0.1:4566; up, traffic, crash, consumers, reaper, ledger check
	$(LOCAL_AWS) -- $(GO) run ./cmd/idemctl demo $(DEMO_FLAGS)

bench: ## benchmarks: idem overhead, round trips (DynamoDB and SQS), batch latency under +10 ms RTT, CPU per message, cold start, the local runtime loop, reaper vs a scan (100k records), bootstrap sizes
	$(GO) test -run '^$$' -bench 'FirstDelivery|Duplicate|BatchFIFO' -benchmem -count 5 ./idem/
	$(LOCAL_AWS) --free-port -- $(GO) test -count=1 -v -run 'TestRoundTrips|TestSQSCallsPerBatch' ./idem/ ./internal/runner/
	$(LOCAL_AWS) --free-port -- env BATCH_LATENCY_TABLE=1 $(GO) test -count=1 -v -run TestBatchLatencyTable ./functions/consumer/consumerapp/
	$(LOCAL_AWS) --free-port -- $(GO) test -run '^$$' -bench ConsumerCPU -benchtime 30x -count 3 ./functions/consumer/consumerapp/
	$(LOCAL_AWS) --free-port -- env IDEM_COLDSTART=1 $(GO) test -count=1 -v -run TestColdStart ./internal/coldstart/
	$(GO) test -run '^$$' -bench 'RuntimeLoop|ColdStart' -benchtime 300x -count 6 ./internal/lambdaenv/
	$(LOCAL_AWS) --free-port -- $(GO) test -run '^$$' -bench ReaperSweep -benchtime 1x -timeout 30m ./idem/
	$(MAKE) --no-print-directory build

# make test runs the same scenarios at small sizes.
reliability: ## the reliability suite at full size (RELIABILITY.md): duplicate storm, crash injection, store faults, fencing (about 25 minutes)
	$(LOCAL_AWS) --free-port -- env RELIABILITY=full $(GO) test -count=1 -v -timeout 150m ./internal/reliability/

# The fuzz targets call no AWS API: a loopback AWS_ENDPOINT_URL that nothing serves keeps
# awstest.Main from starting moto in the fuzzing process and in each of its workers.
FUZZTIME ?= 30s

fuzz: ## run each fuzz target for FUZZTIME (default 30s), one after another; seeds also run in `make test`
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzRecordKey$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzMessageKey$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzBatchRecord$$' -fuzztime $(FUZZTIME) ./idem/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./functions/consumer/ledger/
	AWS_ENDPOINT_URL=http://127.0.0.1:1 $(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) ./idem/

E2E_MESSAGES ?= 5000
E2E_CONSUMERS ?= 1 2 4 8
bench-e2e: ## end-to-end throughput, CPU per record and peak RSS of idemctl run --in-process against moto, with E2E_CONSUMERS consumers (1 2 4 8)
	$(GO) build -o .aws-sam/idemctl ./cmd/idemctl
	$(LOCAL_AWS) --free-port -- bash -c 'set -e; for n in $(E2E_CONSUMERS); do \
	  eval "$$(.aws-sam/idemctl up --stack e2e$$n-$$RANDOM 2>/dev/null)"; \
	  .aws-sam/idemctl send --count $(E2E_MESSAGES) --accounts 50 --seed $$n 2>&1 | tail -1; \
	  echo "consumers=$$n"; .aws-sam/idemctl run --in-process --consumers $$n --until-idle 2s --wait 1s 2>&1 >/dev/null | tail -3; \
	done'
