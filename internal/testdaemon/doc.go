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
package testdaemon
