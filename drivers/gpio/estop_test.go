package gpio

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpiotest"
)

const debounce = 20 * time.Millisecond

// openEStop opens an e-stop on pin counting OnPress calls. The test closes
// it: a synctest bubble ends only when the watcher has returned.
func openEStop(t *testing.T, cfg EStopConfig, pin *gpiotest.Pin) (*EStop, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	cfg.Pin = pin.Name()
	if cfg.Debounce == 0 {
		cfg.Debounce = debounce
	}
	cfg.OnPress = func() { calls.Add(1) }
	e, err := OpenEStop(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, &calls
}

func wantState(t *testing.T, e *EStop, calls *atomic.Int32, pressed bool, n int32) {
	t.Helper()
	synctest.Wait()
	if got := e.Pressed(); got != pressed {
		t.Fatalf("Pressed() = %t, want %t", got, pressed)
	}
	if err := e.Ready(); pressed != errors.Is(err, ErrPressed) || !pressed && err != nil {
		t.Fatalf("Ready() = %v with pressed %t", err, pressed)
	}
	if got := calls.Load(); got != n {
		t.Fatalf("OnPress called %d times, want %d", got, n)
	}
	if got := e.Presses(); got != int(n) {
		t.Fatalf("Presses() = %d, want %d", got, n)
	}
}

func TestEStopPressCountsAfterDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		e, calls := openEStop(t, EStopConfig{}, pin)
		defer e.Close()
		if l := pin.Read(); l != pgpio.High || pin.Pull() != pgpio.PullUp {
			t.Fatalf("active-low e-stop configured as %s with %s, want pulled up", l, pin.Pull())
		}
		wantState(t, e, calls, false, 0)

		pin.EdgesChan <- pgpio.Low // pressed
		time.Sleep(debounce - time.Millisecond)
		wantState(t, e, calls, false, 0)
		time.Sleep(2 * time.Millisecond)
		wantState(t, e, calls, true, 1)

		// Held down: no second call however long it is held.
		time.Sleep(time.Second)
		wantState(t, e, calls, true, 1)

		pin.EdgesChan <- pgpio.High // released
		time.Sleep(debounce + time.Millisecond)
		wantState(t, e, calls, false, 1)

		pin.EdgesChan <- pgpio.Low // pressed again
		time.Sleep(debounce + time.Millisecond)
		wantState(t, e, calls, true, 2)
	})
}

func TestEStopBounceShorterThanDebounceIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		e, calls := openEStop(t, EStopConfig{}, pin)
		defer e.Close()
		for range 3 {
			pin.EdgesChan <- pgpio.Low
			time.Sleep(debounce / 4)
			pin.EdgesChan <- pgpio.High
			time.Sleep(debounce / 4)
		}
		time.Sleep(time.Second)
		wantState(t, e, calls, false, 0)
	})
}

func TestEStopPollCatchesMissedEdge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		e, calls := openEStop(t, EStopConfig{Poll: 30 * time.Millisecond}, pin)
		defer e.Close()
		setLevel(pin, pgpio.Low) // pressed, but no edge reported
		time.Sleep(30*time.Millisecond + debounce + time.Millisecond)
		wantState(t, e, calls, true, 1)
	})
}

func TestEStopActiveHigh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		e, calls := openEStop(t, EStopConfig{ActiveHigh: true}, pin)
		defer e.Close()
		if pin.Pull() != pgpio.PullDown {
			t.Fatalf("active-high e-stop pulled %s, want down", pin.Pull())
		}
		wantState(t, e, calls, false, 0)
		pin.EdgesChan <- pgpio.High
		time.Sleep(debounce + time.Millisecond)
		wantState(t, e, calls, true, 1)
	})
}

func TestEStopPressedAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		setLevel(pin, pgpio.Low) // held down with an external pull-up
		e, calls := openEStop(t, EStopConfig{Pull: pgpio.Float}, pin)
		defer e.Close()
		wantState(t, e, calls, true, 1)
	})
}

func TestEStopChatteringLineCountsAsPressed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pin := newPin(t, "estop")
		e, calls := openEStop(t, EStopConfig{}, pin)
		defer e.Close()
		// Change every debounce/2 for 15 debounce intervals: never quiet.
		for i := range 30 {
			pin.EdgesChan <- pgpio.Level(i%2 == 1)
			time.Sleep(debounce / 2)
		}
		synctest.Wait()
		if err := e.Ready(); !errors.Is(err, ErrPressed) {
			t.Fatalf("Ready() on a chattering line = %v", err)
		}
		if calls.Load() != 1 {
			t.Fatalf("OnPress called %d times on a chattering line, want 1", calls.Load())
		}
		// It ends released (High): once quiet, the stop is released again.
		time.Sleep(debounce + time.Millisecond)
		wantState(t, e, calls, false, 1)
	})
}

func TestEStopNotReady(t *testing.T) {
	t.Run("missing pin", func(t *testing.T) {
		e, err := OpenEStop(EStopConfig{Pin: "NO_SUCH_PIN_42"})
		if !errors.Is(err, ErrPinNotFound) {
			t.Fatalf("OpenEStop = %v, want ErrPinNotFound", err)
		}
		if !errors.Is(e.Ready(), ErrPinNotFound) || !e.Pressed() {
			t.Fatalf("missing pin: Ready() = %v, Pressed() = %t", e.Ready(), e.Pressed())
		}
		if err := e.Close(); err != nil || !errors.Is(e.Ready(), ErrPinNotFound) {
			t.Fatalf("after Close: %v, Ready() = %v", err, e.Ready())
		}
	})
	t.Run("unconfigurable pin", func(t *testing.T) {
		pin := newPinWithoutEdges(t, "estop")
		e, err := OpenEStop(EStopConfig{Pin: pin.Name()})
		if err == nil || e.Ready() == nil || !e.Pressed() {
			t.Fatalf("OpenEStop = %v; Ready() = %v, Pressed() = %t", err, e.Ready(), e.Pressed())
		}
	})
	t.Run("bad config", func(t *testing.T) {
		pin := newPin(t, "estop")
		e, err := OpenEStop(EStopConfig{Pin: pin.Name(), Debounce: -time.Millisecond})
		if !errors.Is(err, ErrConfig) || !errors.Is(e.Ready(), ErrConfig) {
			t.Fatalf("OpenEStop = %v; Ready() = %v", err, e.Ready())
		}
	})
	t.Run("closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pin := newPin(t, "estop")
			e, calls := openEStop(t, EStopConfig{}, pin)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(e.Ready(), ErrClosed) || !e.Pressed() {
				t.Fatalf("after Close: Ready() = %v, Pressed() = %t", e.Ready(), e.Pressed())
			}
			e.Close() // idempotent
			if calls.Load() != 0 {
				t.Fatal("OnPress called on Close")
			}
		})
	})
}

// TestEStopRetriedUntilReadable: a pin that is not there at start reads as
// pressed and is tried again every Retry, each failure handed to OnRetry;
// once it appears it is watched and reports its state: released, or
// pressed (and then OnPress is called).
func TestEStopRetriedUntilReadable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		level   pgpio.Level // the line when the pin appears (active-low, floating)
		pressed bool
	}{{"released", pgpio.High, false}, {"pressed", pgpio.Low, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const retry = 100 * time.Millisecond
				var failed, attached, presses atomic.Int32
				e, err := OpenEStop(EStopConfig{Pin: pinName(t, "late"), Pull: pgpio.Float, Debounce: debounce, Retry: retry,
					OnPress: func() { presses.Add(1) },
					OnRetry: func(err error) {
						if err == nil {
							attached.Add(1)
						} else if errors.Is(err, ErrPinNotFound) {
							failed.Add(1)
						}
					}})
				defer e.Close()
				if !errors.Is(err, ErrPinNotFound) || !e.Pressed() || !errors.Is(e.Ready(), ErrPinNotFound) {
					t.Fatalf("OpenEStop = %v; Pressed() = %t, Ready() = %v", err, e.Pressed(), e.Ready())
				}
				time.Sleep(2*retry + retry/2)
				synctest.Wait()
				if n := failed.Load(); n != 2 {
					t.Fatalf("%d failed retries after 2.5 intervals, want 2", n)
				}
				if !e.Pressed() || !errors.Is(e.Ready(), ErrPinNotFound) {
					t.Fatalf("still absent: Pressed() = %t, Ready() = %v", e.Pressed(), e.Ready())
				}

				pin := &gpiotest.Pin{N: pinName(t, "late"), Num: -1, Fn: "fake", L: tc.level, EdgesChan: make(chan pgpio.Level)}
				register(t, pin)
				time.Sleep(retry + 2*debounce)
				synctest.Wait()
				if attached.Load() != 1 {
					t.Fatalf("OnRetry(nil) called %d times once the pin is there, want 1", attached.Load())
				}
				if e.Pressed() != tc.pressed || tc.pressed != errors.Is(e.Ready(), ErrPressed) || !tc.pressed && e.Ready() != nil {
					t.Fatalf("once readable: Pressed() = %t, Ready() = %v; want pressed %t", e.Pressed(), e.Ready(), tc.pressed)
				}
				if want := map[bool]int32{true: 1}[tc.pressed]; presses.Load() != want {
					t.Fatalf("OnPress called %d times, want %d", presses.Load(), want)
				}
				// Watched from now on: a press is seen.
				if !tc.pressed {
					pin.EdgesChan <- pgpio.Low
					time.Sleep(debounce + time.Millisecond)
					synctest.Wait()
					if !e.Pressed() || presses.Load() != 1 {
						t.Fatalf("a press once attached: Pressed() = %t, OnPress %d times", e.Pressed(), presses.Load())
					}
				}
			})
		})
	}
}

// TestEStopRetryStopsOnClose: Close ends the retries; the pin is not
// looked for after.
func TestEStopRetryStopsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries atomic.Int32
		e, _ := OpenEStop(EStopConfig{Pin: pinName(t, "never"), Retry: 10 * time.Millisecond, OnRetry: func(error) { tries.Add(1) }})
		time.Sleep(35 * time.Millisecond)
		e.Close()
		n := tries.Load()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if n != 3 || tries.Load() != n {
			t.Fatalf("%d tries before Close (want 3), %d after", n, tries.Load())
		}
		if !e.Pressed() {
			t.Fatal("a closed e-stop that was never read is not pressed")
		}
	})
}
