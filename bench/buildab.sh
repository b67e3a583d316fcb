#!/usr/bin/env bash
# bench/buildab.sh [BEFORE_REV [AFTER_REV]]: kiln build of the default
# recipe (debian13-cu124: the fixtures' real CUDA torch and nvidia-*-cu12
# wheels from a stand-in index, FlashAttention compiled by nvcc 12.4) with
# kiln built at BEFORE_REV (default: the merge base with main) and at
# AFTER_REV (default: HEAD), each from a clean checkout of the commit, one
# after the other on one machine: the first build from an empty BuildKit
# (buildctl prune --all before it), the machine's CPU seconds during it,
# then two no-op `kiln build --rebuild`s (everything cached: what is left is
# the export). Each build pushes gzip to the local registry, as kiln build
# --push does.
# Needs: buildkitd and the local registry with the fixtures (bash
# scripts/buildkitd.sh start; bash scripts/registry.sh start; bash
# scripts/fixtures.sh). Prunes BuildKit's cache. ~15 minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
REG=${KILN_REGISTRY:-127.0.0.1:5000}
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
BEFORE=${1:-$(git merge-base HEAD main)}
AFTER=${2:-HEAD}
PORT=${KILN_BENCH_INDEX_PORT:-39522}
W=$(mktemp -d "${KILN_BENCH_DIR:-/var/tmp}/kiln-buildab.XXXXXX")
. bench/lib/ab.sh
trap 'kill "${WPID:-0}" 2>/dev/null || true; ab_remove "$W"; rm -rf "$W"' EXIT
ab_kilns "$W" "$BEFORE" "$AFTER"
eval "$(bash scripts/buildkitd.sh env)"
wheel_index "$W" "$W/src.after"
default_recipe "$W" "$W/kiln.after"
echo "before $(git rev-parse --short "$BEFORE"), after $(git rev-parse --short "$AFTER"); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
cpu() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat; }
kb() { # kb WHICH ROW: one timed kiln build into $W/t.ROW.WHICH
	/usr/bin/time -f '%e' -o "$W/t" "$W/kiln.$1" build "$W/ctx/kiln.yaml" --mirror "$REG" --wheel-index "$INDEX" \
		--rebuild --progress quiet --json --push "$REG/kiln-bench/buildab-$1:1" >/dev/null
	cat "$W/t" >>"$W/t.$2.$1"
}
for s in before after; do
	buildctl prune --all >/dev/null
	c0=$(cpu)
	kb $s first
	echo "$((($(cpu) - c0) / $(getconf CLK_TCK)))" >"$W/t.cpu.$s"
	kb $s noop
	kb $s noop
done
buildctl prune --all >/dev/null
ab_header
ab_row "first build, empty BuildKit, s" "$W/t.first"
ab_row "machine CPU during it, s" "$W/t.cpu"
ab_row "no-op kiln build --rebuild (best of 2), s" "$W/t.noop"
