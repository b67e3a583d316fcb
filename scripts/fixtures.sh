#!/usr/bin/env bash
# make fixtures: build realistic CUDA 12.4 test images from Debian trixie's own
# packages (CUDA 12.4.1 and python3-torch-cuda 2.6, a real CUDA build of torch).
#
#   bash scripts/fixtures.sh          # build layers (cached) + assemble images + push if a registry answers
#   bash scripts/fixtures.sh layers   # only build/refresh the cached layer directories
#   bash scripts/fixtures.sh smoke    # only the base and cudart layers (a fresh-cache check)
#   bash scripts/fixtures.sh python   # only the stand-in python-build-standalone CPython
#   bash scripts/fixtures.sh bookworm # as the first, and also Debian 12's base chain with its
#                                     # CUDA 11.8 (the faithful nvidia/cuda:11.8.0-*-debian12
#                                     # stand-in, for make catalog); kept up to date afterwards
#   bash scripts/fixtures.sh archive  # as the first, and also write the docker-archive app.tar
#                                     # (8.2 GB, docker save's uncompressed layers): on demand, for
#                                     # what reads docker save output; the first form removes it
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
SUITE=trixie
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1747699200}
LAYERS=$CACHE/layers
DEBS=$CACHE/debs
LISTS=$CACHE/apt-lists-$SUITE
STANDIN=$DEBS/kiln-standin
# Bump when the recipe of a layer changes so stale cached layers are rebuilt.
RECIPE=3-$SUITE
# The base chain's layer names end in SFX: "" for trixie's (every fixture
# image), -bookworm for Debian 12's (bookworm_chain).
SFX=""

# Shaped like NVIDIA's images: -base carries cudart, -runtime the CUDA
# libraries, -devel the toolkit.
CUDART_PKGS="libcudart12"
RUNTIME_PKGS="libcublas12 libcublaslt12 libcufft11 libcurand10 libcusolver11 libcusparse12 libnvjitlink12 libnvrtc12 libnvtoolsext1 libnccl2"
DEVEL_PKGS="nvidia-cuda-dev nvidia-cuda-toolkit"
TORCH_PKGS="python3-torch-cuda"

log() { printf '[fixtures %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, chroot and overlayfs need it)"
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac

# ---------------------------------------------------------------- host setup
host_setup() {
	# The host's own apt sources are left alone: the chroots carry theirs.
	local need_update=0 missing=()
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v docker-registry >/dev/null || missing+=(docker-registry)
	command -v skopeo >/dev/null || missing+=(skopeo)
	command -v curl >/dev/null || missing+=(curl)
	command -v gcc >/dev/null || missing+=(gcc)
	command -v nm >/dev/null || missing+=(binutils)
	command -v dpkg-deb >/dev/null || missing+=(dpkg)
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
	torch) echo "$RECIPE.cudnn2" ;; # torch revision: stand-in cuDNN
	*) echo "$RECIPE" ;;
	esac
}
layer_done() { [[ -f $LAYERS/$1/id && $(cat "$LAYERS/$1/recipe" 2>/dev/null) == "$(layer_recipe "$1")" ]]; }

# Once the images are assembled, each layer lives twice: as its directory
# (rootfs, ~8 GB for the chain) and as compressed blobs in the blob cache,
# from which fixturegen assembles the images again. prune_rootfs keeps
# the layer's metadata (id, recipe, created_by: the blob cache's key) and
# drops the directory, leaving a "pruned" marker; the disk is the binding
# limit. Building a layer (its lowers are mounted) or the wheels (the
# torch chain is mounted) needs the directories back: need_rootfs then
# drops every pruned layer, so the chain is built again from the debs,
# and restarts the script once. KILN_FIXTURE_KEEP_LAYERS=1 keeps them.
CHAIN=(base cudart runtime devel torch pipcache appsrc pycache cleanup)
BOOKWORM_CHAIN=(base-bookworm cudart-bookworm runtime-bookworm devel-bookworm)
prune_rootfs() {
	[[ ${KILN_FIXTURE_KEEP_LAYERS:-0} == 1 ]] && return
	local l freed=0
	for l in "${CHAIN[@]}" "${BOOKWORM_CHAIN[@]}"; do
		[[ -d $LAYERS/$l/rootfs ]] || continue
		freed=$((freed + $(du -sm "$LAYERS/$l/rootfs" | cut -f1)))
		safe_rm "$LAYERS/$l/rootfs"
		touch "$LAYERS/$l/pruned"
	done
	((freed)) && log "layers: $freed MiB of layer directories dropped (their blobs are cached; KILN_FIXTURE_KEEP_LAYERS=1 keeps them)"
	return 0
}
need_rootfs() {
	local l pruned=()
	for l in "$@"; do [[ -f $LAYERS/$l/pruned ]] && pruned+=("$l"); done
	((${#pruned[@]})) || return 0
	[[ ${KILN_FIXTURES_RESTARTED:-0} == 1 ]] && die "layers ${pruned[*]} still pruned after a restart"
	log "layers ${pruned[*]} were pruned and are needed: rebuilding the pruned layers, then starting again"
	cleanup_mounts
	for l in "${CHAIN[@]}" "${BOOKWORM_CHAIN[@]}"; do [[ -f $LAYERS/$l/pruned ]] && safe_rm "$LAYERS/$l"; done
	exec 9>&-
	KILN_FIXTURES_RESTARTED=1 exec bash "$ROOT/scripts/fixtures.sh" "${ARGS[@]}"
}

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
	# shellcheck disable=SC2086 # lowers is a list
	need_rootfs $lowers
	for l in $lowers; do lowerdir="$LAYERS/$l/rootfs${lowerdir:+:$lowerdir}"; done
	safe_rm "$d"
	mkdir -p "$d/rootfs" "$d/work" "$d/merged"
	M=$d/merged
	mnt "$M" -t overlay overlay -o "lowerdir=$lowerdir,upperdir=$d/rootfs,workdir=$d/work,index=off,redirect_dir=off,metacopy=off"
	# Build-time only files: created in the upper and deleted again, so they
	# leave no trace (no whiteout) in the layer.
	chroot_plumbing
	printf '#!/bin/sh\nexit 101\n' >"$M/usr/sbin/policy-rc.d"
	chmod 755 "$M/usr/sbin/policy-rc.d"
	"$fn"
	rm -f "$M/etc/resolv.conf" "$M/usr/sbin/policy-rc.d"
	cleanup_mounts
}

# chroot_plumbing: what a chroot at $M needs for apt: /proc, /dev, the deb
# cache at /mnt, and the host's resolv.conf (callers remove it again).
chroot_plumbing() {
	mnt "$M/proc" -t proc proc
	mnt "$M/dev" --bind /dev
	mkdir -p "$DEBS/partial"
	mnt "$M/mnt" --bind "$DEBS"
	cp /etc/resolv.conf "$M/etc/resolv.conf"
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
	layer_done "base$SFX" && return
	local tgz d=$LAYERS/base$SFX.tmp
	tgz=$(suite_tarball "$SUITE")
	log "debootstrap --variant=minbase $SUITE (from cached tarball)"
	safe_rm "$d"
	mkdir -p "$d"
	debootstrap --variant=minbase --unpack-tarball="$tgz" "$SUITE" "$d/rootfs" "$MIRROR" >&2
	# Like the official debian images: no host-specific files, no downloaded debs.
	rm -f "$d/rootfs/etc/resolv.conf" "$d/rootfs/etc/hostname"
	rm -f "$d/rootfs/var/cache/apt/archives/"*.deb
	rm -rf "$d/rootfs/var/lib/apt/lists/"* "$d/rootfs/var/log/bootstrap.log"
	mkdir -p "$d/rootfs/var/lib/apt/lists/partial"
	finish_layer "base$SFX" "/bin/sh -c #(nop) ADD file:debootstrap-minbase-$SUITE in / "
}

# standin_deb NAME VERSION DESCRIPTION [PROVIDES]: an empty package that
# satisfies a dependency kiln's images must not (or cannot) carry. The
# driver's libcuda1/libnvidia-ml1 come from the host through the NVIDIA
# Container Toolkit; nvidia-cudnn is a downloader that fetches cuDNN from
# NVIDIA, unreachable here.
standin_deb() {
	local name=$1 version=$2 desc=$3 provides=${4:-} d
	[[ -f $STANDIN/${name}.deb ]] && return
	d=$(mktemp -d)
	mkdir -p "$d/DEBIAN" "$d/usr/share/doc/$name" "$STANDIN"
	{
		echo "Package: $name"
		echo "Version: $version"
		echo "Architecture: amd64"
		echo "Maintainer: kiln fixtures <kiln@localhost>"
		[[ -n $provides ]] && echo "Provides: $provides"
		echo "Section: kiln-standin"
		echo "Priority: optional"
		echo "Description: kiln stand-in: $desc"
		echo " An empty package made by kiln's scripts/fixtures.sh; not NVIDIA's."
	} >"$d/DEBIAN/control"
	echo "kiln stand-in package ($desc); no files of NVIDIA's." >"$d/usr/share/doc/$name/README.kiln-standin"
	dpkg-deb --root-owner-group -Zxz --build "$d" "$STANDIN/$name.deb.tmp" >/dev/null
	mv "$STANDIN/$name.deb.tmp" "$STANDIN/$name.deb"
	rm -rf "$d"
}
standin_debs() {
	standin_deb libcuda1 550.54.15-0kiln1 "host driver's libcuda.so.1 (injected at run time)" "libcuda.so.1 (= 550.54.15), libcuda-12.4-1"
	standin_deb libnvidia-ml1 550.54.15-0kiln1 "host driver's libnvidia-ml.so.1 (injected at run time)" "libnvidia-ml.so.1 (= 550.54.15)"
	standin_deb nvidia-cudnn 9.0.0.312~cuda12+kiln1 "cuDNN 9 downloader replaced by a generated stand-in libcudnn.so.9"
}

sources_nonfree() {
	if [[ -f $M/etc/apt/sources.list.d/debian.sources ]]; then
		sed -i 's/^Components: main$/Components: main contrib non-free/' "$M/etc/apt/sources.list.d/debian.sources"
	fi
	if [[ -f $M/etc/apt/sources.list ]]; then
		sed -i 's/ main$/ main contrib non-free/' "$M/etc/apt/sources.list"
	fi
	grep -rqs non-free "$M/etc/apt/sources.list" "$M/etc/apt/sources.list.d/" ||
		echo "deb $MIRROR $SUITE main contrib non-free" >"$M/etc/apt/sources.list"
	return 0
}

# As NVIDIA's images (on bases with docker-clean) leave it: no lists, no
# pkgcache.bin/srcpkgcache.bin (75 MiB that no runtime reads). apt's and
# dpkg's logs carry wall-clock times: a second build from nothing must give
# the same bytes, so they go too (and ldconfig's aux-cache, which records
# file times).
apt_clean() {
	rm -rf "$M/var/lib/apt/lists/"* "$M/var/cache/apt/"*.bin "$M/var/cache/ldconfig/aux-cache"
	rm -f "$M/var/log/dpkg.log" "$M/var/log/alternatives.log" "$M/var/log/apt/"*.log "$M/var/log/apt/eipp.log.xz"
}

step_cudart() {
	: "${M:?step_cudart runs inside with_overlay}"
	sources_nonfree
	apt_lists
	apt_install $CUDART_PKGS
	apt_clean
}
build_cudart() {
	layer_done "cudart$SFX" && return
	log "layer cudart$SFX: $CUDART_PKGS"
	with_overlay "cudart$SFX" "base$SFX" step_cudart
	finish_layer "cudart$SFX" "RUN /bin/sh -c sed -i 's/^Components: main\$/Components: main contrib non-free/' /etc/apt/sources.list.d/debian.sources && apt-get update && apt-get install -y --no-install-recommends $CUDART_PKGS && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin # buildkit"
}

step_runtime() {
	: "${M:?step_runtime runs inside with_overlay}"
	apt_lists
	apt_install $RUNTIME_PKGS
	apt_clean
}
build_runtime() {
	layer_done "runtime$SFX" && return
	log "layer runtime$SFX: $RUNTIME_PKGS"
	with_overlay "runtime$SFX" "base$SFX cudart$SFX" step_runtime
	finish_layer "runtime$SFX" "RUN /bin/sh -c apt-get update && apt-get install -y --no-install-recommends $RUNTIME_PKGS && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin # buildkit"
}

step_devel() {
	apt_lists
	# The driver's libraries are the host's: stand-ins satisfy the toolkit's
	# dependency on them (an image must never carry libcuda.so.1).
	in_chroot dpkg -i /mnt/kiln-standin/libcuda1.deb /mnt/kiln-standin/libnvidia-ml1.deb
	apt_install $DEVEL_PKGS
	apt_clean
}
build_devel() {
	layer_done "devel$SFX" && return
	log "layer devel$SFX: $DEVEL_PKGS"
	with_overlay "devel$SFX" "base$SFX cudart$SFX runtime$SFX" step_devel
	finish_layer "devel$SFX" "RUN /bin/sh -c dpkg -i /tmp/driver-standins/*.deb && apt-get update && apt-get install -y --no-install-recommends $DEVEL_PKGS && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin # buildkit"
}

# standin_cudnn: a generated libcudnn.so.9 with every symbol torch imports
# from cuDNN 9 (versioned @libcudnn.so.9; libtorch_cuda is linked BIND_NOW,
# so each must resolve at load). Every function returns an error status but
# cudnnGetVersion (90000): "import torch" works, cuDNN kernels do not.
# cuDNN itself is not available offline. It is named a stand-in in its file
# name's neighbour README and in the kiln_standin_cudnn symbol.
standin_cudnn() {
	local libdir=$M/usr/lib/x86_64-linux-gnu syms rest w
	# Written by hand below; every other symbol returns an error status.
	local own="kiln_standin_cudnn cudnnGetVersion cudnnGetCudartVersion cudnnGetMaxDeviceVersion cudnnGetErrorString cudnnGetProperty"
	w=$(mktemp -d)
	syms=$(find "$M/usr/lib" -name 'libtorch_cuda.so*' -type f -o -name 'libtorch_python.so*' -type f |
		xargs -r nm -D --undefined-only 2>/dev/null | awk '$2 ~ /@libcudnn\.so\.9$/ {sub(/@.*/, "", $2); print $2}' | sort -u)
	[[ -n $syms ]] || die "no @libcudnn.so.9 symbols found in libtorch_cuda/libtorch_python"
	rest=$(printf '%s\n' $syms | grep -vxF -f <(printf '%s\n' $own) || true)
	{
		echo '/* kiln stand-in for cuDNN 9: generated by scripts/fixtures.sh; not NVIDIA code. */'
		echo 'typedef unsigned long size_t;'
		echo 'const char kiln_standin_cudnn[] = "kiln stand-in libcudnn.so.9: no kernels";'
		echo 'size_t cudnnGetVersion(void) { return 90000; }'
		echo 'size_t cudnnGetCudartVersion(void) { return 12040; }'
		echo 'size_t cudnnGetMaxDeviceVersion(void) { return 900; }'
		echo 'const char *cudnnGetErrorString(int s) { (void)s; return kiln_standin_cudnn; }'
		echo '/* MAJOR_VERSION 0, MINOR_VERSION 1, PATCH_LEVEL 2: 9.0.0, as cudnnGetVersion */'
		echo 'int cudnnGetProperty(int type, int *value) { if (!value || type < 0 || type > 2) return 2000; *value = type == 0 ? 9 : 0; return 0; }'
		for f in $rest; do
			echo "int $f(void) { return 1001; /* CUDNN_STATUS_NOT_INITIALIZED */ }"
		done
	} >"$w/standin.c"
	{
		echo 'libcudnn.so.9 {'
		echo '  global:'
		for f in $own $rest; do echo "    $f;"; done
		echo '  local: *;'
		echo '};'
	} >"$w/standin.map"
	gcc -shared -fPIC -O2 -nostdlib -ffreestanding -fno-asynchronous-unwind-tables \
		-Wl,-soname,libcudnn.so.9 -Wl,--version-script="$w/standin.map" -Wl,--build-id=sha1 \
		-o "$libdir/libcudnn.so.9.0.0" "$w/standin.c"
	strip --strip-unneeded "$libdir/libcudnn.so.9.0.0"
	ln -sfn libcudnn.so.9.0.0 "$libdir/libcudnn.so.9"
	mkdir -p "$M/usr/share/doc/nvidia-cudnn"
	printf 'libcudnn.so.9 here is a kiln stand-in (%s functions, each returning an error but cudnnGetVersion);\nnot NVIDIA cuDNN, which is not available offline. Generated by scripts/fixtures.sh.\n' \
		"$(echo "$syms" | wc -l)" >"$M/usr/share/doc/nvidia-cudnn/README.kiln-standin"
	log "stand-in libcudnn.so.9: $(echo "$syms" | wc -l) symbols"
	rm -rf "$w"
}

step_torch() {
	# The naive way: update + install, no cleanup. The .debs land in
	# /var/cache/apt/archives inside the layer exactly as apt would leave them
	# (copied from the download cache so reruns stay offline).
	apt_lists
	in_chroot dpkg -i /mnt/kiln-standin/nvidia-cudnn.deb
	local f
	for f in $(fetch_debs $TORCH_PKGS); do cp "$DEBS/$f" "$M/var/cache/apt/archives/$f"; done
	in_chroot apt-get install -y -q --no-install-recommends $TORCH_PKGS
	standin_cudnn
	# nvidia-cuda-toolkit (devel layer) may pull in glx-alternative-nvidia,
	# which points the glx alternative at /usr/lib/nvidia: without the host
	# driver's GL libraries there, libGL.so.1 is not found. What a user
	# writing this Dockerfile does after the first "import torch" fails:
	if [[ -d $M/usr/lib/mesa-diverted ]]; then
		in_chroot update-alternatives --set glx /usr/lib/mesa-diverted || true
	fi
	in_chroot ldconfig
	# The naive image keeps apt's lists and archives (planted waste) but not
	# wall-clock logs: the fixture must be the same bytes on every machine.
	rm -f "$M/var/log/dpkg.log" "$M/var/log/alternatives.log" "$M/var/log/apt/"*.log "$M/var/log/apt/eipp.log.xz" "$M/var/cache/ldconfig/aux-cache"
}
build_torch() {
	layer_done torch && return
	log "layer torch: $TORCH_PKGS (naive apt install, stand-in cuDNN)"
	with_overlay torch "base cudart runtime devel" step_torch
	finish_layer torch "RUN /bin/sh -c apt-get update && dpkg -i /tmp/nvidia-cudnn-standin.deb && apt-get install -y $TORCH_PKGS && ldconfig # buildkit"
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
	with_overlay pycache "base cudart runtime devel torch pipcache appsrc" step_pycache
	finish_layer pycache "RUN /bin/sh -c python3 -m compileall -q /app # buildkit"
}

step_cleanup() {
	in_chroot /bin/sh -c 'rm -rf /var/lib/apt/lists/* && rm -rf /var/log/apt && mkdir -p /var/log/apt'
}
build_cleanup() {
	layer_done cleanup && return
	log "layer cleanup (rm -rf /var/lib/apt/lists/*)"
	with_overlay cleanup "base cudart runtime devel torch pipcache appsrc pycache" step_cleanup
	finish_layer cleanup "RUN /bin/sh -c rm -rf /var/lib/apt/lists/* && rm -rf /var/log/apt && mkdir -p /var/log/apt # buildkit"
}

# build_wheels: the PyPI-shaped wheel set (torch 2.6.0+cu124, nvidia-*-cu12,
# torch's Python dependencies) repackaged from the torch layer's real Debian
# binaries, into $OUT/wheels (SHA256SUMS lists them). Rebuilt only when the
# torch layer (or the generator's revision) changes.
WHEELS_REV=2 # 2: RUNPATHs relative to each file (functorch/_C found ../torch/lib)
build_wheels() {
	local want="torch=$(cat "$LAYERS/torch/id") rev=$WHEELS_REV" w=$OUT/wheels
	if [[ -f $w/SHA256SUMS && $(cat "$w/.params" 2>/dev/null) == "$want" ]]; then return; fi
	command -v patchelf >/dev/null || {
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf
	}
	need_rootfs base cudart runtime devel torch
	log "wheels: torch $want (repackaged from Debian's binaries)"
	local lowerdir="" l r=$CACHE/wheels-root
	for l in base cudart runtime devel torch; do lowerdir="$LAYERS/$l/rootfs${lowerdir:+:$lowerdir}"; done
	safe_rm "$r"
	mkdir -p "$r" "$OUT"
	mnt "$r" -t overlay overlay -o "lowerdir=$lowerdir"
	safe_rm "$w.tmp"
	(cd "$ROOT" && "$GO" run ./internal/fixturegen wheels -root "$r" -out "$w.tmp" -epoch "$SOURCE_DATE_EPOCH")
	cleanup_mounts
	rmdir "$r"
	printf '%s\n' "$want" >"$w.tmp/.params"
	safe_rm "$w"
	mv "$w.tmp" "$w"
	log "wheels: $(du -sh "$w" | cut -f1) in $w"
}

# build_python: stand-ins of python-build-standalone's CPython download
# that are real interpreters: Debian's CPython 3.13 (trixie) and 3.11
# (bookworm), made relocatable and laid out, named and checksummed as the
# real install_only_stripped archives are (../shared/reference/real-bases.md
# §5.1): python/bin/python3.X with python3 and python links to it,
# python/lib/python3.X (the stdlib, pip in site-packages with its own CA
# bundle), the libraries its extension modules need beside it in python/lib
# (found through RUNPATH $ORIGIN, as the real builds link theirs in), and
# no EXTERNALLY-MANAGED marker. Each is named as kiln's data names that
# minor version's build (PY_STANDINS: minor, suite, name version), so a
# mirror serves it at the real URL; the interpreter inside is Debian's
# 3.X.y and needs that suite's glibc or newer (the real builds need 2.17).
# $OUT/python/RELEASE/SHA256SUMS lists them in python-build-standalone's
# format. Beside them, python/wheels holds Debian's own setuptools, wheel
# and packaging wheels (real ones: a source build needs them; the catalog's
# stand-in index has only stand-ins of PyPI's). Rebuilt when PYTHON_REV
# changes.
PYTHON_REV=5
PY_STANDINS=("3.13 trixie 3.13.15" "3.11 bookworm 3.11.16")
PY_STANDIN_RELEASE=20260814
build_python() {
	local want="${PY_STANDINS[*]} release=$PY_STANDIN_RELEASE rev=$PYTHON_REV"
	local dir=$OUT/python/$PY_STANDIN_RELEASE spec
	if [[ -f $dir/SHA256SUMS && -f $OUT/python/wheels/SHA256SUMS && $(cat "$OUT/python/.params" 2>/dev/null) == "$want" ]]; then return; fi
	safe_rm "$dir.tmp"
	mkdir -p "$dir.tmp"
	for spec in "${PY_STANDINS[@]}"; do
		# shellcheck disable=SC2086 # spec is "minor suite version"
		build_python_one $spec "$dir.tmp"
	done
	(cd "$dir.tmp" && sha256sum -- cpython-*.tar.gz | sort -k2 >SHA256SUMS)
	safe_rm "$dir"
	mv "$dir.tmp" "$dir"
	printf '%s\n' "$want" >"$OUT/python/.params"
}

# suite_tarball SUITE: debootstrap's minbase tarball of SUITE, cached.
suite_tarball() {
	local tgz=$CACHE/debootstrap/$1-minbase.tgz
	if [[ ! -f $tgz ]]; then
		log "debootstrap --make-tarball $1 (download)"
		mkdir -p "$CACHE/debootstrap"
		rm -rf "$CACHE/debootstrap/mk-$1"
		debootstrap --variant=minbase --make-tarball="$tgz.tmp.tgz" "$1" "$CACHE/debootstrap/mk-$1" "$MIRROR" >&2
		rm -rf "$CACHE/debootstrap/mk-$1"
		mv "$tgz.tmp.tgz" "$tgz"
	fi
	echo "$tgz"
}

# build_python_one MINOR SUITE NAME_VERSION OUTDIR
build_python_one() {
	local V=$1 suite=$2 namever=$3 outdir=$4 tgz r inside extra=()
	local name=cpython-$namever+$PY_STANDIN_RELEASE-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz
	# apt_lists caches per suite (it reads LISTS).
	local LISTS=$CACHE/apt-lists-$suite
	tgz=$(suite_tarball "$suite")
	r=$CACHE/python-root-$suite
	log "python: a relocatable CPython $V from $suite's packages, as $name"
	safe_rm "$r"
	mkdir -p "$r"
	debootstrap --variant=minbase --unpack-tarball="$tgz" "$suite" "$r" "$MIRROR" >/dev/null
	M=$r
	chroot_plumbing
	apt_lists
	[[ $suite == "$SUITE" ]] && extra=(python3-setuptools-whl python3-wheel-whl python3-packaging-whl)
	apt_install "python$V" python3-pip-whl ca-certificates patchelf "${extra[@]}"
	in_chroot env V="$V" EPOCH="$SOURCE_DATE_EPOCH" NAME="$name" bash -euo pipefail -s <<'CHROOT'
P=/opt/python
rm -rf "$P" /out && mkdir -p "$P/bin" "$P/lib" "$P/include" /out
cp -a "/usr/bin/python$V" "$P/bin/python$V"
ln -s "python$V" "$P/bin/python3"
ln -s "python$V" "$P/bin/python"
cp -a "/usr/lib/python$V" "$P/lib/python$V"
rm -f "$P/lib/python$V/EXTERNALLY-MANAGED"
find "$P" -name __pycache__ -prune -exec rm -rf {} +
# Debian's patches put packages in dist-packages (pip's default under
# local/lib): the real builds use lib/pythonX.Y/site-packages. Debian's
# site module is frozen into the interpreter, so the site directory is
# added by a sitecustomize (Debian's is a link to /etc) and pip's scheme
# is upstream's posix_prefix.
rm -f "$P/lib/python$V/sitecustomize.py"
cat >"$P/lib/python$V/sitecustomize.py" <<'PY'
# kiln stand-in: python-build-standalone's lib/pythonX.Y/site-packages
# (Debian's site module, frozen into this interpreter, knows dist-packages).
import os, site, sys
site.addsitedir(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
PY
if find "$P" -type l -lname '/*' | grep .; then echo "links out of the tree (above)" >&2; exit 1; fi
sc=$P/lib/python$V/sysconfig/__init__.py
[[ -f $sc ]] || sc=$P/lib/python$V/sysconfig.py
sed -i "s/'DEB_PYTHON_INSTALL_LAYOUT', 'posix_local')/'DEB_PYTHON_INSTALL_LAYOUT', 'posix_prefix')/; s/prefix_scheme = 'posix_local'/prefix_scheme = 'posix_prefix'/" "$sc"
! grep -q "prefix_scheme = 'posix_local'" "$sc" || { echo "$sc: Debian's scheme still posix_local" >&2; exit 1; }
mkdir -p "$P/lib/python$V/site-packages"
# What the interpreter and its extension modules link, but glibc's own.
for f in $(ldd "$P/bin/python$V" "$P"/lib/python$V/lib-dynload/*.so | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
	case ${f##*/} in libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libutil.so.* | ld-linux*) continue ;; esac
	cp -L "$f" "$P/lib/${f##*/}"
done
patchelf --set-rpath '$ORIGIN/../lib' "$P/bin/python$V"
for so in "$P"/lib/python$V/lib-dynload/*.so; do patchelf --set-rpath '$ORIGIN/../..' "$so"; done
for so in "$P"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$so"; done
whl=$(ls /usr/share/python-wheels/pip-*.whl | head -1)
"$P/bin/python3" "$whl/pip" install -q --no-index --no-compile --disable-pip-version-check "$whl"
# pip's own CA bundle, as pip's vendored certifi ships it and the real
# builds carry it: Debian's pip points at /etc/ssl/certs, which a base
# without ca-certificates lacks (pip then fails before any download).
cert=$P/lib/python$V/site-packages/pip/_vendor/certifi
cp /etc/ssl/certs/ca-certificates.crt "$cert/cacert.pem"
cat >"$cert/core.py" <<'PY'
"""kiln stand-in: the CA bundle beside this file, as pip's vendored certifi
ships it (Debian's pip wheel points at /etc/ssl/certs instead)."""
import os


def where():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "cacert.pem")


def contents():
    with open(where(), encoding="ascii") as f:
        return f.read()
PY
# pip's scripts start the interpreter beside them, wherever the tree is.
for f in "$P"/bin/pip*; do
	cat >"$f.new" <<TRAMP
#!/bin/sh
'''exec' "\$(dirname -- "\$(realpath -- "\$0")")"/'python$V' "\$0" "\$@"
' '''
TRAMP
	tail -n +2 "$f" >>"$f.new"
	chmod 755 "$f.new" && mv "$f.new" "$f"
done
find "$P" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$P"/lib/python$V/site-packages/*.dist-info/direct_url.json
# It runs, from /opt/python and from anywhere else, on glibc alone.
check() {
	env -i "$1/bin/python3" -c 'import sys, ssl, sqlite3, ctypes, lzma, bz2, zlib, decimal, uuid, readline, json
assert sys.prefix == sys.argv[1], (sys.prefix, sys.argv[1])
assert sys.argv[1] + "/lib/python%d.%d/site-packages" % sys.version_info[:2] in sys.path, sys.path' "$1"
	env -i "$1/bin/pip3" --version | grep -qF "from $1/lib/python$V/site-packages/pip (python $V)"
	env -i "$1/bin/python3" -c 'import sys, os; from pip._vendor import certifi; w = certifi.where(); assert w.startswith(sys.prefix + "/") and os.path.getsize(w) > 1000, w'
	env -i "$1/bin/python3" -m pip download --help >/dev/null
	env -i "$1/bin/python3" -c 'import sysconfig, sys; p = sysconfig.get_paths()["purelib"]; assert p == sys.argv[1], p' "$1/lib/python$V/site-packages"
}
check "$P"
mkdir -p /tmp/reloc && cp -a "$P" /tmp/reloc/ && check /tmp/reloc/python && rm -rf /tmp/reloc
find "$P" -name __pycache__ -prune -exec rm -rf {} +
cd /opt
tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu -cf - python | gzip -n -9 >"/out/$NAME"
"$P/bin/python3" -c 'import sys; print(sys.version.split()[0])' >/out/inside-version
CHROOT
	cleanup_mounts
	mv "$r/out/$name" "$outdir/"
	inside=$(cat "$r/out/inside-version")
	printf '%s\n' "$name: a kiln stand-in, Debian $suite's CPython $inside, relocatable, under the name kiln's data gives CPython $namever. Made by scripts/fixtures.sh." >>"$outdir/README.kiln-standin"
	if ((${#extra[@]})); then
		safe_rm "$OUT/python/wheels"
		mkdir -p "$OUT/python/wheels"
		cp "$r"/usr/share/python-wheels/setuptools-*.whl "$r"/usr/share/python-wheels/wheel-*.whl "$r"/usr/share/python-wheels/packaging-*.whl "$OUT/python/wheels/"
		(cd "$OUT/python/wheels" && sha256sum -- *.whl >SHA256SUMS)
	fi
	safe_rm "$r"
	log "python: CPython $inside, $(du -h "$outdir/$name" | cut -f1)"
}

# prune_debs: the .deb downloads are only needed to rebuild a layer, and
# apt fetches them again in a minute; the disk is the binding limit.
# KILN_FIXTURE_KEEP_DEBS=1 keeps them.
prune_debs() {
	[[ ${KILN_FIXTURE_KEEP_DEBS:-0} == 1 ]] && return
	find "$DEBS" -maxdepth 1 -name '*.deb' -delete
	rm -rf "$DEBS/partial"
}

# dedupe_registry: store each blob once. The local registry's filesystem
# storage holds its own copy of every pushed blob; where the fixtures' blob
# cache has the same digest (verified by size and the file's sha256 name),
# the registry's file becomes a hard link to it. Only files the registry
# wrote are replaced, each by rename, so a reader sees old or new, both the
# same bytes.
dedupe_registry() {
	local data=${KILN_REGISTRY_DIR:-/var/lib/kiln-registry}/docker/registry/v2/blobs/sha256 f hex dst saved=0
	[[ -d $data ]] || return 0
	for f in "$CACHE/blobs/sha256/"*; do
		hex=$(basename "$f")
		[[ ${#hex} == 64 ]] || continue
		dst=$data/${hex:0:2}/$hex/data
		[[ -f $dst ]] || continue
		[[ $(stat -c %d:%i "$f") == $(stat -c %d:%i "$dst") ]] && continue
		[[ $(stat -c %d "$f") == $(stat -c %d "$dst") && $(stat -c %s "$f") == $(stat -c %s "$dst") ]] || continue
		ln "$f" "$dst.kiln-link" && mv -f "$dst.kiln-link" "$dst"
		saved=$((saved + $(stat -c %s "$f")))
	done
	((saved)) && log "registry: $((saved >> 20)) MiB of blobs now hard links to the blob cache (stored once)"
	return 0
}

# bookworm_chain: the base chain again on Debian 12 (bookworm), for the
# stand-in of nvidia/cuda:11.8.0-*-debian12: bookworm's own minbase (whose
# apt installs Python 3.11, as NVIDIA's Debian 12 images' does) and
# bookworm's CUDA 11.8.89 from non-free (real cudart, runtime libraries,
# nvcc 11.8). Built by `fixtures.sh bookworm` (make catalog), and kept up
# to date by every later run once it exists; the other fixtures never use
# it. Without it, fixturegen makes that stand-in from trixie's layers.
bookworm_chain() {
	local SUITE=bookworm SFX=-bookworm RECIPE=3-bookworm LISTS=$CACHE/apt-lists-bookworm-nonfree i j
	local CUDART_PKGS="libcudart11.0"
	local RUNTIME_PKGS="libcublas11 libcublaslt11 libcufft10 libcurand10 libcusolver11 libcusparse11 libnvrtc11.2 libnvtoolsext1"
	local DEVEL_PKGS="nvidia-cuda-dev nvidia-cuda-toolkit"
	for ((i = 0; i < ${#BOOKWORM_CHAIN[@]}; i++)); do
		if ! layer_done "${BOOKWORM_CHAIN[i]}"; then
			for ((j = i + 1; j < ${#BOOKWORM_CHAIN[@]}; j++)); do safe_rm "$LAYERS/${BOOKWORM_CHAIN[j]}"; done
		fi
	done
	build_base
	build_cudart
	build_runtime
	build_devel
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
	local chain=("${CHAIN[@]}") i j
	for ((i = 0; i < ${#chain[@]}; i++)); do
		if ! layer_done "${chain[i]}"; then
			for ((j = i + 1; j < ${#chain[@]}; j++)); do
				[[ ${chain[j]} == pipcache || ${chain[j]} == appsrc ]] && continue
				safe_rm "$LAYERS/${chain[j]}"
			done
		fi
	done
	standin_debs
	if [[ ${1:-} == python ]]; then
		build_base
		build_python
		return
	fi
	build_base
	build_cudart
	if [[ ${1:-} == smoke ]]; then
		# The first steps of a fresh machine's build, from whatever cache
		# was given (CI gives an empty one): host tools, debootstrap, an
		# overlay chroot with apt, the stand-in packages.
		in_layer_has() { [[ -e $LAYERS/$1/rootfs/$2 ]] || die "smoke: layer $1 lacks /$2"; }
		in_layer_has base usr/bin/apt-get
		in_layer_has cudart usr/lib/x86_64-linux-gnu/libcudart.so.12
		[[ -f $STANDIN/libcuda1.deb ]] || die "smoke: no stand-in libcuda1.deb"
		log "smoke: base and cudart layers built from $CACHE in $((SECONDS - t0))s"
		return
	fi
	build_runtime
	build_devel
	build_torch
	build_pipcache
	build_appsrc
	build_pycache
	build_cleanup
	if [[ ${1:-} == bookworm || -f $LAYERS/base-bookworm/id ]]; then
		bookworm_chain
	fi
	log "layers ready ($((SECONDS - t0))s)"
	build_wheels
	build_python
	prune_debs
	[[ ${1:-} == layers ]] && return

	local reg=${KILN_REGISTRY:-}
	if [[ -z $reg ]]; then
		if curl -fsS -m 2 -o /dev/null http://127.0.0.1:5000/v2/; then reg=127.0.0.1:5000; else reg=none; fi
	fi
	[[ $reg == none ]] && reg=""
	log "assembling images into $OUT${reg:+ and pushing to $reg}"
	local rc=0
	# Built, then run: `go run` exits 1 whatever the program's status, and
	# the rebuild below needs fixturegen's own 3.
	"$GO" build -o "$CACHE/fixturegen.bin" ./internal/fixturegen || die "building fixturegen"
	"$CACHE/fixturegen.bin" build -layers "$LAYERS" -out "$OUT" \
		-blob-cache "$CACHE/blobs" -epoch "$SOURCE_DATE_EPOCH" ${reg:+-registry "$reg"} \
		-archives="$([[ ${1:-} == archive ]] && echo true || echo false)" || rc=$?
	# 3: a blob is not cached and its layer's directory was pruned.
	((rc == 3)) && need_rootfs "${CHAIN[@]}"
	((rc == 0)) || die "fixturegen build failed (exit $rc)"
	prune_rootfs
	rm -f "$OUT/runtime.tar" # retired: no test reads it
	[[ -n $reg ]] && dedupe_registry
	log "done in $((SECONDS - t0))s"
	df -h "$CACHE" | sed 's/^/[fixtures] /' >&2
}
ARGS=("$@")
main "$@"
