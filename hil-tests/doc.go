// Package hil holds the hardware-in-the-loop scenarios: black-box tests that
// build the real saga-supervisor binary, start it from a config, act on it
// only through its public interfaces — MQTT API v1, HTTP, the serial link —
// and observe the outputs through an independent read-back channel.
//
// The same scenarios run in three modes:
//
//   - sim (the default, `make hil`): every scenario builds its own rig in a
//     temporary directory — a socat pty pair as the cable, the hidden
//     `saga-supervisor sim-mcu` command as the board, the supervisor on
//     configs/sim.yaml, and for the broker scenarios a mosquitto of its own —
//     so scenarios run in parallel. The sim MCU's HTTP control API plays both
//     the read-back channel (GET /state) and the injections (a NAKed
//     channel, a sagging supply, an e-stop, an unplugged cable). Nothing is
//     skipped in this mode: a missing socat or mosquitto fails the run when
//     the CI environment variable is set, and skips only on a developer's
//     machine without them.
//   - rig (`make hil HIL_CONFIG=rig.yaml`): the scenarios run one after
//     another against a real rig described by a rig file (RigFile,
//     docs/HIL.md): the supervisor config to run, the operator token, and a
//     read-back URL speaking the sim MCU's /state JSON, optionally with the
//     same control endpoints for injections. A scenario whose injection the
//     rig file does not list is skipped with a message naming the missing
//     capability.
//   - avr (`make hil-avr`, HIL_RIG=avr): the scenarios, and the AVR rig's
//     own (TestAVR*), on the saga firmware's ELF in simavr (saga-avr-rig,
//     firmware/rig), each on a rig of its own. The read-back is the rig's
//     measurement of the pins, served as /state by an adapter with the sim
//     board's control endpoints; after each scenario the journal, the
//     status and the pins must agree, and every move of the pins must be
//     explained (docs/HIL.md, "The emulated AVR rig"). Without the ELF the
//     scenarios skip, or fail when CI is set.
//
// The scenarios also compare, whenever the supervisor is ready, what it says
// it commanded with what the read-back shows: a difference is a failure.
//
// TestSoak (`make soak`, not among the scenarios) runs one supervisor on the
// sim rig for SOAK_DURATION under faults picked at random from SOAK_SEED —
// the broker, the cable, the journal's disk (full, failing), the supply,
// signals to the supervisor and to agents, the broker or the board's port
// missing while it starts — and checks after each that the
// world, the supervisor's belief, the journal and the retained state agree,
// that no acknowledged commit was lost or undone, and that a halt was
// honoured (docs/HIL.md, "The soak").
//
// The package itself holds what a rig is described by and observed through:
// the rig file (RigFile, LoadRig), the plan worked out from it and the
// supervisor config (Plan), and the read-back client (ReadBack, State). The
// scenarios and the process plumbing are in the _test.go files.
package hil
