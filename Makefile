# kiln — see README.md. `make demo` on a fresh machine sets everything up
# and runs kiln's main job; `make test` runs the whole test suite.
SHELL := /bin/bash
export PATH := $(shell go env GOPATH)/bin:/usr/local/go/bin:$(PATH)
export KILN_FIXTURE_CACHE ?= /var/cache/kiln-fixtures
export KILN_FIXTURES ?= $(KILN_FIXTURE_CACHE)/out
export KILN_REGISTRY ?= 127.0.0.1:5000

GO ?= go
PKGS := ./...

.PHONY: all build dist image test test-fast fuzz lint unit e2e e2e-slow catalog integration tiers deps registry fixtures demo bench bench-analyze bench-build bench-slim bench-weights bench-warm clean

all: build

# Static (CGO_ENABLED=0): kiln build runs this binary inside the images it
# builds, to prune GPU code, whatever C library they have. Reproducible: no
# paths (-trimpath), no build ID, the commit's time as the only date; the
# same commit gives the same bytes on any machine. kiln version reads the
# rest from the build info; the -X values only fill in what a git worktree
# or a tarball build cannot stamp.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
# Not exported: the fixtures read SOURCE_DATE_EPOCH as their own epoch
# (1747699200 unless set), which keys their blob cache; a commit's time
# leaking into make test's environment made fixtures.sh archive miss it.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false \
	-ldflags "-buildid= -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)"
PLATFORMS := linux/amd64 linux/arm64
# IMAGE is where make image writes kiln's own image: an oci: layout by
# default, or a registry (make image IMAGE=ghcr.io/kiln-build/kiln:v1.2.0).
IMAGE ?= oci:dist/image:$(VERSION)

build:
	$(GOBUILD) -o bin/kiln ./cmd/kiln

# dist: release binaries, static, for each platform, and SHA256SUMS.
dist:
	@mkdir -p dist
	@set -e; for p in $(PLATFORMS); do \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GOBUILD) -o dist/kiln-$${p%/*}-$${p#*/} ./cmd/kiln; \
		touch -d @$(SOURCE_DATE_EPOCH) dist/kiln-$${p%/*}-$${p#*/}; \
	done
	cd dist && sha256sum kiln-* > SHA256SUMS && cat SHA256SUMS

# image: kiln's own image (the dist binaries and a CA bundle, built by
# kiln's own code, not docker) at $(IMAGE); prints its digest, which is
# what kiln weights run-args --init-image REPO@DIGEST pins.
image: dist
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run -trimpath ./cmd/kiln-image --to $(IMAGE) --version $(VERSION) --revision $(COMMIT) \
		$(foreach p,$(PLATFORMS),$(p)=dist/kiln-$(subst /,-,$(p)))

# test: three tiers side by side (scripts/tiers.sh): the fast tier (every
# package with the race detector, -short: pure code and in-process
# registries, minutes) and then formatting, vet and staticcheck (make lint,
# in the fast tier's time, not before the other two: it held the e2e
# tier's long pole back by 40 s to 2 min), the e2e tier (the packages whose
# tests start containerd, dockerd, sshd or use BuildKit, without the race
# detector) and the integration tests on the gigabyte fixtures. .ci/run
# sets the KILN_REQUIRE_* variables, so a missing daemon fails instead of
# skipping. `make lint` alone checks the code in a minute.
test: tiers

# The e2e tier, by one naming rule: a test that starts a daemon (containerd,
# dockerd, sshd) or uses BuildKit lives in a file named *e2e_test.go, and
# its package runs in the e2e tier (internal/testkit's
# TestDaemonTestsNamedE2E holds the rule).
E2E_PKGS = $(sort $(patsubst %/,./%,$(dir $(shell git ls-files '*e2e_test.go' | grep -v '^integration/'))))

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	staticcheck $(PKGS)

# The fast tier: race detector on, daemons skipped (-short).
unit test-fast:
	$(GO) test -race -short -count=1 -timeout 20m $(PKGS)

# fuzz: each fuzz target for FUZZTIME (issue 34's suite: the tar reader
# and entry rule, the EROFS conversion against Go's tar reader, manifests
# and indexes). Not part of make test or CI: there the seed corpora
# (testdata/fuzz, issue 34's hostile layers among them) run as ordinary
# tests in the fast tier. A failing input is written under the package's
# testdata/fuzz; commit it as a seed with the fix.
FUZZTIME ?= 15s
FUZZ_TARGETS := ./layers:FuzzWalkTar ./layers:FuzzCheckEntry ./layers:FuzzWalkManifests \
	./layers/erofs:FuzzErofsMatchesTar ./recipes:FuzzParseRecipe
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} ($${t%%:*}, $(FUZZTIME))"; \
		$(GO) test -short -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

# The e2e tier: real containerd, dockerd, sshd and BuildKit, no race
# detector (the fast tier ran these packages' other tests with it).
# -v for each test's time (the tier's long pole is one package, builder).
e2e:
	$(GO) test -count=1 -timeout 60m -v $(E2E_PKGS) | grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

# Every catalog recipe built from an empty BuildKit through the stand-ins
# alone (NVIDIA's images under their real names, one wheel index with every
# recipe's pins, the Python download through a Python mirror), each passing
# its own test lines (and the index checked with real pip at every Python);
# CI builds the default recipe through the CLI (TestQuickstartGoInstalled)
# and the offline stack (TestEndToEnd). Each is built again on its
# devel base alone (what a single-stage Dockerfile ships, at best) for the
# size and time beside kiln's; KILN_CATALOG_NAIVE=0 skips that.
# KILN_CATALOG=NAME,NAME builds the ones named. The fixtures first gain
# Debian 12's chain (fixtures.sh bookworm: the debian12 stand-in's).
catalog:
	bash scripts/fixtures.sh bookworm
	KILN_CATALOG=$${KILN_CATALOG:-all} KILN_CATALOG_NAIVE=$${KILN_CATALOG_NAIVE:-1} $(GO) test -count=1 -timeout 90m -v -run 'TestCatalog' ./builder/ ./builder/internal/wheelserve/

# The e2e tests too long for CI's budget (the wheel cache's cold-runner
# day: three CUDA-stack builds, two from an empty BuildKit; a source-only
# requirement compiled with a compiler installed from Debian).
e2e-slow:
	KILN_SLOW_E2E=1 $(GO) test -count=1 -timeout 90m -run 'TestWheelCacheOnBuildKit|TestSourceRequirementOnBuildKit' ./builder/

# The e2e and integration tiers side by side, each on its own registry
# and buildkitd (scripts/tiers.sh); one after the other without root or a
# local registry.
tiers:
	bash scripts/tiers.sh

# End-to-end tests on the gigabyte fixtures: no race detector (it would
# multiply minutes), skipped without fixtures unless KILN_REQUIRE_FIXTURES=1.
integration:
	$(GO) vet -tags integration ./integration/...
	$(GO) test -tags integration -count=1 -timeout 55m -v ./integration/... | grep --line-buffered -v -E '^=== (RUN|PAUSE|CONT)'; exit $${PIPESTATUS[0]}

deps:
	bash scripts/install-deps.sh

registry:
	bash scripts/registry.sh start

fixtures: deps registry
	bash scripts/fixtures.sh

# demo: set up only what the demo shows on a fresh machine, then analyze
# the naive CUDA image, build the offline stack, slim, weights, host check,
# warm and verify (scripts/demo.sh). The benchmarks are make bench.
demo:
	bash scripts/demo.sh

# Benchmarks: kiln side by side with the peer tool on the same input,
# reported as ratios (README "Benchmarks"). Each needs the fixtures.
bench: bench-analyze bench-build bench-slim bench-weights bench-warm

bench-analyze: build
	bash bench/analyze.sh
bench-build: build
	bash bench/build.sh
bench-slim: build
	bash bench/slim.sh
bench-weights: build
	bash bench/weights.sh
bench-warm: build
	bash bench/warm.sh

clean:
	rm -rf bin dist
