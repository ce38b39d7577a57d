// Command saga-supervisor is the safety supervisor daemon's command line:
// the demo, journal verification, drawing and recovery.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/bench"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/credentials"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/ctl"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/demo"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/fleetcmd"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/journaltool"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/prove"
	journalreplay "github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/replay"
	"github.com/saga-supervisor/saga-supervisor/internal/buildinfo"
)

type command struct {
	name, args, help string
	run              cli.Command
	hidden           bool
}

var commands []command

func init() {
	commands = []command{
		{name: "run", args: "[--config FILE]", help: "run the supervisor daemon (no flags: the embedded default — sim arm, in-process broker, HTTP on 127.0.0.1)", run: runRun},
		{name: "check-config", args: "FILE", help: "check a configuration file; exit 0 valid, 1 invalid (every error with its line)", run: runCheckConfig},
		{name: "mosquitto-config", args: "--out DIR [--config FILE]", help: "write mosquitto's password file, ACL and conf from the configuration: the same rules as the embedded broker", run: runMosquittoConfig},
		{name: "systemd-dropin", args: "--config FILE [--out F]", help: "write the unit's drop-in (" + DefaultDropin + ") letting in what the config serves or dials beyond loopback: the unit itself allows localhost only", run: runSystemdDropin},
		{name: "credentials", args: "OP [--config FILE]", help: "the MQTT logins' passwords: list them, show one (root or its owner), export one to a controller's user (--to FILE --owner USER, mode 0600)", run: credentials.Run},
		{name: "ctl", args: "OP [flags]", help: "a controller from the shell over MQTT: status, halt, reset, hello, run-saga, watch, keygen, approve; the operator's drain, undrain, quarantine, release", run: ctl.Run},
		{name: "fleet", args: "[--once] [--json]", help: "every supervisor on a broker at a glance (mqtt.fleet summaries): ready, halted, offline, stale; refreshes in place", run: fleetcmd.Run},
		{name: "demo", help: "show the supervisor on a simulated arm: faults, unwinds, a failed compensation, a kill -9 and recovery", run: demo.Run},
		{name: "verify", args: "--wal DIR", help: "check the journal's hash chain and every record against the daemon's replay rules; exit 0 intact, 1 broken, refused or lost (first bad record named), 2 no journal or unreadable", run: journaltool.Verify},
		{name: "graph", args: "--wal DIR [--saga ID]", help: "draw sagas and their unwinds as a Mermaid flowchart", run: journaltool.Graph},
		{name: "certify", args: "--wal DIR", help: "exit 0 only if every saga committed or unwound clean; 1 if any is open, in doubt or partial, or the journal fails verify; names every torn or cut tail", run: journaltool.Certify},
		{name: "repair", args: "--wal DIR [--yes]", help: "say what cutting a damaged journal at its first bad record removes (exit 1 if needed, 0 if not); --yes cuts, keeping the bytes in .broken files", run: journaltool.Repair},
		{name: "check", hidden: true, run: func([]string, io.Writer) error {
			return cli.Exit(2, "the model check is its own command now: go run ./cmd/saga-modelcheck --max-steps 6 --sagas 2 --durability both (docs/PROOF.md)")
		}},
		{name: "prove", args: "SCENARIO [--json]", help: "break a sequence at every step in every failure shape on a simulated copy of the robot; exit 0 only if every unwind is clean", run: prove.Run},
		{name: "guarantees", help: "print, as JSON, what is enforced before an effect, what is guaranteed after, and what is not claimed", run: journaltool.Guarantees},
		{name: "journal", args: "export --wal DIR [...]", help: "print the journal's records as JSON lines (--format jsonl; --from/--to SEQ, --since/--until RFC3339); exit 0 intact, 1 broken (records up to the break printed), 2 unreadable", run: journaltool.Journal},
		{name: "replay", args: "--wal DIR [--config FILE]", help: "replay a journal's commands through the gate and limits of a config (--from/--to, --json, --expect/--write-expect FILE); exit 0 same, 1 differs, 2 bad input", run: journalreplay.Run},
		{name: "recover", args: "--wal DIR --world FILE", help: "take over a journal and finish every open saga on the simulated arm", run: journaltool.Recover},
		{name: "bench", args: "[BENCH] [flags]", help: "measure on this machine (bench BENCH -h): disk, the default, what durability costs on this disk — journal, group commit, engine step, gate and recovery against the fsync floor; mqtt the MQTT front door; rss the daemon's resident memory; journal restart-to-ready with checkpoints, junk's journal bytes per hour", run: bench.Run},
		{name: "version", args: "[--json]", help: "print the version, commit, commit date and Go version this binary was built with", run: runVersion},
		{name: "demo-child", hidden: true, run: demo.Child},
		{name: "demo-controller", hidden: true, run: demo.Controller},
	}
	commands = append(commands, hardwareCommands...)
}

// runVersion prints what internal/buildinfo knows of this binary: set by
// the Makefile's -ldflags, or read from the Go toolchain's stamp.
func runVersion(args []string, w io.Writer) error {
	fs := cli.NewFlags("version")
	asJSON := fs.Bool("json", false, "print a JSON object (version, commit, date, go, platform)")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if fs.NArg() > 0 {
		return cli.Exit(2, "unexpected argument %q", fs.Arg(0))
	}
	in := buildinfo.Get()
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	_, err := io.WriteString(w, in.String())
	return err
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: saga-supervisor <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-8s %-22s %s\n", c.name, c.args, c.help)
		}
	}
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		usage(os.Stdout)
		return
	}
	for _, c := range commands {
		if c.name == name {
			err := c.run(os.Args[2:], os.Stdout)
			if err == nil {
				return
			}
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(os.Stderr, "saga-supervisor %s: %v\n", name, err)
			}
			os.Exit(cli.Status(err))
		}
	}
	fmt.Fprintf(os.Stderr, "saga-supervisor: unknown command %q\n\n", name)
	usage(os.Stderr)
	os.Exit(2)
}
