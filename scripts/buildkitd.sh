#!/usr/bin/env bash
# BuildKit daemon for kiln's builder tests, benchmarks and `make demo`.
#
#   bash scripts/buildkitd.sh build|start|stop|status|env
#
# build   compiles buildkitd and buildctl from the Go module cache at the
#         github.com/moby/buildkit version go.mod pins (no other download),
#         into $KILN_BUILDKIT_CACHE/<version>/ (reused when present).
# start   builds if needed, installs runc from Debian if missing, and starts
#         buildkitd as root with the OCI (runc) worker, host networking
#         allowed as an entitlement, and plain HTTP for the local registry;
#         waits until `buildctl debug workers` answers.
# stop    stops the daemon this script started.
# status  exits 0 when the daemon answers.
# env     prints `export BUILDKIT_HOST=...` / PATH lines for eval.
#
# Environment:
#   KILN_BUILDKIT_CACHE    binaries (default /var/cache/kiln-buildkit)
#   KILN_BUILDKIT_ROOT     daemon state (default /var/lib/kiln-buildkit)
#   KILN_BUILDKIT_RUN      socket, pid file, config and log (default /run/kiln-buildkit)
#   KILN_REGISTRY          plain-HTTP registry (default 127.0.0.1:5000)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

CACHE=${KILN_BUILDKIT_CACHE:-/var/cache/kiln-buildkit}
ROOT=${KILN_BUILDKIT_ROOT:-/var/lib/kiln-buildkit}
RUN=${KILN_BUILDKIT_RUN:-/run/kiln-buildkit}
REGISTRY=${KILN_REGISTRY:-127.0.0.1:5000}
SOCK=$RUN/buildkitd.sock
ADDR=unix://$SOCK
PIDFILE=$RUN/buildkitd.pid
LOG=$RUN/buildkitd.log
CONFIG=$RUN/buildkitd.toml

log() { echo "buildkitd: $*" >&2; }

version() { go_pin github.com/moby/buildkit; }

bindir() { echo "$CACHE/$(version)"; }

buildkit_recipe() {
	copy_module github.com/moby/buildkit "$(version)"
	go build -trimpath -o "$TOOL_OUT/buildkitd" ./cmd/buildkitd
	go build -trimpath -o "$TOOL_OUT/buildctl" ./cmd/buildctl
}

build() { build_tool "$(bindir)" "buildkitd and buildctl $(version)" buildkit_recipe buildkitd buildctl; }

answers() {
	local ctl
	ctl=$(bindir)/buildctl
	[[ -x $ctl ]] || return 1
	timeout 5 "$ctl" --addr "$ADDR" debug workers >/dev/null 2>&1
}

our_pid() {
	local pid
	[[ -f $PIDFILE ]] || return 1
	pid=$(cat "$PIDFILE")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q buildkitd || return 1
	echo "$pid"
}

ensure_runc() {
	command -v runc >/dev/null && return
	[[ $(id -u) -eq 0 ]] || { log "runc missing; run as root or: apt-get install runc"; exit 1; }
	log "installing runc from Debian"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc
}

# config: buildkitd.toml. KILN_BUILDKIT_MAX_CACHE (e.g. 16GB) bounds the
# build cache: BuildKit's garbage collector trims it, oldest first, to that
# size after builds (CI sets it: the disk is its binding limit; BuildKit's
# own default lets the cache grow to 80% of the disk).
config() {
	echo "# written by scripts/buildkitd.sh"
	echo "[worker.oci]"
	echo "  enabled = true"
	echo "  gc = true"
	if [[ -n ${KILN_BUILDKIT_MAX_CACHE:-} ]]; then
		echo "  maxUsedSpace = \"$KILN_BUILDKIT_MAX_CACHE\""
		echo "  reservedSpace = \"1GB\""
	fi
	echo "[worker.containerd]"
	echo "  enabled = false"
	echo
	echo "[registry.\"$REGISTRY\"]"
	echo "  http = true"
}

start() {
	if answers; then
		if [[ -f $CONFIG ]] && ! cmp -s "$CONFIG" <(config) && our_pid >/dev/null; then
			log "its configuration changed: restarting it"
			stop
		else
			log "already answering on $ADDR${PIDFILE:+ (pid $(our_pid || echo '?'))}"
			return 0
		fi
	fi
	[[ $(id -u) -eq 0 ]] || { log "buildkitd runs as root here (OCI worker with runc); rerun with sudo"; exit 1; }
	build
	ensure_runc
	mkdir -p "$RUN" "$ROOT"
	config >"$CONFIG"
	rm -f "$SOCK"
	local bin
	bin=$(bindir)
	log "starting $bin/buildkitd on $ADDR (state $ROOT, log $LOG)"
	setsid "$bin/buildkitd" \
		--oci-worker=true --containerd-worker=false \
		--root "$ROOT" --addr "$ADDR" --config "$CONFIG" \
		--allow-insecure-entitlement network.host \
		--allow-insecure-entitlement security.insecure \
		>"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	for _ in $(seq 1 120); do
		if answers; then
			log "ready (pid $(cat "$PIDFILE"))"
			return 0
		fi
		if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
			log "buildkitd exited; last lines of $LOG:"
			tail -20 "$LOG" >&2
			exit 1
		fi
		sleep 0.5
	done
	log "buildkitd did not answer within 60s; see $LOG"
	exit 1
}

stop() {
	local pid
	if pid=$(our_pid); then
		kill "$pid"
		for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		log "stopped (pid $pid)"
	else
		log "not running (no pid file from this script)"
	fi
	rm -f "$PIDFILE"
}

status() {
	if answers; then
		echo "buildkitd answering on $ADDR"
		"$(bindir)/buildctl" --addr "$ADDR" debug workers
	else
		echo "buildkitd not answering on $ADDR"
		return 1
	fi
}

case "${1:-}" in
build) build ;;
start) start ;;
stop) stop ;;
status) status ;;
restart) stop; start ;;
env)
	echo "export BUILDKIT_HOST=$ADDR"
	echo "export PATH=$(bindir):\$PATH"
	;;
*)
	echo "usage: $0 build|start|stop|status|restart|env" >&2
	exit 2
	;;
esac
