package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
)

// A small arm on a battery. The clock is moved by hand so the output is
// exact; a real run leaves WithClock out and passes a file path to OpenWorld
// so a later process can see where the arm was left.
func Example() {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	w, err := sim.OpenWorld("", sim.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer w.Close()

	base := w.Servo("base", 0, 90)         // 90°/s
	shoulder := w.Servo("shoulder", 0, 45) // a heavier joint, slower
	elbow := w.Servo("elbow", 90, 30)
	gripper := w.Servo("gripper", 0, 0) // no slew limit: snaps shut
	battery := w.Supply("battery", 8.4)

	ctx := context.Background()
	base.Set(ctx, 120)
	shoulder.Set(ctx, 60)
	elbow.Set(ctx, 30)
	gripper.Set(ctx, 35)
	battery.Script([]sim.ScriptPoint{{At: 2 * time.Second, Volts: 7.2}}) // sag under load

	now = now.Add(time.Second)
	fmt.Print(w.Format())

	// A fault halts the elbow mid-move: it stays where it is.
	elbow.Halt()
	at, _ := elbow.ReadBack(ctx)
	fmt.Printf("elbow halted at %.0f°\n", at)

	// Output:
	// base      servo   90.0°   commanded 120.0°
	// battery   supply  7.80 V  set 8.40 V
	// elbow     servo   60.0°   commanded 30.0°
	// gripper   servo   35.0°
	// shoulder  servo   45.0°   commanded 60.0°
	// elbow halted at 60°
}
