# bench/lib/containerd.sh: a private containerd with an empty root, for the
# cold-start benchmarks (sourced; needs $W, a scratch directory, and root).
#   ctrd_start   start it (socket $W/c/c.sock), CRI off
#   ctrd_stop    stop it, unmount what it mounted, remove its root and $W/weights
#   ctrd_restart stop and start the running one again, its root kept
#   CTR ARGS     ctr against it
#   now          wall clock in seconds
#   drop_caches  sync and drop the page cache (best effort), so each run reads cold
ctrd_start() {
	# ctrd_start [CONTAINERD_DIR]: the containerd on PATH, or the one in DIR
	local bin=containerd
	[ -n "${1:-}" ] && bin=$1/containerd
	rm -rf "$W/c"
	mkdir -p "$W/c"
	cat >"$W/c/config.toml" <<TOML
version = 2
root = "$W/c/root"
state = "$W/c/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$W/c/c.sock"
[ttrpc]
  address = "$W/c/c.sock.ttrpc"
TOML
	PATH="${1:-}${1:+:}$PATH" "$bin" --config "$W/c/config.toml" >"$W/c.log" 2>&1 &
	echo $! >"$W/pid"
	for _ in $(seq 100); do [ -S "$W/c/c.sock" ] && break; sleep 0.1; done
}
ctrd_stop() {
	if [ -f "$W/pid" ]; then kill "$(cat "$W/pid")" 2>/dev/null || true; sleep 1; rm -f "$W/pid"; fi
	# The snapshotter unmounts its FUSE layers as it exits, and its
	# background fetch may still be writing its cache: wait for it to go
	# (15 s, then SIGKILL) before anything under $W/c is removed.
	if [ -f "$W/stargz.pid" ]; then
		local p i
		p=$(cat "$W/stargz.pid")
		kill "$p" 2>/dev/null || true
		for i in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		rm -f "$W/stargz.pid"
	fi
	grep -o " $W/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$W/c" "$W/weights"
}
CTR() { ctr --address "$W/c/c.sock" "$@"; }
# ctrd_restart: the running containerd stopped and started again with its
# config, root and content kept: a row that must not carry what earlier
# rows left in the daemon (its memory and caches, its goroutines) still
# finds what they fetched and unpacked.
ctrd_restart() {
	local pid bin i
	pid=$(cat "$W/pid")
	bin=$(readlink "/proc/$pid/exe")
	kill "$pid"
	for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	rm -f "$W/c/c.sock"
	PATH="$(dirname "$bin"):$PATH" "$bin" --config "$W/c/config.toml" >>"$W/c.log" 2>&1 &
	echo $! >"$W/pid"
	for _ in $(seq 100); do [ -S "$W/c/c.sock" ] && break; sleep 0.1; done
}
now() { date +%s.%N; }
drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}

# The lazy-pull variant: containerd 2.x (scripts/containerd2.sh, $CTRD2
# its directory) with the stargz snapshotter (scripts/stargz.sh, $STARGZ
# its binary) as a proxy plugin that the transfer service unpacks to, so a
# plain `CTR2 images pull --snapshotter stargz` mounts eStargz layers
# lazily (and falls back to a full fetch and unpack for any other layer).
# $STARGZ_MIRROR, when set (host:port), is where the snapshotter fetches
# the registry's blobs from instead (plain HTTP): a counting proxy.
#   ctrd_start_stargz   start both (sockets under $W/c), CRI off
#   ctrd_stop           stops both (kill by pid), unmounts, removes $W/c
#   CTR2 ARGS           ctr 2.x against it
ctrd_start_stargz() {
	rm -rf "$W/c"
	mkdir -p "$W/c/stargz"
	local reg=${REG:-127.0.0.1:5000} mirror=${STARGZ_MIRROR:-${REG:-127.0.0.1:5000}}
	cat >"$W/c/stargz.json" <<JSON
{"resolver": {"host": {"$reg": {"mirrors": [{"host": "$mirror", "insecure": true}]}}}}
JSON
	"$STARGZ" --address "$W/c/stargz.sock" --root "$W/c/stargz" --config "$W/c/stargz.json" --log-level info >"$W/stargz.log" 2>&1 &
	echo $! >"$W/stargz.pid"
	for _ in $(seq 100); do [ -S "$W/c/stargz.sock" ] && break; sleep 0.1; done
	cat >"$W/c/config.toml" <<TOML
version = 2
root = "$W/c/root"
state = "$W/c/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$W/c/c.sock"
[ttrpc]
  address = "$W/c/c.sock.ttrpc"
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux"
  snapshotter = "stargz"
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux"
  snapshotter = "overlayfs"
[proxy_plugins]
  [proxy_plugins.stargz]
    type = "snapshot"
    address = "$W/c/stargz.sock"
  [proxy_plugins.stargz.exports]
    root = "$W/c/stargz/"
    enable_remote_snapshot_annotations = "true"
TOML
	PATH="$CTRD2:$PATH" "$CTRD2/containerd" --config "$W/c/config.toml" >"$W/c.log" 2>&1 &
	echo $! >"$W/pid"
	for _ in $(seq 100); do [ -S "$W/c/c.sock" ] && break; sleep 0.1; done
}
CTR2() { "$CTRD2/ctr" --address "$W/c/c.sock" "$@"; }

# The EROFS variant: containerd 2.x ($CTRD2) with the EROFS snapshotter
# and differ as scripts/containerd2.sh erofs-config writes them (mkfs.erofs
# on PATH: scripts/erofs-utils.sh), CRI off.
#   ctrd_start_erofs    start it (socket $W/c/c.sock); ctrd_stop stops it
#   ctrd_start2         the same containerd 2.x as it comes (overlayfs, no
#                       EROFS config): the naive pull on that runtime
ctrd_start2() { ctrd_start "$CTRD2"; }
ctrd_start_erofs() {
	rm -rf "$W/c"
	mkdir -p "$W/c"
	cat >"$W/c/config.toml" <<TOML
version = 2
root = "$W/c/root"
state = "$W/c/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$W/c/c.sock"
[ttrpc]
  address = "$W/c/c.sock.ttrpc"
TOML
	bash scripts/containerd2.sh erofs-config >>"$W/c/config.toml"
	PATH="$CTRD2:$PATH" "$CTRD2/containerd" --config "$W/c/config.toml" >"$W/c.log" 2>&1 &
	echo $! >"$W/pid"
	for _ in $(seq 100); do [ -S "$W/c/c.sock" ] && break; sleep 0.1; done
}

# cpu_now [PID...]: CPU seconds (user + system) spent so far by this
# shell's finished children (kiln, ctr, docker: what a row runs in the
# foreground) and by each PID with its descendants, their finished
# children included (the daemons: containerd's unpack, the mkfs.erofs
# its EROFS differ runs, dockerd and its containerd). Not counted: the
# container itself (runc's shim daemonizes away from containerd).
cpu_now() {
	python3 - "$$" "$@" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
def stat(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    f = s[s.rindex(")") + 2:].split()
    return int(f[1]), [int(x) for x in f[11:15]]  # ppid; utime stime cutime cstime
procs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        st = stat(p)
        if st:
            procs[int(p)] = st
kids = {}
for p, (pp, _) in procs.items():
    kids.setdefault(pp, []).append(p)
shell = int(sys.argv[1])
total = sum(procs[shell][1][2:]) if shell in procs else 0
seen = set()
stack = [int(a) for a in sys.argv[2:] if a.isdigit()]
while stack:
    p = stack.pop()
    if p in seen or p not in procs:
        continue
    seen.add(p)
    total += sum(procs[p][1])
    stack.extend(kids.get(p, []))
print(f"{total / tick:.2f}")
PY
}
ctrd_pid() { cat "$W/pid" 2>/dev/null || true; }
