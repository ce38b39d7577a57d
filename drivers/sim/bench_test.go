package sim

import (
	"context"
	"testing"
)

// BenchmarkServoSet measures one Set, which fronts every simulated actuator
// command: in memory it should cost about as much as a lock and a clock
// read, and with a file one positioned write more.
func BenchmarkServoSet(b *testing.B) {
	run := func(b *testing.B, w *World) {
		s := w.Servo("base", 0, 60)
		ctx := context.Background()
		v := 0.0
		b.ReportAllocs()
		for b.Loop() {
			v = 90 - v // alternate, so every Set is a real change
			if err := s.Set(ctx, v); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("memory", func(b *testing.B) {
		w := NewMemoryWorld()
		defer w.Close()
		run(b, w)
	})
	b.Run("file", func(b *testing.B) {
		w, err := OpenWorld(b.TempDir() + "/world.sim")
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		run(b, w)
	})
}
