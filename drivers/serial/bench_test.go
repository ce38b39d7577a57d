package serial_test

import (
	"context"
	"testing"
)

// BenchmarkSetRoundTrip: one Set — frame out, SET_ACK back — through the
// Link and the simulated MCU over net.Pipe (no tty, no baud rate: the
// protocol's own cost).
func BenchmarkSetRoundTrip(b *testing.B) {
	r := newRig(b, fourChannels(), fastConfig())
	r.ready()
	servo := r.channel(0)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if err := servo.Set(ctx, float64(i%180)); err != nil {
			b.Fatal(err)
		}
	}
}
