package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
)

type scriptedVolts struct {
	v   float64
	at  time.Time
	err error
}

func (s *scriptedVolts) Volts() (float64, time.Time, error) { return s.v, s.at, s.err }

func TestSuppliesTripClearAndStale(t *testing.T) {
	t0 := time.Now()
	src := &scriptedVolts{v: 7.4, at: t0}
	s := NewSupplies()
	err := s.Add(limits.SupplySpec{Name: "battery", MinVolts: 6.4, MaxVolts: 8.6, HysteresisVolts: 0.2,
		Debounce: 100 * time.Millisecond, StaleAfter: time.Second, Action: limits.Halt}, src)
	if err != nil {
		t.Fatal(err)
	}
	if evs := s.Poll(t0); len(evs) != 0 {
		t.Fatalf("events on a good supply: %v", evs)
	}
	// A sag shorter than the debounce does not trip.
	src.v, src.at = 6.0, t0.Add(10*time.Millisecond)
	s.Poll(src.at)
	src.v, src.at = 7.4, t0.Add(50*time.Millisecond)
	if evs := s.Poll(src.at); len(evs) != 0 {
		t.Fatalf("a brief dip tripped: %v", evs)
	}
	// A sag that lasts trips once, with the supply's action.
	src.v, src.at = 6.0, t0.Add(100*time.Millisecond)
	s.Poll(src.at)
	src.at = t0.Add(250 * time.Millisecond)
	evs := s.Poll(src.at)
	if len(evs) != 1 || !evs[0].Tripped || evs[0].Action != limits.Halt || evs[0].State.Code != limits.SupplyLow {
		t.Fatalf("sustained sag: %+v", evs)
	}
	if evs := s.Poll(src.at.Add(time.Millisecond)); len(evs) != 0 {
		t.Fatalf("a trip reported twice: %v", evs)
	}
	// Clearing needs the hysteresis band for the debounce time.
	src.v, src.at = 6.5, t0.Add(400*time.Millisecond)
	s.Poll(src.at)
	src.at = t0.Add(600 * time.Millisecond)
	if evs := s.Poll(src.at); len(evs) != 0 {
		t.Fatalf("cleared inside the hysteresis band: %v", evs)
	}
	src.v, src.at = 7.0, t0.Add(700*time.Millisecond)
	s.Poll(src.at)
	src.at = t0.Add(900 * time.Millisecond)
	if evs := s.Poll(src.at); len(evs) != 1 || evs[0].Tripped {
		t.Fatalf("no clear after the band held: %v", evs)
	}
	// A sensor that stops answering goes stale: the gate refuses.
	src.err = errors.New("i2c: no ack")
	st, ok := s.SupplyState("battery", t0.Add(3*time.Second))
	if !ok || !st.Stale || limits.CheckSupply(limits.Spec{Supply: "battery"}, st) == limits.OK {
		t.Fatalf("unreadable supply state %+v", st)
	}
	if sts := s.States(t0.Add(3 * time.Second)); sts[0].ReadError == "" {
		t.Error("read error not reported")
	}
	if _, ok := s.SupplyState("rail", t0); ok {
		t.Error("unknown supply reported")
	}
}

func TestWarnSupplyDoesNotRefuse(t *testing.T) {
	t0 := time.Now()
	src := &scriptedVolts{v: 6.0, at: t0}
	s := NewSupplies()
	s.Add(limits.SupplySpec{Name: "aux", MinVolts: 6.4, MaxVolts: 8.6, StaleAfter: time.Second, Action: limits.Warn}, src)
	evs := s.Poll(t0)
	if len(evs) != 1 || !evs[0].Tripped {
		t.Fatalf("a warn rail below its minimum did not trip: %v", evs)
	}
	st, _ := s.SupplyState("aux", t0)
	if c := limits.CheckSupply(limits.Spec{Supply: "aux"}, st); c != limits.OK {
		t.Fatalf("a warn-only trip refused motion: %s", c)
	}
	if c := limits.CheckSupply(limits.Spec{Supply: "aux", SupplyMinVolts: 6.2}, st); c != limits.SupplyLow {
		t.Fatalf("the actuator's own bound no longer applies: %s", c)
	}
	src.err = errors.New("gone")
	if st, _ := s.SupplyState("aux", t0.Add(2*time.Second)); limits.CheckSupply(limits.Spec{Supply: "aux"}, st) == limits.OK {
		t.Fatal("a stale warn rail allowed motion")
	}
}
