package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
)

// A controller takes a lease, moves two joints in one saga and commits. A
// refused step moved nothing and the saga goes on; a failed step unwound
// the saga and says how cleanly; anything else leaves the outcome unknown,
// so the saga is aborted, which puts back whatever moved.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{
		Broker: "tcp://127.0.0.1:1883",
		Agent:  "planner", // also its MQTT username and client id
		Device: "arm1",
		// The password `saga-supervisor run` generated for planner on its
		// first start (the embedded broker lets in only known logins).
		PasswordFile: "saga-data/mqtt/credentials/planner",
		TTL:          2 * time.Second, // heartbeats every 500ms, in the background
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx) // bye: ends the lease, unwinding any saga left open

	saga, err := c.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []struct {
		actuator string
		value    float64
	}{{"shoulder", 60}, {"elbow", 300}, {"elbow", 90}} {
		res, err := saga.Step(ctx, m.actuator, m.value, client.WithDeadline(200*time.Millisecond))
		var ce *client.Error
		switch {
		case err == nil:
			fmt.Printf("step %d: %s %v -> %v\n", res.Step, m.actuator, res.Prior, res.Value)
		case client.IsRefusal(err):
			fmt.Println("refused, nothing moved:", err) // e.g. LIMIT_MAX; go on
		case errors.As(err, &ce) && ce.Report != nil:
			log.Fatalf("step failed; saga unwound (%s): %v", ce.Report.Verdict, err)
		default:
			report, aerr := saga.Abort(ctx, "step outcome unknown")
			log.Fatalf("%v; abort: %v, report %+v", err, aerr, report)
		}
	}
	if err := saga.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// A controller that must not act once its lease is gone watches Lost.
func ExampleClient_Lost() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Agent: "planner", Device: "arm1", TTL: 500 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	go func() {
		<-c.Lost()
		if errors.Is(c.Err(), client.ErrLeaseLost) {
			log.Printf("lease lost (%v): the supervisor has unwound our sagas; replan and dial again", c.Err())
		}
	}()
	// ... Begin, Step, Commit ...
}

// An operator's tool needs no lease to halt the robot.
func ExampleClient_Halt() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Options{Agent: "estop-panel", Device: "arm1", NoLease: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Halt(ctx, "person in the cell"); err != nil {
		log.Fatal(err)
	}
}
