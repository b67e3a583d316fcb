#!/usr/bin/env bash
# make demo: on a fresh Debian machine (as root), set up only what the demo
# shows (packages, a local registry, the CUDA fixture images built from
# Debian's packages, buildkitd), then run kiln's main jobs on them:
#   1. analyze the naive image people build today (kiln's first output,
#      right after the fixtures: nothing else is built before it);
#   2. build the offline stack (debian13-cu124: CUDA 12.4.1, real CUDA torch
#      2.6.0+cu124 from a PyPI-shaped index) as a two-stage image, with SLSA
#      provenance, an SBOM and a signature, and gate it with the runtime
#      rules (and the naive one: exit 3);
#   3. slim the naive app image without a rebuild: runtime-strict policy, the
#      weights moved into a volume artifact, probed through BuildKit;
#   4. pull the weights volume, verify it, print how to mount it;
#   5. host check: the slim image against described GPU hosts (no GPU here);
#   6. warm the slim image and its weights into a local containerd (its own
#      root and socket), verifying its signature before any layer, and
#      start it with ctr run: no pull, weights mounted;
#   7. supply chain: what a verifier reads from the build of step 2, and
#      kiln warm --verify-key refusing an unsigned copy and a tampered one
#      before fetching a layer.
# The demo shows kiln, not its test bench: the naive-vs-kiln build benchmark
# is make bench-build, the real cosign's cross-check of kiln's signatures is
# in make integration (integration/sign_test.go), neither runs here.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$(go env GOPATH)/bin:$PATH"
export KILN_FIXTURES="${KILN_FIXTURES:-${KILN_FIXTURE_CACHE:-/var/cache/kiln-fixtures}/out}"
export KILN_REGISTRY="${KILN_REGISTRY:-127.0.0.1:5000}"
REG=$KILN_REGISTRY
T0=$SECONDS

hr() { printf '\n\033[1m== %s\033[0m  (%dm%02ds)\n\n' "$*" $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60)); }

hr "setup: packages, registry, the fixture images"
bash scripts/install-deps.sh demo
bash scripts/registry.sh start
bash scripts/fixtures.sh
make -s build
NAIVE="$REG/kiln/naive-app:cu124"

hr "1. kiln analyze: the naive CUDA app image ($NAIVE)"
bin/kiln analyze --top 5 "$NAIVE"

hr "setup: buildkitd, a signing key, the fixtures' wheel index"
bash scripts/buildkitd.sh start
eval "$(bash scripts/buildkitd.sh env)"
# A signing key, as openssl writes it (PKCS#8), and its public half.
KEYS=/var/tmp/kiln-demo-keys
rm -rf "$KEYS" && mkdir -p "$KEYS"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$KEYS/key.pem" 2>/dev/null
openssl pkey -in "$KEYS/key.pem" -pubout -out "$KEYS/pub.pem"
W=/var/tmp/kiln-demo-build
rm -rf "$W" && mkdir -p "$W/app"
go build -o "$W/kiln-wheels" ./builder/internal/wheelserve/kiln-wheels
"$W/kiln-wheels" -addr 127.0.0.1:${KILN_BENCH_INDEX_PORT:-39518} -torch-mb 64 -dir "$KILN_FIXTURES/wheels" >"$W/index.url" &
WPID=$!
trap 'kill $WPID 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do [[ -s $W/index.url ]] && break; sleep 0.1; done

hr "2. kiln build: the offline stack, two-stage, with provenance, SBOM and signature"
bin/kiln recipes show debian13-cu124 | sed 's/^/    /'
echo
bin/kiln recipes init debian13-cu124 -o "$W/kiln.yaml" >/dev/null
echo "print('v1')" >"$W/app/main.py"
BUILT="$REG/kiln-demo/built:v1"
bin/kiln build "$W/kiln.yaml" --mirror "$REG" --wheel-index "$(cat "$W/index.url")" --progress quiet \
	--push "$BUILT" --compression zstd --provenance max --sbom --sign-key "$KEYS/key.pem"
echo
echo "kiln analyze --ci testdata/rules/runtime.yaml on both:"
if bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$BUILT" | tail -n 3; then
	echo "kiln's image: runtime rules pass"
else
	echo "kiln's image: runtime rules broken (exit $?)"
fi
set +e
bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$NAIVE" | sed -n '/^CI /,$p'
echo "naive image: exit ${PIPESTATUS[0]} (3 = a --ci rule broken)"
set -e
kill $WPID 2>/dev/null || true
# BuildKit's cache of the build is not needed again: the disk is the
# binding limit on a fresh machine. The image is in the registry.
buildctl --addr "$BUILDKIT_HOST" prune --all >/dev/null

hr "3. kiln slim: the naive app image, rewritten without a rebuild (weights moved out, probed)"
SLIM="$REG/kiln-demo/app:slim"
WREF="$REG/kiln-demo/app-weights:v1"
bin/kiln slim "$REG/kiln/naive-app:cu124" --to "$SLIM" --policy runtime-strict \
	--weights-to "$WREF" --progress none --sbom --sign-key "$KEYS/key.pem" \
	--probe "python3 -c 'import torch, ctypes; ctypes.CDLL(\"libtorch_cuda.so.2.6\"); print(\"probe: torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.ones(3).sum().item())'"
echo
bin/kiln analyze --progress none --ci testdata/rules/runtime.yaml "$SLIM" | tail -n 2

hr "4. kiln weights: pull the volume the slim image points to, verify it, mount it"
VOL=/var/tmp/kiln-demo-weights
rm -rf "$VOL"
bin/kiln weights pull "$SLIM" --into "$VOL"
bin/kiln weights verify "$VOL"
bin/kiln weights run-args "$SLIM" --volume "$VOL" --format docker

hr "5. kiln host check: will the slim image run on these hosts?"
for h in h200-570 h100-535 b200-580 rtx5090-575 geforce-470; do
	set +e
	bin/kiln host check --host-info "testdata/hostcheck/hosts/$h.json" --image "$SLIM" --progress none | sed -n '1,2p;/^FAIL  \|^WARN  /p;$p'
	echo "  -> exit ${PIPESTATUS[0]} (1 = an item failed)"
	set -e
	echo
done

hr "6. kiln warm: the slim image and its weights into a local containerd, then ctr run with no pull"
# A containerd of the demo's own (root, state, socket): the host's, if any,
# is left alone.
CW=/var/tmp/kiln-demo-containerd
IMG="$SLIM"
demo_containerd_stop() {
	if [ -f "$CW/pid" ]; then kill "$(cat "$CW/pid")" 2>/dev/null || true; sleep 1; fi
	grep -o " $CW/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
	rm -rf "$CW"
}
demo_containerd_stop
mkdir -p "$CW"
cat >"$CW/config.toml" <<TOML
version = 2
root = "$CW/root"
state = "$CW/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$CW/c.sock"
[ttrpc]
  address = "$CW/c.sock.ttrpc"
TOML
containerd --config "$CW/config.toml" >"$CW/containerd.log" 2>&1 &
echo $! >"$CW/pid"
trap 'kill $WPID 2>/dev/null || true; demo_containerd_stop' EXIT
for _ in $(seq 100); do [ -S "$CW/c.sock" ] && break; sleep 0.1; done
bin/kiln warm "$IMG" --target "containerd:$CW/c.sock" --unpack --weights-into "$CW/weights" --ready-file "$CW/ready" --verify-key "$KEYS/pub.pem"
echo
ctr --address "$CW/c.sock" images check
echo
echo "ready marker: $(cat "$CW/ready")"
# ctr run never pulls: it fails on an image that is not there. It finds
# the warmed one complete and unpacked, and starts at once.
# The weights volume's model directory is mounted read-only where the image
# expects it (its dev.kiln.weights.mount label: /app/models for the fixture
# app); kiln's bookkeeping beside it stays out of the container: the listing
# shows the model files alone.
time ctr --address "$CW/c.sock" run --rm \
	--mount "type=bind,src=$CW/weights/model,dst=/app/models,options=rbind:ro" "$IMG" kiln-demo \
	python3 -c 'import os, torch; print("container started from the warmed image, no pull: torch", torch.__version__, "| weights:", sorted(os.listdir("/app/models")))'

hr "7. supply chain: what a verifier reads, and verify before ready"
# host check's signature item (other items may fail on this described host).
{ bin/kiln host check --host-info testdata/hostcheck/hosts/h200-570.json --image "$BUILT" --verify-key "$KEYS/pub.pem" --progress none || true; } | grep -i -A4 'signature' | head -n 6 || true
echo
# What a verifier reads: the provenance's kiln parameters and the SBOM's
# torch and CUDA entries, straight from the registry.
ATT=$(crane manifest "$BUILT" | python3 -c 'import json,sys; print([m["digest"] for m in json.load(sys.stdin)["manifests"] if m.get("annotations",{}).get("vnd.docker.reference.type")=="attestation-manifest"][0])')
for L in $(crane manifest "$REG/kiln-demo/built@$ATT" | python3 -c 'import json,sys; [print(l["digest"]) for l in json.load(sys.stdin)["layers"]]'); do
	crane blob "$REG/kiln-demo/built@$L" | python3 -c '
import json, sys
st = json.load(sys.stdin); p = st["predicate"]
if st["predicateType"].startswith("https://slsa.dev/provenance"):
    print("provenance (%s) about sha256:%s...: %d LLB steps, started %s" % (st["predicateType"], st["subject"][0]["digest"]["sha256"][:12],
          len(p["buildDefinition"]["internalParameters"]["buildConfig"]["llbDefinition"]), p["runDetails"]["metadata"]["startedOn"]))
elif st["predicateType"] == "https://kiln.dev/attestations/build-parameters/v1":
    print("kiln build parameters:", ", ".join("%s=%s" % (k, v) for k, v in sorted(p["parameters"].items())))
elif st["predicateType"] == "https://cyclonedx.org/bom":
    comps = p.get("components", [])
    key = [c["name"] + " " + c.get("version", "") for c in comps if c["name"].lower() in ("torch", "flash_attn", "flash-attn", "bitsandbytes", "nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12", "libcudart")]
    print("sbom (CycloneDX 1.6) about sha256:%s...: %d components, among them %s" % (st["subject"][0]["digest"]["sha256"][:12], len(comps), "; ".join(sorted(key))))
'
done
echo
# An unsigned copy (another repository: signatures live beside the image)
# and a tampered one (a label changed: a new digest no key signed).
crane copy "$SLIM" "$REG/kiln-demo/app-copy:slim" 2>/dev/null
crane mutate "$REG/kiln-demo/app@$(crane digest --platform linux/amd64 "$SLIM")" --label tampered=1 -t "$REG/kiln-demo/app:tampered" >/dev/null 2>&1
before=$(ctr --address "$CW/c.sock" content ls -q | wc -l)
for ref in "$REG/kiln-demo/app-copy:slim" "$REG/kiln-demo/app:tampered"; do
	set +e
	bin/kiln warm "$ref" --target "containerd:$CW/c.sock" --verify-key "$KEYS/pub.pem" --progress none 2>&1 | tail -n 2
	echo "  -> exit ${PIPESTATUS[0]} (4 = refused: no signature by a trusted key)"
	set -e
done
after=$(ctr --address "$CW/c.sock" content ls -q | wc -l)
echo "containerd's content store: $before blobs before, $after after (nothing fetched for the refused images)"
hr "done"
