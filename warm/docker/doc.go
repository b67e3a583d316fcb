// Package docker is kiln warm's docker target: a warm.Loader for a Docker
// engine, whose unit is the image (no per-blob presence or ingest API).
// It plans what the engine lacks, opens a stage (an OCI layout, see
// DefaultStage) that the warm engine fills with its own fetch, and
// streams a verified docker-archive from the stage into docker load.
package docker
