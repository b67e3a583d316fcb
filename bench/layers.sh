#!/usr/bin/env bash
# bench/layers.sh [NAIVE_IMAGE]: does splitting kiln slim's big layers
# (--max-layer-size) make pulls by the engines' own clients faster?
#
# The naive CUDA 12.4 app image is slimmed once (runtime-strict, weights to
# a volume: the image a platform would pull), untimed; that slim image is
# then re-laid out at each cap in $CAPS (0 = today's four layers: os, cuda,
# python, app) with --policy weights (nothing more is dropped: every
# variant holds the same files) and --compression both, and pushed to the
# local registry. Each variant is pulled, from an empty root each time and
# after dropping the page cache, by:
#
#   ctr1   Debian's containerd 1.6 (ctr images pull: fetch, then unpack)
#   ctr2   containerd 2.x (scripts/containerd2.sh), default settings
#   docker Debian's Docker 20.10 (docker pull: 3 downloads at a time,
#          extracts in order), the gzip variant
#
# containerd pulls both the gzip tag and the -zstd tag. Prints seconds per
# pull, and each variant's layer count and largest layer.
#
#   bash bench/layers.sh            (root; ~20 GB of scratch)
#   CAPS="0 512MiB" RUNS=2 ENGINES="ctr1 docker" bash bench/layers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
NAIVE=${1:-127.0.0.1:5000/kiln/naive-app:cu124}
REG=${NAIVE%%/*}
CAPS=${CAPS:-0 256MiB 512MiB 1GiB}
RUNS=${RUNS:-1}
ENGINES=${ENGINES:-ctr1 ctr2 docker}
W=${KILN_BENCH_DIR:-/var/tmp/kiln-layers}
SRC=${KILN_LAYERS_SRC:-/var/tmp/kiln-layers-src} # the slim image, kept between runs
PID=""

make -s build
D2=""
case " $ENGINES " in *" ctr2 "*) D2=$(bash scripts/containerd2.sh path) ;; esac

stop() {
	if [ -n "$PID" ]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
		PID=""
	fi
	grep -o " $W/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$W/e"
}
trap 'stop; rm -rf "$W"' EXIT

# ctrd_start BIN: a containerd with an empty root and its own socket.
ctrd_start() {
	local bin=$1 cfgv=2 disabled='"io.containerd.grpc.v1.cri"'
	stop
	mkdir -p "$W/e"
	case $("$bin" --version | awk '{print $3}') in
	v1.* | 1.*) ;;
	*)
		cfgv=3
		disabled='"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"'
		;;
	esac
	cat >"$W/e/config.toml" <<TOML
version = $cfgv
root = "$W/e/root"
state = "$W/e/state"
disabled_plugins = [$disabled]
[grpc]
  address = "$W/e/c.sock"
[ttrpc]
  address = "$W/e/c.sock.ttrpc"
TOML
	PATH="$(dirname "$bin"):$PATH" "$bin" --config "$W/e/config.toml" >"$W/engine.log" 2>&1 &
	PID=$!
	for _ in $(seq 100); do [ -S "$W/e/c.sock" ] && return; sleep 0.1; done
	echo "containerd did not start" >&2
	exit 1
}

dockerd_start() {
	stop
	mkdir -p "$W/e"
	dockerd --data-root "$W/e/data" --exec-root "$W/e/x" --pidfile "$W/e/pid" -H "unix://$W/e/d.sock" \
		--iptables=false --bridge=none >"$W/engine.log" 2>&1 &
	PID=$!
	for _ in $(seq 300); do docker -H "unix://$W/e/d.sock" version >/dev/null 2>&1 && return; sleep 0.1; done
	echo "dockerd did not start" >&2
	exit 1
}

now() { date +%s.%N; }
cold() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}

mkdir -p "$W" "$SRC"
if [ ! -f "$SRC/index.json" ]; then
	echo "slimming $NAIVE once (not timed): runtime-strict, weights to a volume" >&2
	bin/kiln slim "$NAIVE" --to "oci:$SRC:app" --policy runtime-strict --weights-to "oci:$SRC-weights:app" \
		--compression zstd --max-layer-size 0 --progress none >/dev/null
fi

declare -A REFS
for cap in $CAPS; do
	ref=$REG/kiln-layers/app:cap-$cap
	REFS[$cap]=$ref
	s=$(now)
	bin/kiln slim "oci:$SRC:app" --to "$ref" --policy weights --compression both --max-layer-size "$cap" \
		--json --progress none >"$W/slim-$cap.json"
	e=$(now)
	python3 - "$W/slim-$cap.json" "$cap" "$(echo "$e - $s" | bc -l)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ls = r["layers"]
def size(l, c): return next(b["compressed_size"] for b in l["blobs"] if b["compression"] == c)
big = max(ls, key=lambda l: l["uncompressed_size"])
print(f"cap {sys.argv[2]:>7}: {len(ls):2} layers, gzip {sum(size(l,'gzip') for l in ls)/1e6:,.0f} MB, zstd {sum(size(l,'zstd') for l in ls)/1e6:,.0f} MB, "
      f"largest {big['name']} {big['uncompressed_size']/1e6:,.0f} MB tar / {size(big,'gzip')/1e6:,.0f} MB gzip; slim {float(sys.argv[3]):.0f} s", file=sys.stderr)
PY
done

# pull ENGINE REF → seconds
pull() {
	local eng=$1 ref=$2 s e
	case $eng in
	ctr1) ctrd_start "$(command -v containerd)" ;;
	ctr2) ctrd_start "$D2/containerd" ;;
	docker) dockerd_start ;;
	esac
	cold
	s=$(now)
	case $eng in
	ctr1) ctr --address "$W/e/c.sock" images pull --plain-http "$ref" >"$W/pull.log" 2>&1 ;;
	ctr2) "$D2/ctr" --address "$W/e/c.sock" images pull --plain-http "$ref" >"$W/pull.log" 2>&1 ;;
	docker) docker -H "unix://$W/e/d.sock" pull -q "$ref" >"$W/pull.log" 2>&1 ;;
	esac || {
		echo "FAILED: $eng pull $ref" >&2
		tail -5 "$W/pull.log" >&2
		echo nan
		stop
		return
	}
	e=$(now)
	stop
	echo "$e - $s" | bc -l
}

printf '\n%-8s %-6s' engine comp
for cap in $CAPS; do printf ' %10s' "cap $cap"; done
printf '   (seconds, min of %s)\n' "$RUNS"
for eng in $ENGINES; do
	comps="gzip zstd"
	[ "$eng" = docker ] && comps=gzip
	for comp in $comps; do
		printf '%-8s %-6s' "$eng" "$comp"
		for cap in $CAPS; do
			ref=${REFS[$cap]}
			[ "$comp" = zstd ] && ref=$ref-zstd
			best=""
			for _ in $(seq "$RUNS"); do
				t=$(pull "$eng" "$ref")
				# A failed pull (nan) counts only when no run succeeded.
				if [ -z "$best" ] || [ "$best" = nan ] || { [ "$t" != nan ] && [ "$(echo "$t < $best" | bc -l)" = 1 ]; }; then best=$t; fi
			done
			printf ' %10.1f' "$best"
		done
		printf '\n'
	done
done
