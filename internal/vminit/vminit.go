// Package vminit is what a static Go PID 1 in an initramfs does first, before its own
// work: the e2e guest (e2e/guest) and the network lab's VM (hack/netlab) both boot
// Debian's kernel with such an init.
package vminit

import (
	"errors"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Logf reports a step that failed; the init goes on.
type Logf func(format string, args ...any)

// MountAll mounts /proc, /sys and /dev (devtmpfs).
func MountAll(logf Logf) {
	for _, m := range []struct{ fstype, target string }{
		{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"},
	} {
		_ = os.MkdirAll(m.target, 0o755)
		if err := unix.Mount(m.fstype, m.target, m.fstype, unix.MS_NOSUID, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			logf("mount %s: %v", m.target, err)
		}
	}
}

// UseConsole makes /dev/console fd 0, 1 and 2, in case the kernel could not open it
// before init started (an initramfs without /dev/console).
func UseConsole(logf Logf) {
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		logf("open /dev/console: %v", err)
		return
	}
	for i := 0; i <= 2; i++ {
		_ = unix.Dup3(fd, i, 0)
	}
	if fd > 2 {
		_ = unix.Close(fd)
	}
}

// LoadModules loads dir/*.ko in name order: the image scripts number them so that
// dependencies come first.
func LoadModules(dir string, logf Logf) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.ko"))
	sort.Strings(files)
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			logf("module %s: %v", path, err)
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			logf("module %s: %v", path, err)
		}
		f.Close()
	}
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
