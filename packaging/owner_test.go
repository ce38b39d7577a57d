package packaging

import (
	"os"
	"strconv"
	"syscall"
)

// owner is a file's numeric owner and group.
func owner(fi os.FileInfo) (uid, gid string) {
	st := fi.Sys().(*syscall.Stat_t)
	return strconv.FormatUint(uint64(st.Uid), 10), strconv.FormatUint(uint64(st.Gid), 10)
}
