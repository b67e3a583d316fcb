#!/usr/bin/env bash
# A second local registry, distribution v3 (what the registry:3 image
# runs), for the signing tests: built from the Go module proxy at a pinned
# version and cached per version like scripts/buildkitd.sh caches
# buildkitd. Like Debian's docker-registry 2.8 on 127.0.0.1:5000 it has no
# OCI referrers API (v3.1.2 has no /v2/<name>/referrers route: checked in
# its source), so signatures are listed through the referrers tag schema
# there too; the referrers API itself is tested against
# go-containerregistry's registry (integration/sign_test.go).
#
#   bash scripts/registry3.sh build|start|stop|status
#
# Environment:
#   KILN_REGISTRY3_VERSION  default v3.1.2
#   KILN_REGISTRY3_CACHE    binaries (default /var/cache/kiln-registry3)
#   KILN_REGISTRY3_ADDR     listen address (default 127.0.0.1:5001)
#   KILN_REGISTRY3_DIR      blob storage (default /var/tmp/kiln-registry3;
#                           private to this registry, removed by stop)
#   KILN_REGISTRY3_STATE    config, pid file and log (default ${TMPDIR:-/tmp}/kiln-registry3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

VERSION=${KILN_REGISTRY3_VERSION:-v3.1.2}
CACHE=${KILN_REGISTRY3_CACHE:-/var/cache/kiln-registry3}
BIN=$CACHE/$VERSION/registry
ADDR=${KILN_REGISTRY3_ADDR:-127.0.0.1:5001}
DATA=${KILN_REGISTRY3_DIR:-/var/tmp/kiln-registry3}
STATE=${KILN_REGISTRY3_STATE:-${TMPDIR:-/tmp}/kiln-registry3}
PIDFILE=$STATE/registry.pid
LOG=$STATE/registry.log
URL=http://$ADDR/v2/

log() { echo "registry3: $*" >&2; }
answers() { curl -fsS -m 2 -o /dev/null "$URL" 2>/dev/null; }

our_pid() {
	local pid
	[[ -f $PIDFILE ]] || return 1
	pid=$(cat "$PIDFILE")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$BIN" || return 1
	echo "$pid"
}

registry_recipe() { go_install "github.com/distribution/distribution/v3/cmd/registry@$VERSION"; }

build() { build_tool "$(dirname "$BIN")" "distribution $VERSION" registry_recipe registry; }

start() {
	if our_pid >/dev/null && answers; then
		log "already running on $ADDR (pid $(our_pid))"
		return 0
	fi
	answers && { log "something else answers on $URL; refusing to share it"; exit 1; }
	build
	mkdir -p "$STATE" "$DATA"
	cat >"$STATE/config.yml" <<CFG
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $DATA
  delete:
    enabled: true
http:
  addr: $ADDR
health:
  storagedriver:
    enabled: false
CFG
	OTEL_TRACES_EXPORTER=none setsid nohup "$BIN" serve "$STATE/config.yml" >>"$LOG" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	local i
	for ((i = 0; i < 100; i++)); do
		if answers; then
			log "started on $ADDR (pid $(cat "$PIDFILE"), storage $DATA)"
			return 0
		fi
		kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
		sleep 0.1
	done
	log "failed to start; last log lines:"
	tail -n 20 "$LOG" >&2 || true
	exit 1
}

stop() {
	local pid i
	if pid=$(our_pid); then
		kill "$pid"
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		log "stopped (pid $pid)"
	else
		log "not running"
	fi
	rm -f "$PIDFILE"
	# Test images only: the storage goes with the registry.
	rm -rf --one-file-system "$DATA"
}

status() {
	if our_pid >/dev/null && answers; then
		echo "running on $ADDR (pid $(our_pid), storage $DATA)"
	else
		echo "not running"
		return 1
	fi
}

case ${1:-} in
build) build ;;
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 build|start|stop|status" >&2
	exit 2
	;;
esac
