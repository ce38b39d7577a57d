//go:build !linux

package wal

// fdatasync falls back to a full fsync where fdatasync(2) is not
// available: stronger, and only slower.
func fdatasync(o *osFile) error { return o.f.Sync() }

// allocate writes zeros where fallocate(2) is not available.
func allocate(o *osFile, size int64) error {
	old, err := o.Size()
	if err != nil || old >= size {
		return err
	}
	return writeZeros(o, old, size)
}
