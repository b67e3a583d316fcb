package builder

import (
	"fmt"

	"github.com/kiln-build/kiln/registry"
)

// NormalizeRef is the one place kiln writes an image reference out in
// full before handing it to BuildKit: a Docker Hub short name
// ("nvidia/cuda:13.0.0-base-ubuntu24.04", "ubuntu") gains its registry
// and, for official images, library/ ("docker.io/nvidia/cuda:…",
// "docker.io/library/ubuntu:latest"). BuildKit's resolver does not do this
// for every call (ResolveImageConfig takes "nvidia" for a registry host),
// so nothing kiln hands on may rely on it. A name without tag or digest
// gets :latest, as BuildKit's own llb.Image does.
//
// The rule is registry.NormalizeName, the one every kiln verb reads
// references by.
func NormalizeRef(ref string) (string, error) {
	n, err := registry.NormalizeName(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %v", ref, err)
	}
	return n, nil
}
