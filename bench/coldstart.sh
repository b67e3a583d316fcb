#!/usr/bin/env bash
# bench/coldstart.sh: cold start of the naive CUDA 12.4 app image against
# kiln's ways, one run, same machine, same image content, each engine with
# an empty store, the page cache dropped before each row, from the local
# registry. Every row names its runtime and version, and is compared with
# the naive pull on that same runtime (a ratio across runtimes measures
# the runtime, not kiln: containerd 2.x pulls the naive image ~2.5x faster
# than 1.6 here):
#
#   naive     containerd 1.6 `ctr images pull` of the naive gzip image (9
#             layers, weights baked in) + `ctr run`
#   naive2    the same on containerd 2.x as it comes (overlayfs): the naive
#             row of every containerd 2.x row below
#   warm      kiln warm --unpack --weights-into DIR of the kiln slim zstd
#             image and its weights volume, containerd 1.6 + `ctr run` with
#             the volume mounted
#   docker    Docker 20.10 (a private dockerd) `docker pull` of the kiln
#             slim balanced gzip image + kiln weights pull + `docker run -v`
#   estargz   containerd 2.x with the stargz snapshotter: `ctr images pull
#             --snapshotter stargz` of the kiln slim eStargz image (startup
#             set recorded by its probe) + kiln weights pull + `ctr run`;
#             the layers are fetched lazily while the container starts
#   esgz-full the same eStargz image, containerd 2.x `ctr images pull`
#             (overlayfs: every layer fetched and unpacked) + `ctr run`: the
#             lazy pull's control
#   erofs     containerd 2.x with the EROFS snapshotter (scripts/containerd2.sh
#             erofs-config): `kiln warm TAG --unpack --weights-into DIR`,
#             no format or snapshotter flag: kiln finds the EROFS
#             snapshotter and takes TAG's native EROFS form (TAG-erofs, which
#             TAG names; each layer an EROFS image kiln writes into its
#             snapshot while it downloads, no untar); the row fails if
#             warm took anything else. + `ctr run --snapshotter erofs`
#   erofs-ctr the same containerd, its own way: `ctr images pull
#             --snapshotter erofs` of the slim zstd image (its EROFS differ
#             converts every layer with mkfs.erofs) + kiln weights pull +
#             `ctr run`
#   warm-start  the limit: the erofs row's container started again, the
#             image and weights already on the host, page cache dropped,
#             containerd restarted with its root kept (a relaunch on the
#             warmed host, not a start after this script's other rows)
#   hot-start once more with the page cache kept: warm-start minus this is
#             what the start waits on the disk; the rest is the probe's own
#             work (it prints its CPU seconds: no row's CPU column has them)
#   erofs-none, erofs-lz4, erofs-lz4hc, erofs-zstd
#             the erofs row with the EROFS form converted with that
#             compression inside (kiln convert --format erofs
#             --erofs-compression C, made once, not timed; lz4hc is TAG-erofs,
#             kiln slim's default), warmed by its own tag: the compression
#             chosen for the cold start, not only for its size
#
# Every row reports wall time, bytes moved and CPU seconds: kiln's, ctr's
# (or docker's CLI) and the daemons' (containerd with the unpack or the
# mkfs.erofs it runs; dockerd with its containerd), not the container's
# own (the probe, the same in every row).
#
# Every row ends with the container importing torch, loading libtorch_cuda
# and reading the model file (from the volume for kiln's images): time is
# wall clock from an empty store to the first successful probe. Bytes moved
# are the layers (and the weights) fetched: the blob sizes for full pulls;
# for the lazy pull, counted by a proxy (bench/countproxy) between the
# snapshotter and the registry, at the probe's success and once more after
# the full read below.
#
# Where lazy pull loses: the full read (a start that reads every file of
# the image: python walking / and reading each file), once in the image
# kiln warm unpacked (page cache dropped; the fetch and unpack are the warm
# row's) and once as the first start after a fresh lazy pull (pull + read,
# from an empty store).
#
# The machine's limits, measured in the same run: loopback HTTP (a large
# blob from the registry to /dev/null), gzip and zstd decompression (one
# slim layer, from the page cache), sha256 (bench/hashrate) and disk
# writes with fsync (1 GiB, dd conv=fsync).
#
# The slim images are made once beforehand (not timed) when missing:
# kiln slim --policy runtime-strict --weights-to --format erofs (gzip under
# TAG, zstd under TAG-zstd, the native EROFS form under TAG-erofs, which
# TAG's manifest names; balanced layers: the default --max-layer-size;
# mkfs.erofs: scripts/erofs-utils.sh) and kiln slim --format estargz
# --probe (the same content as eStargz, the probe's files first).
#
# kiln warm's fetch throughput (the erofs row's, from its --json report)
# is printed against the machine's limit, min(loopback HTTP, sha256, disk
# write with fsync), measured in the same run.
#
#   bash bench/coldstart.sh [NAIVE_IMAGE]   (root; /dev/fuse; ~30 GB scratch)
#   SLIM=... ESGZ=... EROFS=... WREF=...     (reuse images made earlier)
#   ROWS="naive2 erofs warm-start"           (only these rows; default all)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
NAIVE=${1:-127.0.0.1:5000/kiln/naive-app:cu124}
REG=${NAIVE%%/*}
SLIM=${SLIM:-$REG/kiln-cold/app:slim}
ESGZ=${ESGZ:-$REG/kiln-cold/app:esgz}
EROFS=${EROFS:-$SLIM-erofs}
ROWS=${ROWS:-naive naive2 warm docker estargz esgz-full erofs erofs-ctr warm-start hot-start}
want() { [[ " $ROWS " == *" $1 "* ]]; }
WREF=${WREF:-$REG/kiln-cold/app-weights:v1}
W=${KILN_BENCH_DIR:-/var/tmp/kiln-coldstart}
# The probe prints its own CPU seconds (user + system, all its threads):
# the container's share of the machine, which no row's CPU column counts.
PROBE='import os, ctypes, resource, torch; ctypes.CDLL("libtorch_cuda.so.2.6"); f="/app/models/model.safetensors"; n=len(open(f,"rb").read()); r=resource.getrusage(resource.RUSAGE_SELF); print("torch", torch.__version__, "cuda", torch.version.cuda, "weights", n, "probe CPU s %.1f" % (r.ru_utime + r.ru_stime))'
SLIMPROBE="python3 -c 'import torch, ctypes; ctypes.CDLL(\"libtorch_cuda.so.2.6\")'"
FULLREAD='import os
n = 0
skip = {"/proc", "/sys", "/dev", "/app/models"}
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]
    for f in files:
        p = os.path.join(root, f)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, "rb") as fh:
            while True:
                b = fh.read(1 << 20)
                if not b:
                    break
                n += len(b)
print("read", n)'

make -s build
go build -o bin/countproxy ./bench/countproxy
go build -o bin/hashrate ./bench/hashrate
CTRD2=$(bash scripts/containerd2.sh path)
STARGZ=$(bash scripts/stargz.sh path)/containerd-stargz-grpc
. bench/lib/containerd.sh
PROXY_PID=
DOCKER_PID=
cleanup() {
	ctrd_stop
	[ -n "$DOCKER_PID" ] && kill "$DOCKER_PID" 2>/dev/null && sleep 2
	[ -n "$PROXY_PID" ] && kill "$PROXY_PID" 2>/dev/null
	grep -o " $W/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W"

names_erofs() { crane manifest --insecure "$1" 2>/dev/null | grep -q '"dev.kiln.erofs.manifest"'; }
if ! names_erofs "$SLIM" || ! crane digest --insecure "$EROFS" >/dev/null 2>&1; then
	echo "making the slim image once (not timed): kiln slim --policy runtime-strict --weights-to --format erofs" >&2
	bin/kiln slim "$NAIVE" --to "$SLIM" --policy runtime-strict --weights-to "$WREF" --format erofs --progress none >/dev/null
fi
if { want estargz || want esgz-full; } && ! crane digest --insecure "$ESGZ" >/dev/null 2>&1; then
	echo "making the eStargz slim image once (not timed): kiln slim --format estargz --probe" >&2
	bin/kiln slim "$NAIVE" --to "$ESGZ" --format estargz --policy runtime-strict --weights-to "$WREF" \
		--probe "$SLIMPROBE" --progress none >/dev/null
fi
layer_bytes() { crane manifest --insecure "$1" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))'; }
weights_bytes() {
	local ref
	ref=$(crane config --insecure "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["Labels"]["dev.kiln.weights.manifest"])' 2>/dev/null) || { echo 0; return; }
	layer_bytes "$ref"
}
NB=$(layer_bytes "$NAIVE")
ZB=$(layer_bytes "$SLIM-zstd")
GB=$(layer_bytes "$SLIM")
EB=$(layer_bytes "$ESGZ" 2>/dev/null || echo 0)
RB=$(layer_bytes "$EROFS" 2>/dev/null || echo 0)
WB=$(weights_bytes "$SLIM")
declare -A T B C
# The runtimes, as each names itself.
V1=$(containerd --version | awk '{print "containerd " $3}')
V2=$("$CTRD2/containerd" --version | awk '{print "containerd " $3}')
VD=$(dockerd --version | sed 's/,.*//')
# row NAME SECONDS BYTES CPU_START [DAEMON_PID...]: the CPU is what was
# spent since cpu_now printed CPU_START (cpu_now, bench/lib/containerd.sh).
row() {
	local c
	c=$(python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.1f}')" "$4" "$(cpu_now "${@:5}")")
	T[$1]=$2 B[$1]=$3 C[$1]=$c
	echo "coldstart: $1 $2 s, $3 bytes, $c CPU s" >&2
}
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.2f}')" "$1" "$2"; }

# --- naive (ctr 1.6) and naive2 (containerd 2.x as it comes): pull + run
# naive_row NAME START CTR: the naive image pulled and run by the
# containerd START starts, through CTR
naive_row() {
	drop_caches
	local c0 t0
	c0=$(cpu_now)
	$2
	t0=$(now)
	$3 images pull --plain-http "$NAIVE" >/dev/null
	$3 run --rm "$NAIVE" "cold-$1" python3 -c "$PROBE"
	row "$1" "$(elapsed "$t0" "$(now)")" "$NB" "$c0" "$(ctrd_pid)"
	ctrd_stop
}
want naive && naive_row naive ctrd_start CTR
want naive2 && naive_row naive2 ctrd_start2 CTR2

# --- warm: kiln warm zstd + weights volume, ctr 1.6 run
FULL_WARM=0
if want warm; then
drop_caches
c0=$(cpu_now)
ctrd_start
t0=$(now)
bin/kiln warm "$SLIM" --target "containerd:$W/c/c.sock" --unpack --weights-into "$W/weights" --progress none >/dev/null
CTR run --rm --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM" cold-kiln python3 -c "$PROBE"
row warm "$(elapsed "$t0" "$(now)")" "$((ZB + WB))" "$c0" "$(ctrd_pid)"
# The full read, warm: every file of the unpacked image, page cache dropped.
drop_caches
t0=$(now)
CTR run --rm --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM" cold-kiln-read python3 -c "$FULLREAD"
FULL_WARM=$(elapsed "$t0" "$(now)")
ctrd_stop
fi

# --- docker: docker pull (gzip, balanced layers) + kiln weights pull + docker run -v
if want docker; then
drop_caches
c0=$(cpu_now)
mkdir -p "$W/d"
dockerd --data-root "$W/d/data" --exec-root "$W/d/x" --pidfile "$W/d/pid" -H "unix://$W/d/d.sock" \
	--iptables=false --bridge=none --insecure-registry "$REG" >"$W/dockerd.log" 2>&1 &
DOCKER_PID=$!
for _ in $(seq 300); do docker -H "unix://$W/d/d.sock" version >/dev/null 2>&1 && break; sleep 0.1; done
t0=$(now)
docker -H "unix://$W/d/d.sock" pull -q "$SLIM" >/dev/null
bin/kiln weights pull "$SLIM" --into "$W/weights" --progress none >/dev/null
docker -H "unix://$W/d/d.sock" run --rm --network none -v "$W/weights/model:/app/models:ro" "$SLIM" python3 -c "$PROBE"
row docker "$(elapsed "$t0" "$(now)")" "$((GB + WB))" "$c0" "$DOCKER_PID"
docker -H "unix://$W/d/d.sock" rmi -f "$SLIM" >/dev/null 2>&1 || true
kill "$DOCKER_PID"
wait "$DOCKER_PID" 2>/dev/null || true
DOCKER_PID=
umount -l "$W/d/data"/*/* 2>/dev/null || true
rm -rf "$W/d" "$W/weights"
fi

# --- estargz: containerd 2.x + stargz snapshotter, lazy pull through the counting proxy
FULL_LAZY=0 LAZY_AT_PROBE=0 LAZY_FULL_BYTES=0
if want estargz; then
bin/countproxy -listen 127.0.0.1:5055 -registry "$REG" >"$W/proxy.log" 2>&1 &
PROXY_PID=$!
sleep 0.5
count() { curl -s http://127.0.0.1:5055/_count; }
lazy_start() {
	drop_caches
	STARGZ_MIRROR=127.0.0.1:5055 ctrd_start_stargz
	base=$(count)
}
c0=$(cpu_now)
lazy_start
t0=$(now)
CTR2 images pull --plain-http --snapshotter stargz "$ESGZ" >/dev/null
bin/kiln weights pull "$ESGZ" --into "$W/weights" --progress none >/dev/null
CTR2 run --rm --snapshotter stargz --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$ESGZ" cold-esgz python3 -c "$PROBE"
row estargz "$(elapsed "$t0" "$(now)")" "$(($(count) - base + WB))" "$c0" "$(ctrd_pid)" "$(cat "$W/stargz.pid")"
LAZY_AT_PROBE=$(($(count) - base))
ctrd_stop
rm -rf "$W/weights"
# The full read, lazily: a fresh lazy pull whose first start reads every file.
lazy_start
t0=$(now)
CTR2 images pull --plain-http --snapshotter stargz "$ESGZ" >/dev/null
mkdir -p "$W/empty"
CTR2 run --rm --snapshotter stargz --mount "type=bind,src=$W/empty,dst=/app/models,options=rbind:ro" "$ESGZ" cold-esgz-read python3 -c "$FULLREAD"
FULL_LAZY=$(elapsed "$t0" "$(now)")
LAZY_FULL_BYTES=$(($(count) - base))
ctrd_stop
kill "$PROXY_PID"
PROXY_PID=
fi

# --- esgz-full: the same eStargz image, fully pulled by containerd 2.x (overlayfs)
if want esgz-full; then
drop_caches
c0=$(cpu_now)
ctrd_start_stargz
t0=$(now)
CTR2 images pull --plain-http --snapshotter overlayfs --skip-metadata "$ESGZ" >/dev/null
bin/kiln weights pull "$ESGZ" --into "$W/weights" --progress none >/dev/null
CTR2 run --rm --snapshotter overlayfs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$ESGZ" cold-esgz-full python3 -c "$PROBE"
row esgz-full "$(elapsed "$t0" "$(now)")" "$((EB + WB))" "$c0" "$(ctrd_pid)" "$(cat "$W/stargz.pid")"
ctrd_stop
fi

# --- erofs: kiln warm TAG, no flag: kiln finds containerd 2.x's EROFS
# snapshotter and takes TAG-erofs (TAG names it) + weights volume + ctr run
WARM_MBPS=0 WARM_S=0
if want erofs || want warm-start || want hot-start; then
drop_caches
c0=$(cpu_now)
ctrd_start_erofs
t0=$(now)
bin/kiln warm "$SLIM" --target "containerd:$W/c/c.sock" --unpack --weights-into "$W/weights" --json >"$W/warm.json"
CTR2 run --rm --snapshotter erofs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM" cold-erofs python3 -c "$PROBE"
row erofs "$(elapsed "$t0" "$(now)")" "$((RB + WB))" "$c0" "$(ctrd_pid)"
read -r form snap WARM_MBPS WARM_S < <(python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
im = r["images"][0]
mbps = r["fetched_bytes"] / r["seconds"] / 1e6
print(im.get("form") or "-", r.get("snapshotter") or "-", round(mbps), round(r["seconds"], 1))' "$W/warm.json")
echo "coldstart: erofs: kiln warm READY after $WARM_S s (its own clock), the rest of the row is ctr run to the probe" >&2
if [ "$form" != erofs ] || [ "$snap" != erofs ]; then
	echo "coldstart: kiln warm $SLIM took form $form into snapshotter $snap, not TAG-erofs into erofs" >&2
	exit 1
fi
# --- warm-start: the same container again, everything local, page cache
# dropped and containerd restarted (its root kept): a start on the warmed
# host as a relaunch finds it, not after this script's earlier rows
ctrd_restart
drop_caches
c0=$(cpu_now "$(ctrd_pid)")
t0=$(now)
CTR2 run --rm --snapshotter erofs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM" cold-erofs python3 -c "$PROBE"
row warm-start "$(elapsed "$t0" "$(now)")" 0 "$c0" "$(ctrd_pid)"
# --- hot-start: once more, the page cache kept: what of a start is the
# disk (warm-start minus this) and what is the probe's own work
if want hot-start; then
c0=$(cpu_now "$(ctrd_pid)")
t0=$(now)
CTR2 run --rm --snapshotter erofs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM" cold-erofs python3 -c "$PROBE"
row hot-start "$(elapsed "$t0" "$(now)")" 0 "$c0" "$(ctrd_pid)"
fi
ctrd_stop
fi

# --- erofs-C: the EROFS form with compression C inside, by its own tag
for comp in none lz4 lz4hc zstd; do
	want "erofs-$comp" || continue
	ref="$SLIM-erofs-$comp"
	[ "$comp" = lz4hc ] && ref=$EROFS # kiln slim's default
	if ! crane digest --insecure "$ref" >/dev/null 2>&1; then
		echo "making the EROFS form with $comp inside once (not timed): kiln convert --format erofs --erofs-compression $comp" >&2
		bin/kiln convert "$SLIM" --to "$ref" --format erofs --erofs-compression "$comp" --progress none >/dev/null
	fi
	cb=$(layer_bytes "$ref")
	drop_caches
	c0=$(cpu_now)
	ctrd_start_erofs
	t0=$(now)
	if ! bin/kiln warm "$ref" --target "containerd:$W/c/c.sock" --unpack --weights-into "$W/weights" --progress none >/dev/null ||
		! CTR2 run --rm --snapshotter erofs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$ref" "cold-erofs-$comp" python3 -c "$PROBE"; then
		echo "coldstart: erofs-$comp failed (does this kernel's EROFS read $comp?)" >&2
		ctrd_stop
		continue
	fi
	row "erofs-$comp" "$(elapsed "$t0" "$(now)")" "$((cb + WB))" "$c0" "$(ctrd_pid)"
	ctrd_stop
done

# --- erofs-ctr: containerd's own EROFS conversion of the zstd image
if want erofs-ctr; then
drop_caches
c0=$(cpu_now)
ctrd_start_erofs
t0=$(now)
CTR2 images pull --plain-http --snapshotter erofs --skip-metadata "$SLIM-zstd" >/dev/null
bin/kiln weights pull "$SLIM" --into "$W/weights" --progress none >/dev/null
CTR2 run --rm --snapshotter erofs --mount "type=bind,src=$W/weights/model,dst=/app/models,options=rbind:ro" "$SLIM-zstd" cold-erofs-ctr python3 -c "$PROBE"
row erofs-ctr "$(elapsed "$t0" "$(now)")" "$((ZB + WB))" "$c0" "$(ctrd_pid)"
ctrd_stop
fi

# --- the machine's limits, same run
big=$(crane manifest --insecure "$SLIM" | python3 -c 'import json,sys; print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')
bigz=$(crane manifest --insecure "$SLIM-zstd" | python3 -c 'import json,sys; print(max(json.load(sys.stdin)["layers"], key=lambda l: l["size"])["digest"])')
repo=${SLIM#*/}
repo=${repo%:*}
curl -s -o /dev/null -w '%{size_download} %{time_total}\n' "http://$REG/v2/$repo/blobs/$big" >"$W/loop"
curl -s -o "$W/big.gz" "http://$REG/v2/$repo/blobs/$big"
curl -s -o "$W/big.zst" "http://$REG/v2/$repo/blobs/$bigz"
cat "$W/big.gz" "$W/big.zst" >/dev/null
t0=$(now); gzip -dc "$W/big.gz" | wc -c >"$W/gzn"; GZT=$(elapsed "$t0" "$(now)")
t0=$(now); zstd -dc "$W/big.zst" | wc -c >"$W/zsn"; ZST=$(elapsed "$t0" "$(now)")
SHA=$(bin/hashrate "$W/big.gz")
t0=$(now); dd if=/dev/zero of="$W/dd" bs=1M count=1024 conv=fsync status=none; DDT=$(elapsed "$t0" "$(now)")
rm -f "$W/big.gz" "$W/big.zst" "$W/dd"

for k in naive naive2 warm docker estargz esgz-full erofs erofs-ctr warm-start hot-start erofs-none erofs-lz4 erofs-lz4hc erofs-zstd; do
	echo "$k ${T[$k]:-} ${B[$k]:-} ${C[$k]:-}"
done >"$W/rows"
python3 - "$W/rows" "$FULL_WARM" "$FULL_LAZY" "$LAZY_AT_PROBE" "$LAZY_FULL_BYTES" "$EB" "$WB" \
	"$(cat "$W/loop")" "$(cat "$W/gzn")" "$GZT" "$(cat "$W/zsn")" "$ZST" "$SHA" "$DDT" "$WARM_MBPS" "$V1" "$V2" "$VD" <<'EOF'
import sys
a = sys.argv[1:]
v1, v2, vd = a[15], a[16], a[17]
# Each row: its label, its runtime, and the naive row on that runtime.
rows = {"naive": ("naive gzip image, ctr pull + run", v1, "naive"),
        "naive2": ("naive gzip image, ctr pull + run", v2, "naive2"),
        "warm": ("kiln slim zstd, kiln warm + volume", v1, "naive"),
        "docker": ("kiln slim balanced gzip, docker pull + volume", vd, None),
        "estargz": ("kiln slim eStargz, lazy (stargz) + volume", v2, "naive2"),
        "esgz-full": ("kiln slim eStargz, full ctr pull + volume", v2, "naive2"),
        "erofs": ("kiln warm TAG (takes TAG-erofs) + volume", v2, "naive2"),
        "erofs-ctr": ("kiln slim zstd, ctr pull --snapshotter erofs", v2, "naive2"),
        "warm-start": ("warm start: erofs row's container again", v2, "naive2"),
        "hot-start": ("the same, page cache kept (no disk read)", v2, "naive2"),
        "erofs-none": ("kiln warm TAG-erofs, none inside + volume", v2, "naive2"),
        "erofs-lz4": ("kiln warm TAG-erofs, lz4 inside + volume", v2, "naive2"),
        "erofs-lz4hc": ("kiln warm TAG-erofs, lz4hc inside + volume", v2, "naive2"),
        "erofs-zstd": ("kiln warm TAG-erofs, zstd inside + volume", v2, "naive2")}
vals = {}
for line in open(a[0]):
    f = line.split()
    if len(f) == 4:
        vals[f[0]] = (float(f[1]), int(f[2]), float(f[3]))
ref = lambda k: vals[k][0] if k in vals else None
ws = ref("warm-start")
print(f"\n| {'row':46} | {'runtime':18} | first probe | bytes moved | CPU s | vs naive (same runtime) | vs warm start |")
print(f"|{'-'*48}|{'-'*20}|---|---|---|---|---|")
for k, (label, rt, nk) in rows.items():
    if k not in vals:
        continue
    t, b, c = vals[k]
    naive = ref(nk) if nk else None
    vn = f"{naive/t:.2f}x" if naive else "-"
    vw = f"{t/ws:.2f}x" if ws else "-"
    print(f"| {label:46} | {rt:18} | {t:.1f} s | {b/1e6:,.0f} MB | {c:.1f} | {vn} | {vw} |")
if "naive" in vals and "naive2" in vals:
    print(f"\nthe runtime alone: the naive pull on {v2} is {vals['naive'][0]/vals['naive2'][0]:.2f}x the one on {v1} (not kiln's)")
fw, fl, lp, lf, eb, wb = float(a[1]), float(a[2]), int(a[3]), int(a[4]), int(a[5]), int(a[6])
if "estargz" in vals:
    print(f"\nlazy pull at the first successful probe: {lp/1e6:,.0f} MB of the eStargz image's {eb/1e6:,.0f} MB layers ({100*lp/eb:.0f}%), + {wb/1e6:,.0f} MB weights")
if "estargz" in vals and "warm" in vals:
    print(f"full read (every file): after kiln warm (unpacked, page cache dropped) {fw:.1f} s; lazy, pull + read from an empty store {fl:.1f} s"
          f" ({fl/fw:.2f}x; warm's own fetch + unpack is in the warm row), {lf/1e6:,.0f} MB fetched lazily")
ln, lt = a[7].split()
loop, sha, disk = int(ln)/float(lt)/1e6, int(a[12].split()[1])/float(a[12].split()[0])/1e6, 1024*1048576/float(a[13])/1e6
print(f"limits: loopback HTTP {loop:,.0f} MB/s; gzip -d {int(a[8])/float(a[9])/1e6:,.0f} MB/s, zstd -d {int(a[10])/float(a[11])/1e6:,.0f} MB/s (tar out, one slim layer);"
      f" sha256 {sha:,.0f} MB/s; disk write + fsync {disk:,.0f} MB/s")
if float(a[14]) > 0:
    lim = min(loop, sha, disk)
    print(f"kiln warm (erofs row): {float(a[14]):,.0f} MB/s fetched over its whole run, {100*float(a[14])/lim:.0f}% of min(loopback, sha256, disk) = {lim:,.0f} MB/s")
EOF
