// Package fleet warms many hosts at once: agentless over SSH to bare GPU
// hosts, or by emitting Kubernetes objects that run kiln on each node.
//
// Over SSH, fleet does no warming of its own. It copies the kiln binary to
// each host when the host lacks that exact build (compared by sha256, placed
// atomically under ~/.cache/kiln/bin), then drives the host's `kiln warm
// --json` and reads its report. A host that can reach the registry pulls
// itself (mode pull); a host that cannot (mode push) is asked what it is
// missing with `kiln warm --dry-run --json`, and only those blobs are fetched
// here, verified, and streamed to it over the SSH session as a tar that
// unpacks into a staging OCI layout, which the host's kiln then warms from.
//
// Hosts run in parallel with a bound; each host's failure (refused host
// key, dropped connection, failed warm) is isolated in its Result and never
// stops the others.
//
// For Kubernetes, fleet prints a DaemonSet (or Job) whose pods run `kiln
// warm` against the node's containerd (namespace k8s.io); the cluster does
// the scheduling, fleet builds no scheduler.
package fleet
