# podbus: the two commands are `make run` and `make test`.
GO        ?= go
BIN       := .bin
PROTOC    ?= protoc
GOTESTFLAGS ?= -count=1 -timeout 20m
STATICCHECK_VERSION ?= v0.8.2

.PHONY: chaos run test unit fuzz lint vet fmt-check tidy-check staticcheck proto proto-check build bench loadtest clean images images-oci compose-test compose-bench webview-assets

## run: everything in one process on an embedded NATS server (API on 127.0.0.1:6443, 3 simulated nodes)
run:
	$(GO) run ./cmd/podbus up

## test: lint, then every test (end-to-end ones and the reduced scale envelope, loadtest/envelope_test.go, included), a short fuzzing run, then the docker-compose deployment test
test: lint unit fuzz compose-test

# The two-minute chaos run and the reduced envelope load the machine on their own: they run after the
# other packages, one at a time, so that neither starves the other or a test with deadlines.
HEAVY := TestChaosFixedSeed|TestChaosLeftoverCaught|TestEnvelopeReduced
unit:
	$(GO) test $(GOTESTFLAGS) -skip '^($(HEAVY))$$' ./...
	$(GO) test $(GOTESTFLAGS) -run '^TestEnvelopeReduced$$' ./loadtest
	$(GO) test $(GOTESTFLAGS) -run '^(TestChaosFixedSeed|TestChaosLeftoverCaught)$$' ./chaos

# Fuzz targets as package:target; `go test -fuzz` takes one target at a time.
FUZZ_TARGETS := \
	./services/admission:FuzzDecodePod \
	./services/admission:FuzzPatchPod \
	./services/admission:FuzzSelectors \
	./services/admission:FuzzResourceVersion \
	./services/admission:FuzzAccept \
	./services/admission:FuzzWireIndex \
	./internal/usage:FuzzDecode \
	./services/workloads:FuzzWireCached \
	./services/controllers:FuzzWireHead \
	./services/scheduler:FuzzMayWaitForNode \
	./services/nodelifecycle:FuzzWirePodHead
FUZZTIME ?= 3s

## fuzz: run each fuzz target for FUZZTIME (crashers land in the package's testdata/fuzz: commit them)
# Go 1.26's fuzz coordinator can end a loaded run with a bare "context deadline exceeded" at the
# -fuzztime boundary (go.dev/issue/75804): such a run, with no failing input written, runs once more.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); rc=$$?; echo "$$out"; \
		if [ $$rc -ne 0 ] && echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
			echo "fuzz $$pkg $$name: the coordinator's deadline race, not an input; again"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		elif [ $$rc -ne 0 ]; then exit 1; fi; \
	done

lint: fmt-check tidy-check vet proto-check staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## tidy-check: fail when go.mod or go.sum differ from what go mod tidy writes (the diff says how)
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit"; exit 1; }

vet:
	$(GO) vet ./...

staticcheck:
	@if [ ! -x $(BIN)/staticcheck ]; then GOBIN=$(CURDIR)/$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) || { \
		if [ "$$CI" = true ]; then echo "staticcheck could not be installed"; exit 1; fi; \
		echo "staticcheck not available: skipped"; exit 0; }; fi
	@if [ -x $(BIN)/staticcheck ]; then $(BIN)/staticcheck ./...; fi

$(BIN)/protoc-gen-go: go.mod
	@mkdir -p $(BIN)
	$(GO) build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go

## proto: regenerate proto/podbusv1 from proto/*.proto
proto: $(BIN)/protoc-gen-go
	$(PROTOC) --plugin=protoc-gen-go=$(BIN)/protoc-gen-go -I proto --go_out=proto/podbusv1 --go_opt=paths=source_relative proto/podbus.proto

## proto-check: fail when the committed generated code is stale
proto-check: $(BIN)/protoc-gen-go
	@if ! command -v $(PROTOC) >/dev/null; then \
		if [ "$$CI" = true ]; then echo "protoc missing (apt-get install protobuf-compiler)"; exit 1; fi; \
		echo "protoc not installed: proto-check skipped"; exit 0; fi; \
	tmp=$$(mktemp -d); \
	$(PROTOC) --plugin=protoc-gen-go=$(BIN)/protoc-gen-go -I proto --go_out=$$tmp --go_opt=paths=source_relative proto/podbus.proto && \
	if ! diff -q -I '^//.*protoc ' $$tmp/podbus.pb.go proto/podbusv1/podbus.pb.go >/dev/null; then \
		echo "proto/podbusv1 is stale: run 'make proto' and commit"; rm -rf $$tmp; exit 1; fi; \
	rm -rf $$tmp; echo "proto: generated code is up to date"

CHAOS_DURATION ?= 10m
CHAOS_SEED ?= 0

## chaos: every service as a process on a 3-node NATS cluster under seeded faults, then the history checker (CHAOS_DURATION, CHAOS_SEED)
chaos: build
	$(BIN)/podbus chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED)

# podbus version prints this (git describe), also where Go records no VCS information.
VERSION_LDFLAGS := -X main.buildVersion=$(shell git describe --tags --always --dirty 2>/dev/null)

build:
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/podbus ./cmd/podbus

## bench: the pipeline load test (100 simulated nodes, 5000 pods, as fast as possible; then 20,000 pods as fast
## as possible and at 1,000/s, each after 20,000 unmeasured ones, as a control plane that has been running sees them), scheduling-basic
## (5,000 nodes, 1,000 placed, 10,000 measured created→bound, 1 and 3 replicas, raw ceiling), the real-node
## one (20 containerd pods against the bare runtime; skipped with a line without root and containerd), Kubernetes'
## scale envelope (5,000 nodes, 150,000 pods, control plane and agents in two processes), the workload
## controllers (100 Deployments × 100 replicas on 500 nodes: created→ready, then a rolling update of all), Go benchmarks
## and the compose deployment's rate (compose-bench)
bench: build
	$(BIN)/podbus loadtest --nodes 100 --pods 5000
	$(BIN)/podbus loadtest --nodes 100 --pods 20000 --warmup-pods 20000 --quiet
	$(BIN)/podbus loadtest --nodes 100 --pods 20000 --rate 1000 --warmup-pods 20000 --quiet
	$(BIN)/podbus loadtest --scenario envelope --quiet   # 5,000 nodes, 150,000 pods, slices of 10,000
	$(BIN)/podbus loadtest --scenario scheduling-basic --replicas 1,3 --quiet   # scheduler_perf SchedulingBasic shape
	$(BIN)/podbus loadtest --runtime containerd
	$(BIN)/podbus loadtest --scenario deployments --deployments 100 --replicas 100 --nodes 500 --timeout 30m --quiet   # created→ready and a full rolling update
	$(GO) test -run '^$$' -bench . -benchtime 3000x ./bus/ ./sched/... ./services/...
	$(GO) test -run '^$$' -bench Audit -benchtime 3x ./audit/   # PODBUS_AUDIT_RECORDS=1000000 for a bigger history
	$(MAKE) compose-bench   # the compose deployment (R3): 2,000 pods through the API; skipped without docker

loadtest: build
	$(BIN)/podbus loadtest $(ARGS)

IMAGE ?= podbus:local
DOCKER ?= docker

## images: a static podbus binary (nats-server compiled in) in one image FROM scratch, tagged $(IMAGE)
images:
	@mkdir -p $(BIN)/image/empty
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(VERSION_LDFLAGS)" -o $(BIN)/image/podbus ./cmd/podbus
	cp deploy/Dockerfile $(BIN)/image/Dockerfile
	$(DOCKER) build -q -t $(IMAGE) $(BIN)/image

## images-oci: podbus's built-in OCI images (podbus/demo-web, podbus/busybox from busybox-static) as an
## OCI layout in .podbus/images, made from static binaries (no docker, nothing pulled)
images-oci:
	@mkdir -p .podbus/bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o .podbus/bin/demo-web ./examples/demo-web
	$(GO) run ./cmd/podbus images build --out .podbus/images --demo-web .podbus/bin/demo-web

## compose-test: images, deploy/docker-compose.yml up (3 NATS nodes, R3), 900 pods through kubectl,
## a NATS node and a scheduler stopped mid-batch, down -v. Skips without docker unless CI=true.
compose-test:
	$(GO) vet -tags compose ./e2e/
	$(GO) test -count=1 -timeout 12m -tags compose -run '^TestCompose$$' -v ./e2e/

## compose-bench: images, deploy/docker-compose.yml up (3 NATS nodes, R3, 10 simulated agents), the idle
## cluster's CPU, then 2,000 pods through the API from a loadtest container on the project's network; down -v.
## Then the same with 100 simulated nodes in each agent container: 1,000 nodes Ready, the consumers, 2,000 pods
compose-bench:
	PODBUS_COMPOSE_BENCH=1 $(GO) test -count=1 -timeout 30m -tags compose -run 'TestComposeThroughputBench|TestComposeNodesBench' -v ./e2e/

## webview-assets: refresh the web view's vendored htmx from npm at the versions pinned in
## internal/webview/assets/vendor/package.json (the files are committed; a build needs no npm)
WEBVIEW_VENDOR := internal/webview/assets/vendor
webview-assets:
	rm -rf $(BIN)/webview-npm && mkdir -p $(BIN)/webview-npm
	cp $(WEBVIEW_VENDOR)/package.json $(BIN)/webview-npm/
	cd $(BIN)/webview-npm && npm install --no-audit --no-fund --ignore-scripts
	cp $(BIN)/webview-npm/node_modules/htmx.org/dist/htmx.min.js $(WEBVIEW_VENDOR)/htmx.min.js
	cp $(BIN)/webview-npm/node_modules/htmx.org/LICENSE $(WEBVIEW_VENDOR)/htmx.LICENSE
	cp $(BIN)/webview-npm/node_modules/htmx-ext-sse/dist/sse.min.js $(WEBVIEW_VENDOR)/htmx-ext-sse.min.js
	cp $(BIN)/webview-npm/node_modules/htmx-ext-sse/LICENSE $(WEBVIEW_VENDOR)/htmx-ext-sse.LICENSE

## clean: podbus down (the real node's pods, their networks and namespaces, then .podbus), and the binaries
clean:
	$(GO) run ./cmd/podbus down --data .podbus
	rm -rf $(BIN)
