// Command benchgo is the Go half of clients/python/bench.py: it times a
// step's round trip through the Go client (package client) against a
// running supervisor, so that bench.py can set the Python client's figure
// beside it, measured on the same daemon in the same run. It prints one
// JSON object: {"samples_ns":[...]}, one sample per step, warm-up left out.
//
//	go run ./clients/python/benchgo --broker tcp://127.0.0.1:1883 --password-file saga-data/mqtt/credentials/ctl --n 500
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
)

func main() {
	broker := flag.String("broker", client.DefaultBroker, "the broker's URL")
	device := flag.String("device", "arm1", "the robot's name")
	agent := flag.String("agent", "ctl", "the agent to log in and act as")
	passwordFile := flag.String("password-file", "", "the agent's password file")
	actuator := flag.String("actuator", "elbow", "the actuator to step")
	lo := flag.Float64("lo", 30, "the value of odd steps")
	hi := flag.Float64("hi", 31, "the value of even steps")
	n := flag.Int("n", 500, "timed steps")
	warmup := flag.Int("warmup", 50, "untimed steps first")
	perSaga := flag.Int("per-saga", 1000, "steps a saga carries before it is committed and another begun")
	flag.Parse()
	if err := run(*broker, *device, *agent, *passwordFile, *actuator, *lo, *hi, *n, *warmup, *perSaga); err != nil {
		fmt.Fprintln(os.Stderr, "benchgo:", err)
		os.Exit(1)
	}
}

func run(broker, device, agent, passwordFile, actuator string, lo, hi float64, n, warmup, perSaga int) error {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Options{Broker: broker, Device: device, Agent: agent, PasswordFile: passwordFile,
		TTL: 10 * time.Second, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var saga *client.Saga
	samples := make([]int64, 0, n)
	for i := range warmup + n {
		if i%perSaga == 0 {
			if saga != nil {
				if err := saga.Commit(ctx); err != nil {
					return err
				}
			}
			if saga, err = c.Begin(ctx); err != nil {
				return err
			}
		}
		v := lo
		if i%2 == 1 {
			v = hi
		}
		t0 := time.Now()
		if _, err := saga.Step(ctx, actuator, v); err != nil {
			return err
		}
		if i >= warmup {
			samples = append(samples, time.Since(t0).Nanoseconds())
		}
	}
	if err := saga.Commit(ctx); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string][]int64{"samples_ns": samples})
}
