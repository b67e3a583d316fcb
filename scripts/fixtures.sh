#!/usr/bin/env bash
# make fixtures: build realistic CUDA test images from Debian's own packages.
#
#   bash scripts/fixtures.sh          # build layers (cached) + assemble images + push if a registry answers
#   bash scripts/fixtures.sh layers   # only build/refresh the cached layer directories
#
# Environment:
#   KILN_FIXTURE_CACHE       download/layer cache (default /var/cache/kiln-fixtures)
#   KILN_FIXTURES            output dir (default ./fixtures)
#   KILN_FIXTURE_WEIGHTS_MB  size of /app/models/model.safetensors in MiB (default 300)
#   KILN_REGISTRY            registry to push to (default 127.0.0.1:5000 when it answers;
#                            set to "none" to skip pushing)
#   KILN_DEBIAN_MIRROR       default http://deb.debian.org/debian
#   SOURCE_DATE_EPOCH        mtime for every tar entry (default 1747699200 = 2025-05-20)
#
# Needs root (debootstrap, chroot, overlayfs). See testdata/fixtures/README.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}
OUT=${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}
WEIGHTS_MB=${KILN_FIXTURE_WEIGHTS_MB:-300}
MIRROR=${KILN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1747699200}
LAYERS=$CACHE/layers
DEBS=$CACHE/debs
LISTS=$CACHE/apt-lists
# Bump when the recipe of a layer changes so stale cached layers are rebuilt.
RECIPE=2

RUNTIME_PKGS="libcudart11.0 libcublas11 libcublaslt11 libcufft10 libcurand10 libcusparse11 libnvrtc11.2"
DEVEL_PKGS="nvidia-cuda-dev nvidia-cuda-toolkit"
TORCH_PKGS="python3-torch"

log() { printf '[fixtures %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, chroot and overlayfs need it)"
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac

# ---------------------------------------------------------------- host setup
host_setup() {
	local need_update=0 src=/etc/apt/sources.list.d/kiln-nonfree.sources
	if [[ ! -f $src ]]; then
		log "adding contrib non-free for $SUITE ($src)"
		cat >"$src.tmp" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
		mv "$src.tmp" "$src"
		need_update=1
	fi
	local missing=()
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v docker-registry >/dev/null || missing+=(docker-registry)
	command -v skopeo >/dev/null || missing+=(skopeo)
	command -v curl >/dev/null || missing+=(curl)
	[[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
	if ((${#missing[@]})); then need_update=1; fi
	if ((need_update)); then
		log "apt-get update"
		apt-get update -qq
	fi
	if ((${#missing[@]})); then
		log "installing host packages: ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
	fi
	GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
	[[ -x $GO ]] || die "go toolchain not found (set GO=/path/to/go)"
}

# ---------------------------------------------------------------- overlay helpers
MOUNTS=()
cleanup_mounts() {
	local i
	for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
		umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null || true
	done
	MOUNTS=()
}
trap cleanup_mounts EXIT
mnt() { # mnt TARGET mount-args...
	local t=$1
	shift
	mount "$@" "$t"
	MOUNTS+=("$t")
}

# safe_rm DIR: unmount anything left mounted below DIR (an interrupted run),
# then delete it without crossing into other file systems.
safe_rm() {
	local d m
	d=$(realpath -m "$1")
	[[ -e $d ]] || return 0
	for m in $(awk '{print $2}' /proc/self/mounts | grep -F "$d/" | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	rm -rf --one-file-system "$d"
}

# layer_recipe NAME: RECIPE plus the layer's own revision, so a change to one
# step rebuilds that layer and the ones above it, not the whole chain.
layer_recipe() {
	case $1 in
	torch) echo "$RECIPE.glx" ;; # torch revision: glx alternative set to mesa
	*) echo "$RECIPE" ;;
	esac
}
layer_done() { [[ -f $LAYERS/$1/id && $(cat "$LAYERS/$1/recipe" 2>/dev/null) == "$(layer_recipe "$1")" ]]; }

# finish_layer NAME CREATED_BY: move NAME.tmp into place with its metadata.
finish_layer() {
	local name=$1 created_by=$2 d=$LAYERS/$1.tmp
	safe_rm "$d/work"
	safe_rm "$d/merged"
	printf '%s\n' "$created_by" >"$d/created_by"
	layer_recipe "$name" >"$d/recipe"
	# Unique id of this build of the layer: keys the generator's blob cache.
	printf '%s-%s-%s\n' "$name" "$(date +%s%N)" "$RANDOM$RANDOM" | sha256sum | cut -c1-32 >"$d/id"
	safe_rm "$LAYERS/$name"
	mv "$d" "$LAYERS/$name"
	log "layer $name: $(du -sh "$LAYERS/$name/rootfs" | cut -f1)"
}

# with_overlay NAME "LOWER1 LOWER2 ..." FUNC: mount lowers (bottom first) + fresh
# upper at $M, run FUNC with chroot plumbing, leave upper as NAME.tmp/rootfs.
with_overlay() {
	local name=$1 lowers=$2 fn=$3 d=$LAYERS/$1.tmp lowerdir="" l
	for l in $lowers; do lowerdir="$LAYERS/$l/rootfs${lowerdir:+:$lowerdir}"; done
	safe_rm "$d"
	mkdir -p "$d/rootfs" "$d/work" "$d/merged"
	M=$d/merged
	mnt "$M" -t overlay overlay -o "lowerdir=$lowerdir,upperdir=$d/rootfs,workdir=$d/work,index=off,redirect_dir=off,metacopy=off"
	mnt "$M/proc" -t proc proc
	mnt "$M/dev" --bind /dev
	mkdir -p "$DEBS/partial"
	mnt "$M/mnt" --bind "$DEBS"
	# Build-time only files: created in the upper and deleted again, so they
	# leave no trace (no whiteout) in the layer.
	cp /etc/resolv.conf "$M/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$M/usr/sbin/policy-rc.d"
	chmod 755 "$M/usr/sbin/policy-rc.d"
	"$fn"
	rm -f "$M/etc/resolv.conf" "$M/usr/sbin/policy-rc.d"
	cleanup_mounts
}

in_chroot() {
	chroot "$M" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
		DEBIAN_FRONTEND=noninteractive SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" "$@"
}

# apt_lists: like `apt-get update`, but the first result is cached so reruns
# do no network work.
apt_lists() {
	if [[ -f $LISTS/.complete ]]; then
		cp -a "$LISTS/." "$M/var/lib/apt/lists/"
		rm -f "$M/var/lib/apt/lists/.complete"
	else
		in_chroot apt-get update -q
		rm -rf "$LISTS.tmp"
		mkdir -p "$LISTS.tmp"
		cp -a "$M/var/lib/apt/lists/." "$LISTS.tmp/"
		rm -rf "$LISTS.tmp/lock" "$LISTS.tmp/partial"
		touch "$LISTS.tmp/.complete"
		rm -rf "$LISTS"
		mv "$LISTS.tmp" "$LISTS"
	fi
}

# fetch_debs PKGS...: make sure every .deb the install needs is in $DEBS
# (bind-mounted at /mnt in the chroot); prints the deb file names.
fetch_debs() {
	local files missing=0 f
	files=$(in_chroot apt-get install -qq --no-install-recommends --print-uris "$@" | awk '{print $2}')
	for f in $files; do [[ -f $DEBS/$f ]] || missing=1; done
	if ((missing)); then
		in_chroot apt-get install -y -q --no-install-recommends --download-only \
			-o Dir::Cache::Archives=/mnt/ "$@" >&2
	fi
	printf '%s\n' $files
}

# apt_install PKGS...: real dpkg install from the deb cache (debs stay out of the layer).
apt_install() {
	fetch_debs "$@" >/dev/null
	in_chroot apt-get install -y -q --no-install-recommends -o Dir::Cache::Archives=/mnt/ "$@"
}

# ---------------------------------------------------------------- layers
build_base() {
	layer_done base && return
	local tgz=$CACHE/debootstrap/$SUITE-minbase.tgz d=$LAYERS/base.tmp
	mkdir -p "$CACHE/debootstrap"
	if [[ ! -f $tgz ]]; then
		log "debootstrap --make-tarball (download)"
		rm -rf "$CACHE/debootstrap/mk"
		debootstrap --variant=minbase --make-tarball="$tgz.tmp.tgz" "$SUITE" "$CACHE/debootstrap/mk" "$MIRROR" >&2
		rm -rf "$CACHE/debootstrap/mk"
		mv "$tgz.tmp.tgz" "$tgz"
	fi
	log "debootstrap --variant=minbase $SUITE (from cached tarball)"
	safe_rm "$d"
	mkdir -p "$d"
	debootstrap --variant=minbase --unpack-tarball="$tgz" "$SUITE" "$d/rootfs" "$MIRROR" >&2
	# Like the official debian images: no host-specific files, no downloaded debs.
	rm -f "$d/rootfs/etc/resolv.conf" "$d/rootfs/etc/hostname"
	rm -f "$d/rootfs/var/cache/apt/archives/"*.deb
	rm -rf "$d/rootfs/var/lib/apt/lists/"* "$d/rootfs/var/log/bootstrap.log"
	mkdir -p "$d/rootfs/var/lib/apt/lists/partial"
	finish_layer base "/bin/sh -c #(nop) ADD file:debootstrap-minbase-$SUITE in / "
}

step_runtime() {
	: "${M:?step_runtime runs inside with_overlay}"
	sed -i 's/ main$/ main contrib non-free/' "$M/etc/apt/sources.list"
	grep -q non-free "$M/etc/apt/sources.list" ||
		echo "deb $MIRROR $SUITE main contrib non-free" >"$M/etc/apt/sources.list"
	apt_lists
	apt_install $RUNTIME_PKGS
	# As NVIDIA's images (on bases with docker-clean) leave it: no lists, no
	# pkgcache.bin/srcpkgcache.bin (75 MiB that no runtime reads).
	rm -rf "$M/var/lib/apt/lists/"* "$M/var/cache/apt/"*.bin
}
build_runtime() {
	layer_done runtime && return
	log "layer runtime: $RUNTIME_PKGS"
	with_overlay runtime "base" step_runtime
	finish_layer runtime "RUN /bin/sh -c sed -i 's/ main\$/ main contrib non-free/' /etc/apt/sources.list && apt-get update && apt-get install -y --no-install-recommends $RUNTIME_PKGS && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin # buildkit"
}

step_devel() {
	apt_lists
	apt_install $DEVEL_PKGS
	rm -rf "$M/var/lib/apt/lists/"* "$M/var/cache/apt/"*.bin
}
build_devel() {
	layer_done devel && return
	log "layer devel: $DEVEL_PKGS"
	with_overlay devel "base runtime" step_devel
	finish_layer devel "RUN /bin/sh -c apt-get update && apt-get install -y --no-install-recommends $DEVEL_PKGS && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin # buildkit"
}

step_torch() {
	# The naive way: update + install, no cleanup. The .debs land in
	# /var/cache/apt/archives inside the layer exactly as apt would leave them
	# (copied from the download cache so reruns stay offline).
	apt_lists
	local f
	for f in $(fetch_debs $TORCH_PKGS); do cp "$DEBS/$f" "$M/var/cache/apt/archives/$f"; done
	in_chroot apt-get install -y -q --no-install-recommends $TORCH_PKGS
	# nvidia-cuda-toolkit (devel layer) pulls in glx-alternative-nvidia, which
	# points the glx alternative at /usr/lib/nvidia: without the host driver's
	# GL libraries there, libGL.so.1 (which torch loads) is not found. What a
	# user writing this Dockerfile does after the first "import torch" fails:
	in_chroot update-alternatives --set glx /usr/lib/mesa-diverted
	in_chroot ldconfig
}
build_torch() {
	layer_done torch && return
	log "layer torch: $TORCH_PKGS (naive apt install)"
	with_overlay torch "base runtime devel" step_torch
	finish_layer torch "RUN /bin/sh -c apt-get update && apt-get install -y $TORCH_PKGS && update-alternatives --set glx /usr/lib/mesa-diverted && ldconfig # buildkit"
}

build_pipcache() {
	layer_done pipcache && return
	local d=$LAYERS/pipcache.tmp
	log "layer pipcache (generated)"
	safe_rm "$d"
	mkdir -p "$d/rootfs/root"
	chmod 700 "$d/rootfs/root"
	"$GO" run ./internal/fixturegen pipcache -out "$d/rootfs/root/.cache/pip" -epoch "$SOURCE_DATE_EPOCH"
	finish_layer pipcache "RUN /bin/sh -c pip install --break-system-packages -r /tmp/requirements.txt # buildkit"
}

build_appsrc() {
	local want="weights=$WEIGHTS_MB"
	if layer_done appsrc && [[ $(cat "$LAYERS/appsrc/params" 2>/dev/null) == "$want" ]]; then return; fi
	local d=$LAYERS/appsrc.tmp
	log "layer appsrc (app + ${WEIGHTS_MB} MiB safetensors)"
	safe_rm "$d"
	mkdir -p "$d/rootfs/app/kiln_app" "$d/rootfs/app/models"
	"$GO" run ./internal/fixturegen appsrc -out "$d/rootfs/app" -weights-mb "$WEIGHTS_MB" -epoch "$SOURCE_DATE_EPOCH"
	printf '%s\n' "$want" >"$d/params"
	finish_layer appsrc "COPY . /app # buildkit"
	# the layers above this one depend on its content
	safe_rm "$LAYERS/pycache"
	safe_rm "$LAYERS/cleanup"
}

step_pycache() { in_chroot python3 -m compileall -q /app; }
build_pycache() {
	layer_done pycache && return
	log "layer pycache (python3 -m compileall /app)"
	with_overlay pycache "base runtime devel torch pipcache appsrc" step_pycache
	finish_layer pycache "RUN /bin/sh -c python3 -m compileall -q /app # buildkit"
}

step_cleanup() {
	in_chroot /bin/sh -c 'rm -rf /var/lib/apt/lists/* && rm -rf /var/log/apt && mkdir -p /var/log/apt'
}
build_cleanup() {
	layer_done cleanup && return
	log "layer cleanup (rm -rf /var/lib/apt/lists/*)"
	with_overlay cleanup "base runtime devel torch pipcache appsrc pycache" step_cleanup
	finish_layer cleanup "RUN /bin/sh -c rm -rf /var/lib/apt/lists/* && rm -rf /var/log/apt && mkdir -p /var/log/apt # buildkit"
}

# ---------------------------------------------------------------- main
main() {
	local t0=$SECONDS
	host_setup
	mkdir -p "$LAYERS" "$DEBS"
	# One build at a time per cache (CI and a developer on the same machine).
	exec 9>"$CACHE/.lock"
	flock -n 9 || { log "waiting for another fixtures build (lock $CACHE/.lock)"; flock 9; }
	cd "$ROOT"
	# A layer rebuilt means everything above it must be rebuilt too.
	local chain=(base runtime devel torch pipcache appsrc pycache cleanup) i j
	for ((i = 0; i < ${#chain[@]}; i++)); do
		if ! layer_done "${chain[i]}"; then
			for ((j = i + 1; j < ${#chain[@]}; j++)); do
				[[ ${chain[j]} == pipcache || ${chain[j]} == appsrc ]] && continue
				safe_rm "$LAYERS/${chain[j]}"
			done
		fi
	done
	build_base
	build_runtime
	build_devel
	build_torch
	build_pipcache
	build_appsrc
	build_pycache
	build_cleanup
	log "layers ready ($((SECONDS - t0))s)"
	[[ ${1:-} == layers ]] && return

	local reg=${KILN_REGISTRY:-}
	if [[ -z $reg ]]; then
		if curl -fsS -m 2 -o /dev/null http://127.0.0.1:5000/v2/; then reg=127.0.0.1:5000; else reg=none; fi
	fi
	[[ $reg == none ]] && reg=""
	log "assembling images into $OUT${reg:+ and pushing to $reg}"
	"$GO" run ./internal/fixturegen build -layers "$LAYERS" -out "$OUT" \
		-blob-cache "$CACHE/blobs" -epoch "$SOURCE_DATE_EPOCH" ${reg:+-registry "$reg"}
	log "done in $((SECONDS - t0))s"
}
main "$@"
