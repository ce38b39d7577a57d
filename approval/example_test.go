package approval_test

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/approval"
)

// Two operators approve one step, each with their own key; the supervisor
// checks the two tokens as the step's approvals.
func ExampleVerifier_Step() {
	alice := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	bob := ed25519.NewKeyFromSeed(append(make([]byte, ed25519.SeedSize-1), 1))
	now := time.Now()
	step := approval.Claims{Device: "arm1", Actuator: "valve", Value: 1, Saga: 7, NotBefore: now, NotAfter: now.Add(30 * time.Second)}
	a, _ := approval.Sign(alice, step)
	b, _ := approval.Sign(bob, step)

	v, _ := approval.NewVerifier([]ed25519.PublicKey{alice.Public().(ed25519.PublicKey), bob.Public().(ed25519.PublicKey)}, 0)
	claims, err := v.Step([]string{a, b}, now, "arm1", "valve", 1, 7)
	fmt.Println(len(claims), err)

	again, _ := approval.Sign(alice, step) // alice signs a second time
	_, err = v.Step([]string{a, again}, now, "arm1", "valve", 1, 7)
	fmt.Println(approval.CodeOf(err))
	// Output:
	// 2 <nil>
	// APPROVAL_DUPLICATE_KEY
}
