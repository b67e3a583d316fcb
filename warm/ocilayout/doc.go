// Package ocilayout is kiln warm's oci: target: a warm.Store over an OCI
// image layout directory on the host (blobs verified before their atomic
// rename, resumable partial files, one index.json entry per warmed
// image). It is also the docker target's stage (warm.Stage): the engine
// fills it, the Docker adapter streams the layers out of it.
package ocilayout
