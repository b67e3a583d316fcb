#!/usr/bin/env bash
# Benchmark: kiln analyze vs dive on the same realistic app image, in one run.
#   bash bench/analyze.sh [DOCKER_ARCHIVE] [OCI_REF]
# Prints wall time and peak RSS of each tool, the ratios, both tools'
# efficiency and wasted bytes side by side, and kiln on the oci: source
# against the time that merely decompressing the layers takes.
# Needs the fixtures (make fixtures) and dive (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:/usr/local/go/bin:$PATH"
FIX="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
ARCHIVE="${1:-$FIX/app.tar}"
# docker save output is written on demand (8.2 GB): scripts/fixtures.sh archive.
[[ -n ${1:-} || -f $FIX/app.tar ]] || bash scripts/fixtures.sh archive
OCI="${2:-oci:$FIX/oci:app}"
RUNS="${RUNS:-3}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

command -v dive >/dev/null || GOFLAGS= go install github.com/wagoodman/dive/cmd/dive@latest
go build -o "$out/kiln" ./cmd/kiln
go build -o "$out/decompress" ./bench/decompress

# measure NAME CMD...: best-of-RUNS wall seconds and max RSS (KiB), from GNU time.
measure() {
	local name=$1; shift
	local best="" rss=0
	for i in $(seq "$RUNS"); do
		/usr/bin/time -f '%e %M' -o "$out/t" "$@" >"$out/$name.out" 2>"$out/$name.err" || true
		read -r wall kib <"$out/t"
		if [ -z "$best" ] || awk "BEGIN{exit !($wall < $best)}"; then best=$wall; fi
		[ "$kib" -gt "$rss" ] && rss=$kib
	done
	echo "$best $rss"
}

echo "image: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)), best of $RUNS runs, page cache warm" >&2
cat "$ARCHIVE" >/dev/null

read -r kw kr < <(measure kiln "$out/kiln" analyze --json --progress none "docker-archive:$ARCHIVE")
cp "$out/kiln.out" "$out/kiln.json"
read -r knw knr < <(measure kiln-noverify "$out/kiln" analyze --json --no-verify --progress none "docker-archive:$ARCHIVE")
read -r dw dr < <(measure dive dive --ci --source docker-archive "$ARCHIVE")
read -r ow orss < <(measure kiln-oci "$out/kiln" analyze --json --progress none "$OCI")
read -r xw xr < <(measure decompress "$out/decompress" "$OCI")

k_eff=$(grep -m1 '"efficiency"' "$out/kiln.json" | tr -dc '0-9.')
k_waste=$(grep -m1 '"wasted_bytes"' <(sed -n '/"waste"/,$p' "$out/kiln.json") | tr -dc '0-9')
k_dwaste=$(grep -m1 '"dive_wasted_bytes"' "$out/kiln.json" | tr -dc '0-9')
d_eff=$(grep -i -m1 'efficiency' "$out/dive.out" | sed 's/.*: *//')
d_waste=$(grep -i -m1 'wastedBytes' "$out/dive.out" | sed 's/.*: *//')

ratio() { awk "BEGIN{printf \"%.2f\", $1/$2}"; }
printf '\n%-34s %10s %12s\n' "tool (same input)" "wall s" "peak RSS"
printf '%-34s %10s %9d MiB\n' "kiln analyze (docker-archive)" "$kw" $((kr/1024))
printf '%-34s %10s %9d MiB\n' "kiln analyze --no-verify" "$knw" $((knr/1024))
printf '%-34s %10s %9d MiB\n' "dive --ci (docker-archive)" "$dw" $((dr/1024))
printf '%-34s %10s %9d MiB\n' "kiln analyze ($OCI)" "$ow" $((orss/1024))
printf '%-34s %10s %9d MiB\n' "decompress only ($OCI)" "$xw" $((xr/1024))
echo
echo "dive / kiln wall time (docker-archive):           $(ratio "$dw" "$kw")x  (kiln faster when > 1)"
echo "dive / kiln --no-verify wall time:                $(ratio "$dw" "$knw")x"
echo "dive / kiln peak RSS:                             $(ratio "$dr" "$kr")x"
echo "kiln oci: / decompress-only wall time:            $(ratio "$ow" "$xw")x  (target <= 1.2)"
echo
printf '%-22s %-22s %-22s\n' "" "kiln" "dive"
printf '%-22s %-22s %-22s\n' "efficiency" "$k_eff" "$d_eff"
printf '%-22s %-22s %-22s\n' "wasted bytes" "$k_waste (superseded)" "$d_waste"
printf '%-22s %-22s\n' "dive-style waste" "$k_dwaste"
