// Package targets opens the host image store a --target names: it sits
// above warm's engine and its adapters (warm/containerd, warm/ocilayout,
// warm/docker), which import the engine for its Set and roles, so the
// engine cannot open them itself.
package targets
