package credentials

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A Plan gives the files and directories a command running as root creates
// for another user — the clear passwords mosquitto-config writes into the
// supervisor's credentials directory — to the user who owns the place they
// are created in: the nearest directory above them that exists (the state
// directory, saga's under the shipped unit). The supervisor can then read
// its own password, and no mode is widened: the files keep 0600, the
// directories 0700.
type Plan struct {
	base     string
	uid, gid int
	missing  []string // paths that did not exist, outermost first
}

// NewPlan records which of dir, the directories between it and the
// nearest existing one above it, and files (paths in dir) do not exist
// yet.
func NewPlan(dir string, files ...string) (*Plan, error) {
	p := &Plan{}
	var dirs []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return nil, fmt.Errorf("%s is not a directory", d)
			}
			s, ok := st.Sys().(*syscall.Stat_t)
			if !ok {
				return nil, fmt.Errorf("%s: no owner known", d)
			}
			p.base, p.uid, p.gid = d, int(s.Uid), int(s.Gid)
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		dirs = append(dirs, d)
		if filepath.Dir(d) == d {
			return nil, fmt.Errorf("no part of %s exists", dir)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		p.missing = append(p.missing, dirs[i])
	}
	for _, f := range files {
		if _, err := os.Lstat(f); errors.Is(err, fs.ErrNotExist) {
			p.missing = append(p.missing, f)
		} else if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Owner is the directory whose owner the created paths are given, and
// that owner's numeric ids.
func (p *Plan) Owner() (dir string, uid, gid int) { return p.base, p.uid, p.gid }

// Apply gives every path the plan found missing that exists now to the
// owner of the existing directory above it. Only root can; for anyone
// else the paths are already theirs, and Apply does nothing.
func (p *Plan) Apply() error {
	if os.Geteuid() != 0 || p.uid == 0 && p.gid == 0 {
		return nil
	}
	for _, m := range p.missing {
		if err := os.Lchown(m, p.uid, p.gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("giving %s to the owner of %s: %w", m, p.base, err)
		}
	}
	return nil
}
