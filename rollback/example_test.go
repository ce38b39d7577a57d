package rollback_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// A saga of two steps on a simulated arm; the third step faults, and the
// engine unwinds the first two, last first.
func Example() {
	dir, _ := os.MkdirTemp("", "example-journal-")
	defer os.RemoveAll(dir)
	journal, _ := wal.Open(dir, wal.Options{})
	defer journal.Close()
	world := sim.NewMemoryWorld()
	defer world.Close()

	gripper := world.Servo("gripper", 0, 0)
	gripper.FailOnNth(1)
	servo := limits.Spec{Min: 0, Max: 180}
	reg, _ := actuators.NewRegistry(
		&actuators.Actuator{Name: "shoulder", Kind: actuators.Servo, Limits: servo, Initial: 10, Driver: world.Servo("shoulder", 10, 0)},
		&actuators.Actuator{Name: "elbow", Kind: actuators.Servo, Limits: servo, Initial: 20, Driver: world.Servo("elbow", 20, 0)},
		&actuators.Actuator{Name: "gripper", Kind: actuators.Servo, Limits: servo, Driver: gripper},
	)
	engine, _ := rollback.New(rollback.Config{Journal: journal, Actuators: reg})

	agent := rollback.Owner{Agent: "planner", Lease: "L1", Epoch: 1}
	saga, _ := engine.Begin(agent)
	engine.Step(saga, agent, rollback.Command{ID: "1", Actuator: "shoulder", Value: 60})
	engine.Step(saga, agent, rollback.Command{ID: "2", Actuator: "elbow", Value: 90})
	_, err := engine.Step(saga, agent, rollback.Command{ID: "3", Actuator: "elbow", Value: 400})
	fmt.Println(rollback.CodeOf(err)) // refused: nothing moved, the saga goes on
	_, err = engine.Step(saga, agent, rollback.Command{ID: "4", Actuator: "gripper", Value: 30})
	var e *rollback.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, "→", e.Report.Verdict())
		for _, s := range e.Report.Steps {
			fmt.Printf("step %d %s back to %g: %s\n", s.Step, s.Actuator, s.Prior, s.Bucket)
		}
	}
	// Output:
	// LIMIT_MAX
	// STEP_FAILED → clean
	// step 3 gripper back to 0: compensated
	// step 2 elbow back to 20: compensated
	// step 1 shoulder back to 10: compensated
}
