#!/bin/sh
# Regenerates the real fat binaries in this directory with the fixture
# devel image's nvcc, through kiln's buildkitd (scripts/buildkitd.sh):
#   sh testdata/hostcheck/fatbin/gen.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
eval "$(bash "$here/../../../scripts/buildkitd.sh" env)"
buildctl=${BUILDCTL:-$(command -v buildctl || echo /var/cache/kiln-buildkit/v0.34.2/buildctl)}
"$buildctl" --addr "$BUILDKIT_HOST" build --frontend dockerfile.v0 \
  --local context="$here" --local dockerfile="$here" \
  --allow network.host --output type=local,dest="$here"
ls -l "$here"/*.so
