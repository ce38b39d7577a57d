package embedded

import (
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Retained messages stored while other clients subscribe: mochi v2.7.9
// writes a topic node's retained path under its index lock and reads it,
// delivering retained messages on subscribe, without (mochi-mqtt/server
// #200); in the daemon, the supervisor's retained states race an agent's
// subscribe. Under -race this test reports that race unless the broker
// keeps the two apart.
func TestRetainWhileSubscribing(t *testing.T) {
	b, err := Start("127.0.0.1:0", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	pub := dial(t, b, "publisher")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// New topics and updates of old ones, as the supervisor's
			// state topics are.
			pub.Publish(fmt.Sprintf("saga/v1/arm1/state/s%d", i%50), 1, true, fmt.Sprint(i)).WaitTimeout(5 * time.Second)
		}
	}()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial(t, b, fmt.Sprintf("sub%d", i))
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				filter := []string{"saga/v1/arm1/state/+", "saga/v1/arm1/#", fmt.Sprintf("saga/v1/arm1/state/s%d", j%50)}[j%3]
				c.Subscribe(filter, 1, func(paho.Client, paho.Message) {}).WaitTimeout(5 * time.Second)
				c.Unsubscribe(filter).WaitTimeout(5 * time.Second)
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("retained stores that went ahead unguarded (waited %v): %d", retainWait, b.hook.unsafe.Load())
}
