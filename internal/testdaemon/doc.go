// Package testdaemon starts real container engines for one test: Debian's
// containerd and docker.io dockerd, each with its own root, state and
// socket under the test's temporary directories, stopped (and anything
// they left mounted unmounted) when the test ends.
//
// A daemon that cannot run here (not root, binary missing, it does not
// start) skips the test, unless one of the environment variables that
// require it is 1, in which case the test fails: KILN_REQUIRE_CONTAINERD
// for containerd, KILN_REQUIRE_DOCKER for dockerd, plus any a caller adds
// with RequireEnv (hostcheck uses KILN_REQUIRE_ENGINES, the integration
// tests KILN_REQUIRE_FIXTURES). CI sets them so a missing engine cannot
// pass as a skip.
//
// KILN_CONTAINERD_BIN runs another containerd binary instead of the one on
// PATH (and KILN_CTR_BIN, default the ctr next to it, as its client): e.g.
// the containerd 2.x that scripts/containerd2.sh builds, so the same tests
// cover its content store. The version 2 config these tests write is read
// by containerd 1.6 and, migrated, by 2.x.
package testdaemon
