package slim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kiln-build/kiln/internal/atomicfile"
)

// RecordOpens runs argv and writes to out, one per line and sorted, the
// regular files that any process opened (or executed) on the root
// filesystem's mount while it ran: the startup set AddEStargz puts first.
// It exits with argv's status.
//
// Why fanotify on the mount: it sees every open by every process of the
// probe (the interpreter, the shared libraries the dynamic loader maps,
// the modules Python imports, the helpers they exec), whatever the
// program, with no tracer in the image, no ptrace slowdown and no
// preloaded library (which would miss static binaries and direct
// syscalls); the event's file descriptor names the file as the container
// sees it. Access times would need the probe's root filesystem after the
// run and a mount without noatime/relatime, neither of which BuildKit
// gives. It needs CAP_SYS_ADMIN, so kiln slim runs this under BuildKit's
// security.insecure entitlement, and user (the image's USER, "" for root)
// is the identity argv runs as. Files on other mounts (/proc, /dev, the
// tools and output mounts) are not the image's and are not seen.
func RecordOpens(ctx context.Context, out, user string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if len(argv) == 0 {
		return 0, errors.New("record: no command")
	}
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("record: fanotify_init: %w (recording opens needs CAP_SYS_ADMIN: BuildKit's security.insecure entitlement)", err)
	}
	defer unix.Close(fd)
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_OPEN|unix.FAN_OPEN_EXEC, unix.AT_FDCWD, "/"); err != nil {
		return 0, fmt.Errorf("record: fanotify_mark on /: %w", err)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if user != "" {
		cred, err := lookupUser(user)
		if err != nil {
			return 0, fmt.Errorf("record: user %q: %w", user, err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	files := map[string]bool{}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("record: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	buf := make([]byte, 256<<10)
	var werr error
	for running := true; running; {
		select {
		case werr = <-waited:
			running = false
		default:
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		}
		// After the exit too: what the last processes opened is queued.
		if err := readEvents(fd, buf, files); err != nil {
			return 0, err
		}
	}
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return 0, fmt.Errorf("record: %w", werr)
		}
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	}
	list := make([]string, 0, len(files))
	for p := range files {
		list = append(list, p)
	}
	slices.Sort(list)
	var b strings.Builder
	for _, p := range list {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	if err := atomicfile.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return code, fmt.Errorf("record: %w", err)
	}
	return code, nil
}

// readEvents reads the queued fanotify events (struct
// fanotify_event_metadata, native byte order: little-endian on the
// platforms kiln builds) and adds the regular files they name.
func readEvents(fd int, buf []byte, files map[string]bool) error {
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			return nil
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("record: reading fanotify events: %w", err)
		}
		for b := buf[:n]; len(b) >= unix.FAN_EVENT_METADATA_LEN; {
			evLen := binary.LittleEndian.Uint32(b[0:4])
			efd := int(int32(binary.LittleEndian.Uint32(b[16:20])))
			if evLen < unix.FAN_EVENT_METADATA_LEN || int(evLen) > len(b) {
				return fmt.Errorf("record: fanotify event of %d bytes", evLen)
			}
			b = b[evLen:]
			if efd < 0 {
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(efd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(efd)); err == nil && strings.HasPrefix(p, "/") && !strings.HasSuffix(p, " (deleted)") {
					files[p] = true
				}
			}
			unix.Close(efd)
		}
	}
}

// lookupUser resolves USER as an image gives it (name or uid, optionally
// :group or :gid) from the image's /etc/passwd and /etc/group.
func lookupUser(spec string) (*syscall.Credential, error) {
	u, g, hasGroup := strings.Cut(spec, ":")
	uid, gid, ok := lookupID("/etc/passwd", u, true)
	if !ok {
		return nil, errors.New("not a number and not in /etc/passwd")
	}
	if hasGroup {
		if gid, _, ok = lookupID("/etc/group", g, false); !ok {
			return nil, fmt.Errorf("group %q: not a number and not in /etc/group", g)
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// lookupID finds name (or a number) in a passwd or group file: its id and,
// for passwd, its primary group.
func lookupID(file, name string, passwd bool) (int, int, bool) {
	if n, err := strconv.Atoi(name); err == nil {
		gid := n
		if passwd {
			gid = 0
		}
		b, _ := os.ReadFile(file)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Split(l, ":"); passwd && len(f) > 3 && f[2] == name {
				gid, _ = strconv.Atoi(f[3])
			}
		}
		return n, gid, true
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) > 3 && f[0] == name {
			id, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 == nil && (err2 == nil || !passwd) {
				return id, gid, true
			}
		}
	}
	return 0, 0, false
}
