package syscalls

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/format"
)

// Format renders one recorded call as a line in the manner of strace:
//
//	read(3, "abc\n", 4096) = 4
//	openat(AT_FDCWD, 0x7ffd1234, O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)
//
// Output buffers the call recorded are shown decoded (the first 32 bytes of
// byte buffers, timespecs, fd pairs, stat mode and size); input strings are
// not recorded and appear as addresses. A call the table does not declare
// shows its six arguments in hexadecimal.
func Format(rec format.Syscall) string {
	var b strings.Builder
	d, ok := Lookup(rec.Nr)
	if !ok {
		b.WriteString(Name(rec.Nr))
		b.WriteByte('(')
		for k, v := range rec.Args {
			if k > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%#x", v)
		}
		b.WriteString(") = ")
		b.WriteString(formatRet(ArgInt, rec.Ret))
		return b.String()
	}
	b.WriteString(d.Name)
	b.WriteByte('(')
	for k, f := range d.Args {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(formatArg(f, rec.Args[k], rec.Out))
	}
	b.WriteString(") = ")
	b.WriteString(formatRet(d.Ret, rec.Ret))
	return b.String()
}

// maxShown is how many bytes of a buffer Format shows.
const maxShown = 32

func formatArg(f Arg, v uint64, outs []format.OutBuf) string {
	switch f {
	case ArgInt:
		return strconv.FormatInt(int64(v), 10)
	case ArgUint:
		return strconv.FormatUint(v, 10)
	case ArgHex:
		return fmt.Sprintf("%#x", v)
	case ArgFd:
		if int32(v) == unix.AT_FDCWD {
			return "AT_FDCWD"
		}
		return strconv.Itoa(int(int32(v)))
	case ArgMode:
		return fmt.Sprintf("%#o", uint32(v))
	case ArgOpenFlags:
		return openFlags(v)
	case ArgProt:
		return protFlags(v)
	case ArgMapFlags:
		return mapFlags(v)
	case ArgSignal:
		if n := unix.SignalName(unix.Signal(int32(v))); n != "" {
			return n
		}
		return strconv.Itoa(int(int32(v)))
	}
	// Pointers.
	if v == 0 {
		return "NULL"
	}
	data, found := findOut(outs, v)
	if !found {
		return fmt.Sprintf("%#x", v)
	}
	switch f {
	case ArgBuf:
		return quote(data)
	case ArgTimespec:
		if len(data) >= 16 {
			return fmt.Sprintf("{tv_sec=%d, tv_nsec=%d}", int64(le64(data)), int64(le64(data[8:])))
		}
	case ArgTimeval:
		if len(data) >= 16 {
			return fmt.Sprintf("{tv_sec=%d, tv_usec=%d}", int64(le64(data)), int64(le64(data[8:])))
		}
	case ArgFdPair:
		if len(data) >= 8 {
			return fmt.Sprintf("[%d, %d]", int32(le32(data)), int32(le32(data[4:])))
		}
	case ArgInt32Out:
		if len(data) >= 4 {
			return fmt.Sprintf("[%d]", int32(le32(data)))
		}
	case ArgStat:
		if len(data) >= sizeofStat {
			return fmt.Sprintf("{st_mode=%s, st_size=%d, ...}",
				fileMode(le32(data[offStatMode:])), int64(le64(data[offStatSize:])))
		}
	}
	return fmt.Sprintf("%#x", v)
}

func findOut(outs []format.OutBuf, addr uint64) ([]byte, bool) {
	for _, o := range outs {
		if o.Addr == addr {
			return o.Data, true
		}
	}
	return nil, false
}

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// quote renders the first maxShown bytes of b as a C string literal,
// followed by "..." when b is longer.
func quote(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for k, c := range b {
		if k == maxShown {
			break
		}
		switch c {
		case '"':
			s.WriteString(`\"`)
		case '\\':
			s.WriteString(`\\`)
		case '\n':
			s.WriteString(`\n`)
		case '\t':
			s.WriteString(`\t`)
		case '\r':
			s.WriteString(`\r`)
		default:
			if c >= 0x20 && c < 0x7f {
				s.WriteByte(c)
			} else {
				fmt.Fprintf(&s, `\x%02x`, c)
			}
		}
	}
	s.WriteByte('"')
	if len(b) > maxShown {
		s.WriteString("...")
	}
	return s.String()
}

// Kernel-internal restart codes (include/linux/errno.h). A completed call
// does not normally return them, but a thread stopped inside one shows them.
var restartErrnos = map[int64]string{
	512: "ERESTARTSYS (To be restarted if SA_RESTART is set)",
	513: "ERESTARTNOINTR (To be restarted)",
	514: "ERESTARTNOHAND (To be restarted if no handler)",
	515: "ENOIOCTLCMD (No ioctl command)",
	516: "ERESTART_RESTARTBLOCK (Interrupted by signal)",
}

// maxErrno: return values in [-maxErrno, -1] are errors (include/linux/err.h: MAX_ERRNO).
const maxErrno = 4095

func formatRet(f Arg, ret int64) string {
	if ret < 0 && ret >= -maxErrno {
		return "-1 " + errnoString(-ret)
	}
	switch f {
	case ArgHex, ArgPtr:
		return fmt.Sprintf("%#x", uint64(ret))
	case ArgMode:
		return fmt.Sprintf("%#o", ret)
	case ArgUint:
		return strconv.FormatUint(uint64(ret), 10)
	}
	return strconv.FormatInt(ret, 10)
}

// errnoString renders an errno value as "ENOENT (No such file or directory)".
func errnoString(e int64) string {
	if s, ok := restartErrnos[e]; ok {
		return s
	}
	errno := unix.Errno(e)
	name := unix.ErrnoName(errno)
	if name == "" {
		return fmt.Sprintf("errno %d", e)
	}
	msg := errno.Error()
	if msg != "" {
		msg = strings.ToUpper(msg[:1]) + msg[1:]
	}
	return name + " (" + msg + ")"
}

type flagName struct {
	bit  uint64
	name string
}

// joinFlags names the bits of v found in names, and shows what remains in hex.
func joinFlags(v uint64, names []flagName, parts []string) string {
	for _, f := range names {
		if v&f.bit == f.bit && f.bit != 0 {
			parts = append(parts, f.name)
			v &^= f.bit
		}
	}
	if v != 0 {
		parts = append(parts, fmt.Sprintf("%#x", v))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// Multi-bit flags come before the flags whose bits they include (O_SYNC has
// O_DSYNC's, O_TMPFILE has O_DIRECTORY's).
var openFlagNames = []flagName{
	{unix.O_SYNC, "O_SYNC"}, {unix.O_TMPFILE, "O_TMPFILE"},
	{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_NOCTTY, "O_NOCTTY"},
	{unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"}, {unix.O_NONBLOCK, "O_NONBLOCK"},
	{unix.O_DSYNC, "O_DSYNC"}, {unix.O_ASYNC, "O_ASYNC"},
	{unix.O_DIRECT, "O_DIRECT"}, {unix.O_LARGEFILE, "O_LARGEFILE"},
	{unix.O_DIRECTORY, "O_DIRECTORY"}, {unix.O_NOFOLLOW, "O_NOFOLLOW"},
	{unix.O_NOATIME, "O_NOATIME"}, {unix.O_CLOEXEC, "O_CLOEXEC"}, {unix.O_PATH, "O_PATH"},
}

func openFlags(v uint64) string {
	v &= 0xffffffff
	acc := []string{"O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"}[v&unix.O_ACCMODE]
	return joinFlags(v&^unix.O_ACCMODE, openFlagNames, []string{acc})
}

var protNames = []flagName{
	{unix.PROT_READ, "PROT_READ"}, {unix.PROT_WRITE, "PROT_WRITE"}, {unix.PROT_EXEC, "PROT_EXEC"},
	{unix.PROT_GROWSDOWN, "PROT_GROWSDOWN"}, {unix.PROT_GROWSUP, "PROT_GROWSUP"},
}

func protFlags(v uint64) string {
	if v == unix.PROT_NONE {
		return "PROT_NONE"
	}
	return joinFlags(v, protNames, nil)
}

var mapNames = []flagName{
	{unix.MAP_FIXED, "MAP_FIXED"}, {unix.MAP_ANONYMOUS, "MAP_ANONYMOUS"},
	{unix.MAP_32BIT, "MAP_32BIT"}, {unix.MAP_GROWSDOWN, "MAP_GROWSDOWN"},
	{unix.MAP_DENYWRITE, "MAP_DENYWRITE"}, {unix.MAP_EXECUTABLE, "MAP_EXECUTABLE"},
	{unix.MAP_LOCKED, "MAP_LOCKED"}, {unix.MAP_NORESERVE, "MAP_NORESERVE"},
	{unix.MAP_POPULATE, "MAP_POPULATE"}, {unix.MAP_NONBLOCK, "MAP_NONBLOCK"},
	{unix.MAP_STACK, "MAP_STACK"}, {unix.MAP_HUGETLB, "MAP_HUGETLB"},
	{unix.MAP_SYNC, "MAP_SYNC"}, {unix.MAP_FIXED_NOREPLACE, "MAP_FIXED_NOREPLACE"},
}

func mapFlags(v uint64) string {
	var kind string
	switch v & 0x3 { // MAP_TYPE's low bits
	case unix.MAP_SHARED:
		kind = "MAP_SHARED"
	case unix.MAP_PRIVATE:
		kind = "MAP_PRIVATE"
	case unix.MAP_SHARED_VALIDATE:
		kind = "MAP_SHARED_VALIDATE"
	}
	parts := []string{}
	if kind != "" {
		parts = append(parts, kind)
	}
	return joinFlags(v&^0x3, mapNames, parts)
}

// fileMode renders st_mode as strace does: S_IFREG|0644.
func fileMode(m uint32) string {
	types := map[uint32]string{
		unix.S_IFREG: "S_IFREG", unix.S_IFDIR: "S_IFDIR", unix.S_IFLNK: "S_IFLNK",
		unix.S_IFCHR: "S_IFCHR", unix.S_IFBLK: "S_IFBLK", unix.S_IFIFO: "S_IFIFO",
		unix.S_IFSOCK: "S_IFSOCK",
	}
	t, ok := types[m&unix.S_IFMT]
	if !ok {
		return fmt.Sprintf("%#o", m)
	}
	return fmt.Sprintf("%s|%04o", t, m&^unix.S_IFMT)
}
