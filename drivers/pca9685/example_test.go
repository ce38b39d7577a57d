package pca9685_test

import (
	"context"
	"fmt"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685"
	"github.com/saga-supervisor/saga-supervisor/drivers/pca9685/pca9685test"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"
)

// A pan servo on channel 0 of a servo hat on the Pi's I2C bus 1.
func Example() {
	if _, err := host.Init(); err != nil {
		fmt.Println(err)
		return
	}
	bus, err := i2creg.Open("1")
	if err != nil {
		fmt.Println(err) // a machine without I2C
		return
	}
	defer bus.Close()
	board, err := pca9685.Open(bus, pca9685.Options{Addr: 0x40, Frequency: 50})
	if err != nil {
		fmt.Println(err) // no board at 0x40
		return
	}
	defer board.Close()
	pan, err := board.Servo(0, pca9685.ServoCalibration{
		MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond,
		MinAngle: -90, MaxAngle: 90,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	fmt.Println(pan.Set(ctx, 30))
}

// The same on the in-memory chip of package pca9685test, as in tests.
func Example_fakeChip() {
	chip := pca9685test.New(0x40)
	board, err := pca9685.Open(chip, pca9685.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	pan, _ := board.Servo(0, pca9685.ServoCalibration{
		MinPulse: 500 * time.Microsecond, MaxPulse: 2500 * time.Microsecond,
		MinAngle: -90, MaxAngle: 90,
	})
	ctx := context.Background()
	fmt.Println(board.Prescale(), pan.Set(ctx, 30))
	fmt.Printf("LED0 registers % x\n", chip.LED(0))
	angle, err := pan.ReadBack(ctx)
	fmt.Println(angle, err)
	fmt.Println(pan.Halt())
	_, err = pan.ReadBack(ctx)
	fmt.Println(err)
	// Output:
	// 121 <nil>
	// LED0 registers 00 00 78 01
	// 30 <nil>
	// <nil>
	// pca9685: pca9685 0x40 on pca9685test channel 0: read back: pca9685: channel full off, no pulse
}
