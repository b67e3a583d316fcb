#!/usr/bin/env bash
# Runs the fast tier (make unit, then make lint), the e2e tier (make e2e)
# and the integration tier (make integration) side by side, the last two
# each with its own registry and buildkitd, and exits 1 if any failed.
# Each tier's output is printed as it comes, every line prefixed with the
# tier's name; a failed tier's log is printed again at the end.
#
#   bash scripts/tiers.sh
#
# Why side by side: neither tier keeps two cores busy for long (a slim's
# probe, cuobjdump, ctr and a BuildKit build's apt steps run on one), and
# run one after the other they took ~45 of CI's minutes.
#
# Why apart: both tiers' tests drop what they pushed and BuildKit's cache
# when they end (KILN_PRUNE_AFTER_TESTS=1: registry.sh prune stops the
# registry to collect its garbage; buildctl prune --all), which must not
# reach the other tier's registry or builds. The e2e tier keeps the
# registry and buildkitd it was given (KILN_REGISTRY, BUILDKIT_HOST). The
# integration tier gets a second registry on KILN_TIERS_REGISTRY (default
# 127.0.0.1:5001) whose storage starts as a hard-linked copy of the first
# one's (the fixtures; no byte is copied, and neither registry ever writes
# a blob file in place) and a second buildkitd with its own state, both
# stopped and removed when this script ends, however it ends.
#
# Without a registry answering on KILN_REGISTRY, or without root (the
# second buildkitd runs as root), the tiers run one after the other on
# what there is, as `make e2e integration` would.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "tiers: $*" >&2; }
sequential() {
	log "$*: the tiers run one after the other"
	exec make --no-print-directory lint unit e2e integration
}

main_reg=${KILN_REGISTRY:-127.0.0.1:5000}
main_dir=${KILN_REGISTRY_DIR:-/var/lib/kiln-registry}
if [[ $(id -u) -ne 0 ]] || ! curl -fsS -m 2 -o /dev/null "http://$main_reg/v2/" 2>/dev/null || [[ ! -d $main_dir/docker ]]; then
	sequential "no registry on $main_reg with storage in $main_dir, or not root"
fi

int_reg=${KILN_TIERS_REGISTRY:-127.0.0.1:5001}
# Beside the first registry's storage: a hard link needs one file system.
work=$(mktemp -d "$(dirname "$main_dir")/kiln-tiers.XXXXXX")
# The copy is taken before either tier starts, while nothing writes.
if ! cp -al "$main_dir" "$work/registry" 2>"$work/cp.err"; then
	why=$(head -1 "$work/cp.err")
	rm -rf --one-file-system "$work"
	sequential "cannot hard-link $main_dir into $work ($why)"
fi
int_env=(
	KILN_REGISTRY="$int_reg"
	KILN_REGISTRY_ADDR="$int_reg"
	KILN_REGISTRY_DIR="$work/registry"
	KILN_REGISTRY_STATE="$work/registry-state"
	KILN_BUILDKIT_ROOT="$work/buildkit"
	KILN_BUILDKIT_RUN="$work/buildkit-run"
)
# The tiers running: process group (setsid) → name.
declare -A names
# int_down stops the integration tier's registry and buildkitd and removes
# their state (its logs stay): run as soon as that tier ends, so its
# BuildKit cache and pushes (9.3 GB of the last measured peak, which came
# while the e2e tier ran on alone) do not outlive it.
int_down() {
	env "${int_env[@]}" bash scripts/buildkitd.sh stop >/dev/null 2>&1 || true
	env "${int_env[@]}" bash scripts/registry.sh stop >/dev/null 2>&1 || true
	# BuildKit's snapshots are overlay mounts until its daemon is gone.
	grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf --one-file-system "$work/buildkit" "$work/buildkit-run" "$work/registry" "$work/registry-state"
}
cleanup() {
	local p
	for p in "${!names[@]}"; do kill -- "-$p" 2>/dev/null || true; done
	int_down
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

env "${int_env[@]}" bash scripts/registry.sh start
env "${int_env[@]}" bash scripts/buildkitd.sh start
int_host=unix://$work/buildkit-run/buildkitd.sock
log "e2e: registry $main_reg, buildkitd ${BUILDKIT_HOST:-(default)}"
log "integration: registry $int_reg, buildkitd $int_host"

# tier NAME ENV... runs make NAME with ENV in a session of its own (so
# that cleanup can stop all of it), its output prefixed with [NAME] and
# kept in $work/NAME.log; $TARGETS, when set, are the make targets
# instead of NAME.
tier() {
	local name=$1
	shift
	setsid bash -c 'set -o pipefail; name=$1 log=$2 targets=$3; shift 3
		env "$@" make --no-print-directory $targets 2>&1 | sed -u "s/^/[$name] /" | tee "$log"' \
		_ "$name" "$work/$name.log" "${TARGETS:-$name}" "$@" &
	names[$!]=$name
}
start=$SECONDS
# The fast tier needs no daemon: it only shares the cores, early, while
# the other two mostly wait on registries, BuildKit and containerd.
# The lint (gofmt, vet, staticcheck: a minute or two of both cores) once
# the fast tier's tests are done, while the e2e tier's builds go on: before
# the tiers, it held back the e2e tier, the run's long pole.
TARGETS="unit lint" tier unit
tier e2e
tier integration "${int_env[@]}" BUILDKIT_HOST="$int_host"
failed=()
while ((${#names[@]})); do
	if wait -n -p done "${!names[@]}"; then
		log "${names[$done]}: ok, $((SECONDS - start)) s after the start"
	else
		log "${names[$done]}: FAILED, $((SECONDS - start)) s after the start"
		failed+=("${names[$done]}")
	fi
	if [[ ${names[$done]} == integration ]]; then
		int_down
		log "integration: its registry and buildkitd stopped, their state removed"
	fi
	unset "names[$done]"
done
for n in "${failed[@]}"; do
	log "the $n tier failed; its output again, without the packages that passed:"
	grep -v -E '^\[[a-z0-9]+\] (ok|\?) ' "$work/$n.log" | tail -300 >&2 || true
done
# Last, where CI's tail keeps it: each failed test and the lines its
# failure printed (a daemon's log above can be longer than the tail).
for n in "${failed[@]}"; do
	log "the $n tier's failed tests:"
	grep -E -A4 -e '--- FAIL|^\[[a-z0-9]+\] +[a-zA-Z0-9_]+\.go:[0-9]+: |^\[[a-z0-9]+\] (FAIL|panic)' "$work/$n.log" |
		grep -v 'level=' | cut -c1-400 | tail -60 >&2 || true
done
((${#failed[@]} == 0))
