#!/usr/bin/env bash
# Installs mkfs.erofs with tar mode (erofs-utils 1.7 or later), which
# kiln's --format erofs runs, and fsck.erofs, which checks its images. Debian bookworm ships 1.5 (no --tar) and
# trixie's 1.8 binary needs trixie's libc, so this builds trixie's source
# package (fetched and verified by apt from Debian's archive, with a
# private list directory: the machine's apt sources are left alone) into
# /usr/local. Idempotent: a machine whose mkfs.erofs has --tar does
# nothing.
set -euo pipefail

# fsck.erofs (the same package) checks every image kiln writes, and
# every native EROFS layer warm hands the kernel: both must be there.
if command -v mkfs.erofs >/dev/null && mkfs.erofs --help 2>&1 | grep -q -- '--tar=' &&
	command -v fsck.erofs >/dev/null; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
build_deps=(build-essential autoconf automake libtool pkg-config uuid-dev zlib1g-dev
	liblz4-dev liblzma-dev libzstd-dev libdeflate-dev libxxhash-dev)
missing=()
for p in "${build_deps[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

work=$(mktemp -d /var/tmp/kiln-erofs-utils.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work" -o "Dir::Cache::Archives=$work/archives")
apt-get "${apt_opts[@]}" update -q
# trixie's current version (1.8.6 when this was written): a stable
# release's point updates replace the old source, so none is pinned.
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only erofs-utils)
tar -C "$work" -xf "$work"/erofs-utils_*.orig.tar.*
cd "$work"/erofs-utils-*/
./autogen.sh >/dev/null
./configure -q --prefix=/usr/local --disable-fuse --enable-lz4 --enable-lzma \
	--with-libzstd --with-libdeflate >/dev/null
make -s -j"$(nproc)" >/dev/null
make -s install >/dev/null
test -x /usr/local/bin/fsck.erofs || { echo "erofs-utils: make install put no fsck.erofs in /usr/local/bin" >&2; exit 1; }
echo "erofs-utils: installed $(/usr/local/bin/mkfs.erofs --version | head -1)" >&2
