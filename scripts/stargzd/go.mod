module kiln.local/containerd-stargz-grpc

// Built by scripts/stargz.sh, which writes the requirements in a throwaway
// copy; this file keeps main.go out of kiln's module.

go 1.25
