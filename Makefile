# kiln — see README.md. `make demo` on a fresh machine sets everything up
# and runs kiln's main job; `make test` runs the whole test suite.
SHELL := /bin/bash
export PATH := $(shell go env GOPATH)/bin:/usr/local/go/bin:$(PATH)
export KILN_FIXTURE_CACHE ?= /var/cache/kiln-fixtures
export KILN_FIXTURES ?= $(KILN_FIXTURE_CACHE)/out
export KILN_REGISTRY ?= 127.0.0.1:5000

GO ?= go
PKGS := ./...

.PHONY: all build test test-fast lint unit e2e integration deps registry fixtures demo bench bench-analyze bench-build bench-slim bench-weights bench-warm clean

all: build

# Static (CGO_ENABLED=0): kiln build runs this binary inside the images it
# builds, to prune GPU code, whatever C library they have.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$$(git describe --always --dirty 2>/dev/null || echo dev)" -o bin/kiln ./cmd/kiln

# test: formatting, vet, staticcheck, then three tiers: the fast tier (every
# package with the race detector, -short: pure code and in-process
# registries, minutes), the e2e tier (the packages whose tests start
# containerd, dockerd, sshd or use BuildKit, without the race detector) and
# the integration tests on the gigabyte fixtures. .ci/run sets the
# KILN_REQUIRE_* variables, so a missing daemon fails instead of skipping.
test: lint unit e2e integration

# The packages with daemon or BuildKit tests (testdaemon, e2eEnv, sshd).
E2E_PKGS = $(shell grep -rl --include='*_test.go' -e 'testdaemon\.' -e 'e2eEnv' -e 'requireSSH' . | grep -v '^./integration/' | xargs -n1 dirname | sort -u) ./internal/testdaemon

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	staticcheck $(PKGS)

# The fast tier: race detector on, daemons skipped (-short).
unit test-fast:
	$(GO) test -race -short -count=1 -timeout 20m $(PKGS)

# The e2e tier: real containerd, dockerd, sshd and BuildKit, no race
# detector (the fast tier ran these packages' other tests with it).
e2e:
	$(GO) test -count=1 -timeout 60m $(E2E_PKGS)

deps:
	bash scripts/install-deps.sh

registry:
	bash scripts/registry.sh start

fixtures: deps registry
	bash scripts/fixtures.sh

# demo: set everything up on a fresh machine, then analyze the naive CUDA
# image and build the embedded default recipe beside the naive Dockerfile.
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
	rm -rf bin
