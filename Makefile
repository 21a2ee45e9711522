# berth — make help lists the targets.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
export CGO_ENABLED := 0
# One compile of each package per run: the tests' own builds of the
# binaries (testenv.Build), the test binaries and make build share the
# build cache only with the same flags (-trimpath changes every action).
export GOFLAGS += -trimpath
GO ?= go
BIN := bin/berth
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: help deps build console console-check test test-k8s check-chart k8s-tools unit e2e e2e-race security-test fuzz lint vet bench soak test-interp-sdk demo clean

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

deps: ## install what is missing (runc, busybox-static, Go) — idempotent
	@./scripts/install-deps.sh

build: ## build the static binaries into bin/: berthd (the daemon and every verb), berth (the CLI) and berth-agent (in each sandbox)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)d ./cmd/berth
	$(GO) build -trimpath -tags berthcli -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/berth
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-agent ./cmd/berth-agent

vet: ## go vet
	$(GO) vet ./...

lint: vet console-check ## go vet, gofmt, staticcheck, api/openapi.json as the code generates it, and the console's assets as its sources build
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || (echo "gofmt: files above need formatting" && false)
	$(GO) run ./internal/server/openapigen -check
	time $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags berthcli -tests=false ./cmd/berth

# The web console's sources (internal/console/web: TypeScript, Preact,
# xterm.js, pinned in its package-lock.json) are built with esbuild into
# internal/console/assets, which is committed and embedded in the binary;
# a Go build needs no npm. console-check type-checks the sources, runs
# their unit tests (test/*.test.ts) and fails when the committed assets
# differ from a fresh build.
CONSOLE_WEB := internal/console/web
$(CONSOLE_WEB)/node_modules/.package-lock.json: $(CONSOLE_WEB)/package-lock.json
	cd $(CONSOLE_WEB) && npm ci --no-audit --no-fund

console: $(CONSOLE_WEB)/node_modules/.package-lock.json ## rebuild the web console's embedded assets from internal/console/web
	cd $(CONSOLE_WEB) && node_modules/.bin/tsc -p tsconfig.json && node build.mjs

console-check: $(CONSOLE_WEB)/node_modules/.package-lock.json ## type check, unit tests, and the committed console assets are what its sources build to
	cd $(CONSOLE_WEB) && node_modules/.bin/tsc -p tsconfig.json && node test.mjs >/dev/null && node build.mjs --check

# The race detector runs where goroutines meet; not on packages that link
# the Kubernetes client (race-compiling its ~410 packages for four test
# packages cost minutes; their concurrency is client-go's, and the daemon
# runs under -race in make e2e-race) nor on pure computation (seccomp's
# filter assembly: 26 s with -race, 4 s without).
NORACE_PKGS = /cmd/berth$$|/internal/daemon$$|/internal/node/kube$$|/internal/testenv/kubeenv|/internal/seccomp$$
# Single tests of pure computation in packages that otherwise run under
# -race; their files say //go:build !race.
UNIT_NORACE_TESTS = -run '^TestGrowthPerCycle$$' ./internal/store/sqlite/
UNIT_PKGS = $(GO) list ./... | grep -v /test/

unit: ## unit tests (no daemon): with the race detector except on NORACE_PKGS
	time CGO_ENABLED=1 $(GO) test -race -count=1 $$($(UNIT_PKGS) | grep -Ev '$(NORACE_PKGS)')
	time $(GO) test -count=1 $$($(UNIT_PKGS) | grep -E '$(NORACE_PKGS)')
	time $(GO) test -count=1 $(UNIT_NORACE_TESTS)

# test/k8s needs a Kubernetes cluster: make test-k8s runs it.
E2E_PKGS = $$($(GO) list ./test/... | grep -v /test/k8s)

# Four e2e tests at a time on any machine: each spends most of its time
# waiting on sandboxes, runtimes and its daemon (at two, the e2e step used
# under half of this 2-core machine's CPU).
E2E_PARALLEL ?= 4
e2e: ## end-to-end tests against a real daemon, runc, overlayfs, cgroups
	time $(GO) test -count=1 -parallel $(E2E_PARALLEL) -timeout 25m $(E2E_PKGS)

e2e-race: ## the e2e suite with the daemon under the race detector
	BERTH_E2E_RACE=1 $(GO) test -count=1 -timeout 30m -run '$(RUN)' $(E2E_PKGS)

# Each step of make test says its time (bash's time: real, and user+sys
# of everything it waited for, the daemons and sandboxes included), so a
# CI log shows where the minutes went.

# The suites prove they cleaned up after themselves: the leak check at the
# end compares with a record taken before the run (test/leakcheck says why).
LEAKS_BEFORE = bin/leaks-before

test: deps ## the whole suite: what .ci/run runs
	@mkdir -p bin && ./scripts/leakcheck.sh --record $(LEAKS_BEFORE)-test
	@$(MAKE) --no-print-directory lint unit e2e security-test
	@./scripts/leakcheck.sh --before $(LEAKS_BEFORE)-test

k8s-tools: ## build kube-apiserver, kubelet, etcd, kwok, kube-network-policies, gVisor's shim... from the Go module proxy, cached in /var/cache/berth/k8s
	@./scripts/k8s-tools.sh && ./scripts/k8s-netpol-tools.sh && ./scripts/k8s-runsc-tools.sh

test-k8s: deps check-chart ## the suite on a real Kubernetes cluster (test/k8s): builds its binaries first (cached)
	@mkdir -p bin && ./scripts/leakcheck.sh --record $(LEAKS_BEFORE)-k8s
	@bin=$$(./scripts/k8s-tools.sh) && netpol=$$(./scripts/k8s-netpol-tools.sh) && csibin=$$(./scripts/k8s-csi-tools.sh) && \
		runscbin=$$(./scripts/k8s-runsc-tools.sh) && \
		BERTH_K8S_BIN=$$bin BERTH_NETPOL_BIN=$$netpol BERTH_K8S_CSI_BIN=$$csibin BERTH_K8S_RUNSC_BIN=$$runscbin $(GO) test -count=1 -timeout 30m -v $(K8S_TESTFLAGS) ./test/k8s/... && \
		BERTH_K8S_BIN=$$bin $(GO) test -tags k8s -count=1 -timeout 10m -run TestScaleOnKwok -v ./internal/node/kube/
	@./scripts/leakcheck.sh --before $(LEAKS_BEFORE)-k8s

check-chart: ## deploy/kubernetes/berth.yaml is the Helm chart's default render (helm's Go packages, tools/helmrender)
	@./scripts/check-chart.sh

security-test: build ## the attack suite from inside sandboxes on every runtime class (berth selftest --private)
	time ./$(BIN) selftest --private

fuzz: ## run each fuzzer for a while (seed corpora already run in test)
	./scripts/fuzz.sh 60s

bench: build ## the performance report (berth bench) beside raw runc; Markdown and PNG charts in bench-report/
	./$(BIN) bench --report bench-report

test-interp-sdk: ## only the @e2b/code-interpreter SDK through the E2B door (also part of make test)
	$(GO) test -count=1 -timeout 10m -run TestE2BCodeInterpreter -v ./test/e2e/

soak: build ## long churn run with leak checks; the error-injection matrix's heavier half (TestSoakErrorInjectionMatrix); every hibernate/wake crash point; 320 sandboxes ended in every way, counting zombies
	BERTH_SOAK=1 $(GO) test -count=1 -timeout 90m -run 'TestSoak|TestCrashMidHibernateAndWake|TestNoZombiesAfterSandboxesEnd' -v ./test/e2e/

demo: ## the quick start: installs what is missing, builds, runs the demo
	./scripts/demo.sh

clean:
	rm -rf bin
