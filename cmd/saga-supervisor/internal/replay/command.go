package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// maxConfig bounds a config file the replay reads, as the daemon's loader
// does.
const maxConfig = 1 << 20

// Run is `replay --wal DIR [--config FILE] [--from T|SEQ] [--to T|SEQ]
// [--json] [--expect FILE | --write-expect FILE]`. It exits 0 when nothing
// differs, 1 when anything does, 2 on bad input; with --expect, 0 when
// the result equals the fixture and 1 (with the differences) when not;
// with --write-expect, 0 once the fixture is written.
func Run(args []string, w io.Writer) error {
	fs := cli.NewFlags("replay")
	dir := fs.String("wal", "", "the journal directory (read only: never locked or written)")
	cfgPath := fs.String("config", "", "the configuration to replay under (default: the embedded default)")
	from := fs.String("from", "", "the window's first record: a seq or an RFC 3339 time")
	to := fs.String("to", "", "the window's last record: a seq or an RFC 3339 time")
	asJSON := fs.Bool("json", false, "print the result as one JSON document")
	expect := fs.String("expect", "", "compare the result with this fixture: exit 0 if equal, 1 with the differences if not")
	writeExpect := fs.String("write-expect", "", "write the result to this file as a fixture for --expect")
	slack := fs.Duration("time-tolerance", DefaultTimeTolerance, "how far the journal's times may be from the daemon's gate clock")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	switch {
	case fs.NArg() > 0:
		return cli.Exit(2, "unexpected argument %q", fs.Arg(0))
	case *dir == "":
		return cli.Exit(2, "--wal DIR is required")
	case *expect != "" && *writeExpect != "":
		return cli.Exit(2, "--expect and --write-expect: one or the other")
	case *slack < 0:
		return cli.Exit(2, "--time-tolerance must not be negative")
	}
	opt := Options{Dir: *dir, TimeTolerance: *slack}
	var err error
	if opt.From, err = ParseBound(*from); err != nil {
		return cli.Exit(2, "bad window: --from %v", err)
	}
	if opt.To, err = ParseBound(*to); err != nil {
		return cli.Exit(2, "bad window: --to %v", err)
	}
	if *cfgPath != "" {
		if opt.Config, err = loadConfig(*cfgPath); err != nil {
			return cli.Exit(2, "bad config: %v", err)
		}
		opt.ConfigName = *cfgPath
	}
	var want *Result
	if *expect != "" {
		if want, err = ReadFixture(*expect); err != nil {
			return cli.Exit(2, "--expect %s: %v", *expect, err)
		}
	}
	if *writeExpect != "" && inside(*writeExpect, *dir) {
		return cli.Exit(2, "--write-expect %s is inside the journal directory %s: the replay writes nothing there", *writeExpect, *dir)
	}
	res, err := Replay(opt)
	if err != nil {
		return cli.Exit(2, "%v", err)
	}
	if err := write(w, res, *asJSON); err != nil {
		return err
	}
	switch {
	case *writeExpect != "":
		if err := WriteFixture(*writeExpect, *dir, res); err != nil {
			return cli.Exit(2, "--write-expect: %v", err)
		}
		if !*asJSON {
			fmt.Fprintf(w, "fixture written to %s\n", *writeExpect)
		}
		return nil
	case want != nil:
		diff := Compare(want, res)
		if len(diff) == 0 {
			if !*asJSON {
				fmt.Fprintf(w, "fixture %s: the replay matches it\n", *expect)
			}
			return nil
		}
		text := strings.Join(diff, "\n  ")
		if *asJSON {
			return cli.Exit(1, "the replay differs from the fixture %s:\n  %s", *expect, text)
		}
		fmt.Fprintf(w, "fixture %s: the replay differs from it:\n  %s\n", *expect, text)
		return cli.Exit(1, "the replay differs from the fixture %s (%d differences)", *expect, len(diff))
	case res.Summary.Differs:
		return &cli.ExitError{Code: 1, Err: errors.New("the replay differs from the journal")}
	}
	return nil
}

func write(w io.Writer, res *Result, asJSON bool) error {
	if !asJSON {
		return res.WriteText(w)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// loadConfig reads a config as the daemon would, but none of the files it
// names (keys, secrets): the replay needs the actuators, their limits and
// the unwind settings, and an incident's config is often replayed on
// another machine than the robot's.
func loadConfig(path string) (*config.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfig {
		return nil, fmt.Errorf("%s is larger than %d bytes: not a config file", path, maxConfig)
	}
	return config.ParseLayout(b, path)
}
