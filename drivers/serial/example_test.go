package serial_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

// A link to a simulated MCU over an in-memory pipe. Against a board it is
// serial.Open with Config{Port: "/dev/ttyACM0"} or Config{VID: "2341",
// PID: "0043"}.
func Example() {
	board, err := mcu.New(mcu.Options{Channels: []mcu.ChannelSpec{{Safe: 90}}, Supplies: []float64{12.6}})
	if err != nil {
		panic(err)
	}
	defer board.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	host, dev := net.Pipe()
	go board.Serve(ctx, dev)

	link, err := serial.OpenConn(ctx, host, serial.Config{Name: "arm"})
	if err != nil {
		panic(err)
	}
	defer link.Close()
	if err := link.WaitReady(ctx); err != nil { // HELLO answered
		panic(err)
	}
	elbow, _ := link.Channel(0) // an actuators.Driver and actuators.ReadBacker
	if err := elbow.Set(ctx, 45.5); err != nil {
		panic(err)
	}
	angle, err := elbow.ReadBack(ctx)
	fmt.Println(angle, err)
	// Output: 45.5 <nil>
}

// The frame docs/SERIAL.md works through: SET channel 2 to 90.5 with
// sequence number 7.
func ExampleFrame_MarshalBinary() {
	payload, _ := serial.SetRequest{Channel: 2, Value: 90500}.AppendBinary(nil)
	frame, _ := serial.Frame{Seq: 7, Type: serial.TypeSet, Payload: payload}.MarshalBinary()
	fmt.Printf("% x\n", frame)
	// Output: a5 05 07 02 02 84 61 01 00 a4 27
}
