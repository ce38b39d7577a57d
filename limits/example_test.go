package limits_test

import (
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

func ExampleCheck() {
	// A shoulder joint: 0..180°, at most 45° per command and 90°/s.
	shoulder := limits.Spec{Min: 0, Max: 180, MaxStep: 45, MaxRate: 90}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	prev := limits.Prev{Value: 90, At: t0, Known: true}
	now := t0.Add(time.Second) // the caller's clock; limits never reads one

	v := limits.Check(shoulder, prev, 200, now)
	v.Name = "shoulder"
	fmt.Println(v.OK(), v.Code)
	fmt.Println(v.Message())

	v = limits.Check(shoulder, prev, 120, now)
	fmt.Println(v.OK(), v.Value)

	// The same request under the Clamp policy: clamped to max 180, then
	// to one step of 45 from 90. Both values are recorded.
	shoulder.Policy = limits.Clamp
	v = limits.Check(shoulder, prev, 200, now)
	fmt.Println(v.OK(), v.Requested, v.Value, v.Clamped, v.Limit)
	fmt.Println(v.Message())

	// NaN is refused whatever the policy.
	v = limits.Check(shoulder, prev, nan(), now)
	fmt.Println(v.Code)
	// Output:
	// false LIMIT_MAX
	// shoulder: 200 is above max 180
	// true 120
	// true 200 135 true LIMIT_STEP
	// 200 clamped to 135 by max_step 45 from 90
	// NOT_FINITE
}

func ExampleSupply() {
	motor, err := limits.NewSupply(limits.SupplySpec{
		Name: "motor", MinVolts: 11, MaxVolts: 14, HysteresisVolts: 0.5,
		Debounce: 100 * time.Millisecond, StaleAfter: time.Second, Action: limits.Refuse,
	})
	if err != nil {
		panic(err)
	}
	arm := limits.Spec{Min: 0, Max: 180, Supply: "motor"}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond

	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0))) // never read
	motor.Observe(12.2, t0)
	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0)))
	motor.Observe(10.8, t0.Add(10*ms))  // a dip...
	motor.Observe(10.7, t0.Add(110*ms)) // ...lasting the debounce trips
	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0.Add(110*ms))))
	motor.Observe(12.2, t0.Add(120*ms)) // back, but latched
	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0.Add(120*ms))))
	motor.Observe(12.2, t0.Add(220*ms)) // in the band for the debounce: clear
	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0.Add(220*ms))))
	fmt.Printf("%q\n", limits.CheckSupply(arm, motor.State(t0.Add(2*time.Second))))
	// Output:
	// "SUPPLY_UNKNOWN"
	// ""
	// "SUPPLY_LOW"
	// "SUPPLY_TRIPPED"
	// ""
	// "SUPPLY_STALE"
}

func nan() float64 { var zero float64; return zero / zero }
