package mqtt_test

import (
	"fmt"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

func ExampleTopics() {
	t := mqtt.Topics{Device: "arm1"}
	fmt.Println(t.Cmd())
	fmt.Println(t.Reply("me"))
	fmt.Println(t.Will("me"))
	fmt.Println(t.Status(), string(api.EncodeStatus(api.Status{State: api.StateOffline})))
	fmt.Println(api.ValidName("me+you"))
	// Output:
	// saga/v1/arm1/cmd
	// saga/v1/arm1/reply/me
	// saga/v1/arm1/will/me
	// saga/v1/arm1/status {"state":"offline","ready":false,"halted":false}
	// name "me+you" holds '+', which MQTT topics reserve
}
