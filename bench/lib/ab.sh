# bench/lib/ab.sh: what the before/after benchmarks share (sourced, from
# the repository's root).
#   ab_kilns W BEFORE AFTER   kiln built at each commit from a clean
#                             checkout: $W/kiln.before, $W/kiln.after (the
#                             checkouts: $W/src.before, $W/src.after)
#   ab_remove W               remove those checkouts
#   wheel_index W KILN_SRC    the stand-in wheel index (kiln-wheels built
#                             from KILN_SRC) on 127.0.0.1:$PORT over
#                             $FIX/wheels, torch $TORCH_MB MB (default 64):
#                             sets WPID and INDEX
#   default_recipe W KILN     $W/ctx: the default recipe (debian13-cu124),
#                             as a user starts from it, and a one-line app
#   ab_header; ab_row NAME F  the result table: a row is the best (lowest)
#                             of F.before and of F.after (a figure a line)
#                             and their ratio (below 1.00: after is less)
ab_kilns() {
	local w=$1 s rev
	for s in before after; do
		rev=$2
		[ $s = after ] && rev=$3
		git worktree add --detach "$w/src.$s" "$rev" >/dev/null 2>&1
		# Static: kiln build runs this binary inside the image to prune GPU code.
		(cd "$w/src.$s" && CGO_ENABLED=0 go build -o "$w/kiln.$s" ./cmd/kiln)
	done
}
ab_remove() {
	local s
	for s in before after; do git worktree remove --force "$1/src.$s" >/dev/null 2>&1 || true; done
}
wheel_index() {
	(cd "$2" && go build -o "$1/kiln-wheels" ./builder/internal/wheelserve/kiln-wheels)
	"$1/kiln-wheels" -addr "127.0.0.1:$PORT" -torch-mb "${TORCH_MB:-64}" -dir "$FIX/wheels" >"$1/index.url" &
	WPID=$!
	for _ in $(seq 1 50); do [[ -s $1/index.url ]] && break; sleep 0.1; done
	INDEX=$(cat "$1/index.url")
}
default_recipe() {
	mkdir -p "$1/ctx/app"
	"$2" recipes init debian13-cu124 -o "$1/ctx/kiln.yaml" >/dev/null
	echo "print('v1')" >"$1/ctx/app/main.py"
}
ab_header() { printf '\n%-42s %9s %9s %8s\n' row before after ratio; }
ab_row() {
	local b a
	b=$(sort -n "$2.before" | head -1)
	a=$(sort -n "$2.after" | head -1)
	printf '%-42s %9.2f %9.2f %8.2f\n' "$1" "$b" "$a" "$(echo "$a / $b" | bc -l)"
}
