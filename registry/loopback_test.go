package registry

import "testing"

// TestIsLoopback: kiln's one loopback rule (plain HTTP, BuildKit's
// registry.insecure, a host's own mirror), for every way a host is
// written.
func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:5000": true, "127.0.0.1": true, "127.0.0.1:5000": true,
		"127.1.2.3:80": true, "[::1]": true, "[::1]:5000": true, "::1": true,
		"registry.example.com": false, "10.0.0.1:5000": false, "[2001:db8::1]:5000": false,
		"localhost.example.com": false, "": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}
