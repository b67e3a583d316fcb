#!/usr/bin/env bash
# Counts the `duplicates` pairs in kiln's production code: the tracked tree
# without tests and test support (*_test.go, integration/, bench/,
# scripts/, and the packages only tests, bench and the demo import:
# internal/testimage, internal/testdaemon, internal/fixturegen,
# internal/cdxschema, internal/spdxcheck, layers/blob/blobtest,
# cmd/kiln/internal/cmdtest, warm/internal/warmtest,
# recipes/refresh/refreshtest, and builder/internal/wheelserve, the
# stand-in PyPI index). Issue 26 tracks this number.
#
#   bash scripts/duplicates-prod.sh [REV] [duplicates options...]
#
# REV (default: the working tree) is a commit to count instead. The
# pairs are listed as `duplicates` lists them, most shared first.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=
if [[ ${1:-} != "" && ${1:-} != --* ]]; then
	rev=$1
	shift
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kiln-dups.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prod() {
	grep -v -E '_test\.go$|^(internal/(testimage|testdaemon|fixturegen|cdxschema|spdxcheck)|layers/blob/blobtest|cmd/kiln/internal/cmdtest|warm/internal/warmtest|recipes/refresh/refreshtest|builder/internal/wheelserve|integration|bench|scripts)/'
}
if [[ -n $rev ]]; then
	git archive "$rev" | tar -x -C "$tmp"
	(cd "$tmp" && find . -type f | sed 's#^\./##' | prod >"$tmp/.keep")
	(cd "$tmp" && find . -type f | sed 's#^\./##' | grep -v -x -F -f .keep | grep -v '^\.keep$' | xargs -r rm -f)
	rm -f "$tmp/.keep"
else
	git ls-files | prod | while IFS= read -r f; do
		[[ -f $f ]] || continue
		mkdir -p "$tmp/$(dirname "$f")"
		cp "$f" "$tmp/$f"
	done
fi
duplicates --repo "$tmp" --most 200 --seconds 200 "$@"
