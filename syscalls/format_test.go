package syscalls

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/format"
)

func recOf(nr int, args [6]uint64, ret int64, outs ...format.OutBuf) format.Syscall {
	return format.Syscall{Nr: nr, Args: args, Ret: ret, Out: outs}
}

func TestFormat(t *testing.T) {
	stat := make([]byte, sizeofStat)
	binary.LittleEndian.PutUint32(stat[offStatMode:], unix.S_IFREG|0o644)
	binary.LittleEndian.PutUint64(stat[offStatSize:], 1234)
	ts := make([]byte, 16)
	binary.LittleEndian.PutUint64(ts, 5)
	binary.LittleEndian.PutUint64(ts[8:], 250)
	fds := []byte{3, 0, 0, 0, 4, 0, 0, 0}
	long := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	atcwd := uint64(0xffffffffffffff9c)

	cases := []struct {
		rec  format.Syscall
		want string
	}{
		{recOf(unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, 4, format.OutBuf{Addr: 0x1000, Data: []byte("abc\n")}),
			`read(3, "abc\n", 4096) = 4`},
		{recOf(unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, int64(len(long)), format.OutBuf{Addr: 0x1000, Data: long}),
			`read(3, "0123456789abcdefghijklmnopqrstuv"..., 4096) = 36`},
		{recOf(unix.SYS_READ, [6]uint64{0, 0x1000, 16}, 3, format.OutBuf{Addr: 0x1000, Data: []byte{0, '"', 0xff}}),
			`read(0, "\x00\"\xff", 16) = 3`},
		{recOf(unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, -int64(unix.EAGAIN)),
			`read(3, 0x1000, 4096) = -1 EAGAIN (Resource temporarily unavailable)`},
		{recOf(unix.SYS_OPENAT, [6]uint64{atcwd, 0x7ffd0000, unix.O_RDONLY | unix.O_CLOEXEC}, -2),
			`openat(AT_FDCWD, 0x7ffd0000, O_RDONLY|O_CLOEXEC, 0) = -1 ENOENT (No such file or directory)`},
		{recOf(unix.SYS_OPENAT, [6]uint64{atcwd, 0x7ffd0000, unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC, 0o644}, 3),
			`openat(AT_FDCWD, 0x7ffd0000, O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3`},
		{recOf(unix.SYS_FSTAT, [6]uint64{3, 0x2000}, 0, format.OutBuf{Addr: 0x2000, Data: stat}),
			`fstat(3, {st_mode=S_IFREG|0644, st_size=1234, ...}) = 0`},
		{recOf(unix.SYS_CLOCK_GETTIME, [6]uint64{1, 0x3000}, 0, format.OutBuf{Addr: 0x3000, Data: ts}),
			`clock_gettime(1, {tv_sec=5, tv_nsec=250}) = 0`},
		{recOf(unix.SYS_PIPE2, [6]uint64{0x4000, unix.O_CLOEXEC}, 0, format.OutBuf{Addr: 0x4000, Data: fds}),
			`pipe2([3, 4], O_RDONLY|O_CLOEXEC) = 0`},
		{recOf(unix.SYS_MMAP, [6]uint64{0, 8192, unix.PROT_READ | unix.PROT_WRITE, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS, ^uint64(0), 0}, 0x7f1234560000),
			`mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0x0) = 0x7f1234560000`},
		{recOf(unix.SYS_MPROTECT, [6]uint64{0x7f0000000000, 4096, 0}, 0),
			`mprotect(0x7f0000000000, 4096, PROT_NONE) = 0`},
		{recOf(unix.SYS_KILL, [6]uint64{42, uint64(unix.SIGTERM)}, 0), `kill(42, SIGTERM) = 0`},
		{recOf(unix.SYS_EXIT_GROUP, [6]uint64{1}, 0), `exit_group(1) = 0`},
		{recOf(unix.SYS_GETPID, [6]uint64{7, 7}, 4242), `getpid() = 4242`},
		{recOf(unix.SYS_UMASK, [6]uint64{0o22}, 0o77), `umask(022) = 077`},
		{recOf(unix.SYS_MOUNT, [6]uint64{1, 2, 3, 4, 5, 6}, -1),
			`mount(0x1, 0x2, 0x3, 0x4, 0x5, 0x6) = -1 EPERM (Operation not permitted)`},
		{recOf(380, [6]uint64{}, -38), `syscall_380(0x0, 0x0, 0x0, 0x0, 0x0, 0x0) = -1 ENOSYS (Function not implemented)`},
		{recOf(unix.SYS_NANOSLEEP, [6]uint64{0x10, 0}, -514),
			`nanosleep(0x10, NULL) = -1 ERESTARTNOHAND (To be restarted if no handler)`},
	}
	for _, c := range cases {
		if got := Format(c.rec); got != c.want {
			t.Errorf("Format:\n got %s\nwant %s", got, c.want)
		}
	}
}

// Every declared call formats without panicking, whatever its arguments and
// recorded buffers (short buffers included).
func TestFormatAll(t *testing.T) {
	for _, d := range All() {
		for _, ret := range []int64{0, 1, -1, -4095, -4096, 1 << 40} {
			args := [6]uint64{0x1000, 0x1000, 0x1000, 0x1000, 0x1000, 0x1000}
			rec := recOf(d.Nr, args, ret, format.OutBuf{Addr: 0x1000, Data: []byte{1}})
			if s := Format(rec); len(s) < len(d.Name)+4 {
				t.Errorf("%s: %q", d.Name, s)
			}
		}
	}
}
