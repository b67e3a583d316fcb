#!/usr/bin/env bash
# Local OCI registry (Debian's docker-registry, distribution v2) for kiln's
# fixtures and tests.
#
#   bash scripts/registry.sh start|stop|status
#
# Environment:
#   KILN_REGISTRY_ADDR   listen address (default 127.0.0.1:5000)
#   KILN_REGISTRY_DIR    blob storage (default /var/lib/kiln-registry)
#   KILN_REGISTRY_STATE  config, pid file and log (default ${TMPDIR:-/tmp}/kiln-registry)
set -euo pipefail

ADDR=${KILN_REGISTRY_ADDR:-127.0.0.1:5000}
DATA=${KILN_REGISTRY_DIR:-/var/lib/kiln-registry}
STATE=${KILN_REGISTRY_STATE:-${TMPDIR:-/tmp}/kiln-registry}
PIDFILE=$STATE/registry.pid
LOG=$STATE/registry.log
URL=http://$ADDR/v2/

log() { echo "registry: $*" >&2; }

answers() { curl -fsS -m 2 -o /dev/null "$URL" 2>/dev/null; }

our_pid() {
	local pid
	[[ -f $PIDFILE ]] || return 1
	pid=$(cat "$PIDFILE")
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
	# guard against pid reuse
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q docker-registry || return 1
	echo "$pid"
}

ensure_installed() {
	command -v docker-registry >/dev/null && command -v curl >/dev/null && return
	[[ $(id -u) -eq 0 ]] || { log "docker-registry/curl missing; run as root or: apt-get install docker-registry curl"; exit 1; }
	log "installing docker-registry"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry curl
}

start() {
	if our_pid >/dev/null; then
		answers && { log "already running on $ADDR (pid $(our_pid))"; return 0; }
	elif answers; then
		log "something already answers on $URL (not started by this script); using it"
		return 0
	fi
	ensure_installed
	mkdir -p "$STATE" "$DATA"
	cat >"$STATE/config.yml" <<EOF
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
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $ADDR
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: false
EOF
	setsid nohup docker-registry serve "$STATE/config.yml" >>"$LOG" 2>&1 </dev/null &
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
	if ! pid=$(our_pid); then
		log "not running"
		rm -f "$PIDFILE"
		return 0
	fi
	kill "$pid"
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
	rm -f "$PIDFILE"
	log "stopped (pid $pid)"
}

status() {
	local pid
	if pid=$(our_pid) && answers; then
		echo "running on $ADDR (pid $pid, storage $DATA)"
	elif answers; then
		echo "answering on $ADDR (not started by this script)"
	else
		echo "not running"
		return 1
	fi
}

# prune: drop every repository but the fixtures' (nvidia/cuda, kiln/naive-app:
# what scripts/fixtures.sh pushes) and garbage-collect their blobs. Tests and
# benchmarks push gigabytes of images under their own names (kiln-e2e,
# kiln-slim-it, kiln-bench, ...); on a shared disk they must not pile up run
# after run. The registry is stopped for the collection and started again
# if it was running. The fixtures' blobs, hard links into the blob cache,
# are kept.
prune() {
	local repos=$DATA/docker/registry/v2/repositories was=0 d
	[[ -d $repos ]] || return 0
	our_pid >/dev/null && was=1
	((was)) && stop
	for d in "$repos"/*; do
		case $(basename "$d") in
		nvidia) ;;
		kiln)
			for r in "$d"/*; do [[ $(basename "$r") == naive-app ]] || rm -rf "$r"; done
			;;
		*) rm -rf "$d" ;;
		esac
	done
	[[ -f $STATE/config.yml ]] || { ((was)) && start; return 0; }
	docker-registry garbage-collect --delete-untagged=false "$STATE/config.yml" >"$STATE/gc.log" 2>&1 ||
		{ log "garbage-collect failed; see $STATE/gc.log"; tail -5 "$STATE/gc.log" >&2; }
	log "pruned to the fixtures' repositories: $(du -sh "$DATA" | cut -f1) in $DATA"
	((was)) && start
	return 0
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
prune) prune ;;
*)
	echo "usage: $0 start|stop|status|prune" >&2
	exit 2
	;;
esac
