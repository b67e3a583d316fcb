// Package integration holds end-to-end tests that run kiln against the
// realistic fixture images (make fixtures) through a real registry, an OCI
// layout and a docker archive. They are built with -tags integration, run
// by `make test` without the race detector (the images are gigabytes), and
// skip when the fixtures are absent unless KILN_REQUIRE_FIXTURES=1.
package integration
