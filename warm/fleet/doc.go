// Package fleet warms many hosts at once: agentless over SSH to bare GPU
// hosts, or by emitting Kubernetes objects that run kiln on each node.
//
// Over SSH, fleet does no warming of its own. It copies the kiln binary to
// each host when the host lacks that exact build (compared by sha256, placed
// atomically under ~/.cache/kiln/bin), then drives the host's `kiln warm
// --json` and reads its report. A host that can reach the registry pulls
// itself (mode pull); a host that cannot (mode push) gets a loopback
// listener forwarded over the SSH connection (what `ssh -R` does) that
// serves the registry API as a proxy to the real registry, reached from
// here with this machine's credentials (push.go): the host's own kiln warm
// reads through it with --mirror REGISTRY=127.0.0.1:PORT, verifies every
// digest as always, and records its images under their real names.
// Credentials never reach the host. Its report is warm.Report, the schema
// kiln warm writes.
//
// Hosts run in parallel with a bound; each host's failure (refused host
// key, dropped connection, failed warm) is isolated in its Result and never
// stops the others.
//
// For Kubernetes, fleet prints a DaemonSet (or Job) whose pods run `kiln
// warm` against the node's containerd (namespace k8s.io); the cluster does
// the scheduling, fleet builds no scheduler.
package fleet
