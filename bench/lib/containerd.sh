# bench/lib/containerd.sh: a private containerd with an empty root, for the
# cold-start benchmarks (sourced; needs $W, a scratch directory, and root).
#   ctrd_start   start it (socket $W/c/c.sock), CRI off
#   ctrd_stop    stop it, unmount what it mounted, remove its root and $W/weights
#   CTR ARGS     ctr against it
#   now          wall clock in seconds
#   drop_caches  sync and drop the page cache (best effort), so each run reads cold
ctrd_start() {
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
	containerd --config "$W/c/config.toml" >"$W/c.log" 2>&1 &
	echo $! >"$W/pid"
	for _ in $(seq 100); do [ -S "$W/c/c.sock" ] && break; sleep 0.1; done
}
ctrd_stop() {
	if [ -f "$W/pid" ]; then kill "$(cat "$W/pid")" 2>/dev/null || true; sleep 1; rm -f "$W/pid"; fi
	grep -o " $W/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$W/c" "$W/weights"
}
CTR() { ctr --address "$W/c/c.sock" "$@"; }
now() { date +%s.%N; }
drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}
