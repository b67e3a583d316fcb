# shellcheck shell=bash
# Shared by the scripts that build a Go tool for kiln's tests and
# benchmarks (buildkitd.sh, containerd2.sh, stargz.sh, cosign.sh,
# registry3.sh, crictl.sh): source it, define log(), call build_tool.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KILN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="/usr/local/go/bin:$PATH"

# go_pin MOD prints the version of MOD that kiln's go.mod pins.
go_pin() {
	local v
	v=$(cd "$KILN_ROOT" && go list -m -f '{{.Version}}' "$1" 2>/dev/null) || true
	[[ -n $v ]] || { log "go.mod does not pin $1"; exit 1; }
	echo "$v"
}

# build_tool DIR WHAT RECIPE BIN... builds the binaries BIN... into DIR,
# unless each is there already (the cache is per version: DIR names it).
# RECIPE is a function run in a subshell, in a fresh directory under DIR
# ($TOOL_TMP) that is removed however it ends, with a throwaway build cache
# (the binary is cached per version, and its dependencies' compiled
# objects, gigabytes for cosign, are never needed again: the disk is the
# binding limit), CGO_ENABLED=0 and this machine's Go toolchain; it writes
# each BIN into $TOOL_OUT. They are then renamed into DIR one by one: a
# killed or concurrent build never leaves a binary that looks complete.
build_tool() {
	local dir=$1 what=$2 recipe=$3 b have=1
	shift 3
	for b in "$@"; do
		[[ -x $dir/$b ]] || have=0
	done
	if ((have)); then
		log "$what already built in $dir"
		return 0
	fi
	mkdir -p "$dir"
	local tmp
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	log "building $what (takes minutes on a small machine)"
	# A RETURN trap here would outlive this function and fire, with $tmp
	# unset, when later ones return: the subshell owns the cleanup.
	(
		trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
		export TOOL_TMP=$tmp TOOL_OUT=$tmp/.out
		# A build cache of its own (hermetic), or KILN_TOOL_GOCACHE's,
		# shared by the tool builds (CI: the fresh-machine checks rebuild
		# BuildKit from its module every run; compiling it took 4.5 min).
		export GOCACHE=${KILN_TOOL_GOCACHE:-$tmp/.gocache} CGO_ENABLED=0 GOTOOLCHAIN=local
		mkdir -p "$TOOL_OUT"
		cd "$tmp"
		"$recipe" || exit 1
		for b in "$@"; do
			mv "$TOOL_OUT/$b" "$dir/$b" || exit 1
		done
	) || { log "building $what failed"; return 1; }
	log "built $what in $dir"
}

# copy_module MOD VERSION copies MOD's source from the Go module cache
# (the go.mod pin's, downloaded if missing) into the current directory,
# writable, for a recipe that builds its commands with the module's own
# go.mod (GOFLAGS=-mod=mod fetches what the cache lacks).
copy_module() {
	local src
	src=$(cd "$KILN_ROOT" && go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $src && -d $src ]] || { log "module $1@$2 not found in the module cache"; exit 1; }
	cp -r "$src/." .
	chmod -R u+w .
	export GOFLAGS=-mod=mod
}

# go_install ARGS... is `go install -trimpath ARGS...` (PKG@VERSION last)
# into $TOOL_OUT, outside kiln's module, with a throwaway module cache too:
# such a tool's module graph is not kiln's (cosign's alone is ~2.5 GB of
# cloud SDKs), and nothing reads it again.
go_install() {
	(
		export GOMODCACHE=$TOOL_TMP/.gomodcache GOBIN=$TOOL_OUT GOFLAGS=
		cd /
		go install -trimpath "$@"
	)
}
