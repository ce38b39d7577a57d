//go:build !unix

package nodelay

// setNoDelay leaves the option to Go's net package, which sets it on every
// TCP connection.
func setNoDelay(uintptr) error { return nil }
