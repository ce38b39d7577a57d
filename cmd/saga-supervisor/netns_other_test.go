//go:build !linux

package main

import "testing"

// inOwnNetns skips: network namespaces are Linux's.
func inOwnNetns(t *testing.T) bool {
	t.Skip("no network namespaces on this system")
	return false
}
