package syscalls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeMem is a stand-in for a tracee's memory, for the cases a real call
// cannot produce on demand (a crafted msghdr, a huge length).
type fakeMem struct {
	base  uint64
	b     []byte
	reads int
}

func newFakeMem(base uint64, size int) *fakeMem { return &fakeMem{base: base, b: make([]byte, size)} }

func (m *fakeMem) read(addr uint64, n int) ([]byte, error) {
	m.reads++
	if addr < m.base || addr+uint64(n) > m.base+uint64(len(m.b)) {
		return nil, fmt.Errorf("fake memory: %#x+%d unmapped", addr, n)
	}
	o := addr - m.base
	return append([]byte(nil), m.b[o:o+uint64(n)]...), nil
}

func (m *fakeMem) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(m.b[addr-m.base:], v)
}

func (m *fakeMem) put64(addr uint64, v uint64) {
	binary.LittleEndian.PutUint64(m.b[addr-m.base:], v)
}

// putIovecs writes an iovec array at addr.
func (m *fakeMem) putIovecs(addr uint64, iov ...[2]uint64) {
	for k, v := range iov {
		m.put64(addr+uint64(k*sizeofIovec+offIovBase), v[0])
		m.put64(addr+uint64(k*sizeofIovec+offIovLen), v[1])
	}
}

func noRead(addr uint64, n int) ([]byte, error) {
	return nil, fmt.Errorf("unexpected read of %d bytes at %#x", n, addr)
}

func mustLookup(t *testing.T, nr int) *Desc {
	t.Helper()
	d, ok := Lookup(nr)
	if !ok {
		t.Fatalf("%s not declared", Name(nr))
	}
	return d
}

func TestOutputsPlain(t *testing.T) {
	cases := []struct {
		nr   int
		args [6]uint64
		ret  int64
		want []Range
	}{
		{unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, 5, []Range{{0x1000, 5}}},
		{unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, 0, nil},                   // EOF: nothing written
		{unix.SYS_READ, [6]uint64{3, 0x1000, 4096}, -int64(unix.EAGAIN), nil}, // failed
		{unix.SYS_FSTAT, [6]uint64{3, 0x2000}, 0, []Range{{0x2000, sizeofStat}}},
		{unix.SYS_NEWFSTATAT, [6]uint64{uint64(0xffffffffffffff9c), 0x10, 0x2000, 0}, 0, []Range{{0x2000, sizeofStat}}},
		{unix.SYS_STATX, [6]uint64{3, 0x10, 0, 0xfff, 0x3000}, 0, []Range{{0x3000, sizeofStatx}}},
		{unix.SYS_EPOLL_WAIT, [6]uint64{5, 0x4000, 64, 100}, 3, []Range{{0x4000, 3 * sizeofEpollEvent}}},
		{unix.SYS_POLL, [6]uint64{0x5000, 4, 100}, 1, []Range{{0x5000, 4 * sizeofPollFd}}},
		// poll interrupted: revents are written anyway.
		{unix.SYS_POLL, [6]uint64{0x5000, 4, 100}, -int64(unix.EINTR), []Range{{0x5000, 4 * sizeofPollFd}}},
		// nanosleep: the remaining time only matters when interrupted, and is then written.
		{unix.SYS_NANOSLEEP, [6]uint64{0x10, 0x6000}, -int64(unix.EINTR), []Range{{0x6000, sizeofTimespec}}},
		{unix.SYS_NANOSLEEP, [6]uint64{0x10, 0}, -int64(unix.EINTR), nil}, // NULL omitted
		{unix.SYS_WAIT4, [6]uint64{1234, 0x7000, 0, 0}, 1234, []Range{{0x7000, 4}}},
		{unix.SYS_WAIT4, [6]uint64{1234, 0x7000, 0, 0x8000}, 1234, []Range{{0x7000, 4}, {0x8000, sizeofRusage}}},
		{unix.SYS_PIPE2, [6]uint64{0x9000, unix.O_CLOEXEC}, 0, []Range{{0x9000, 8}}},
		{unix.SYS_RT_SIGACTION, [6]uint64{2, 0x10, 0xa000, 8}, 0, []Range{{0xa000, 32}}},
		{unix.SYS_RT_SIGACTION, [6]uint64{2, 0x10, 0, 8}, 0, nil},
		{unix.SYS_RT_SIGPROCMASK, [6]uint64{0, 0x10, 0xb000, 8}, 0, []Range{{0xb000, 8}}},
		{unix.SYS_SIGALTSTACK, [6]uint64{0, 0xb000}, 0, []Range{{0xb000, 24}}},
		{unix.SYS_GETGROUPS, [6]uint64{32, 0xc000}, 3, []Range{{0xc000, 12}}},
		{unix.SYS_GETRANDOM, [6]uint64{0xd000, 16, 0}, 16, []Range{{0xd000, 16}}},
		{unix.SYS_GETTIMEOFDAY, [6]uint64{0xe000, 0}, 0, []Range{{0xe000, 16}}},
		{unix.SYS_TIME, [6]uint64{0}, 1700000000, nil},
		{unix.SYS_TIME, [6]uint64{0xe000}, 1700000000, []Range{{0xe000, 8}}},
		{unix.SYS_WRITE, [6]uint64{1, 0x1000, 10}, 10, nil},
		{unix.SYS_MMAP, [6]uint64{0, 4096, 3, 0x22, ^uint64(0), 0}, 0x7f0000000000, nil},
	}
	for _, c := range cases {
		d := mustLookup(t, c.nr)
		got, err := Outputs(d, c.args, c.ret, noRead)
		if err != nil {
			t.Errorf("%s: %v", Format(recOf(c.nr, c.args, c.ret)), err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: ranges %v; want %v", Format(recOf(c.nr, c.args, c.ret)), got, c.want)
		}
	}
}

func TestOutputsArgPtr(t *testing.T) {
	m := newFakeMem(0x10000, 0x1000)
	lenAddr := uint64(0x10100)

	// getsockname: *addrlen holds 16 after the call.
	m.put32(lenAddr, 16)
	d := mustLookup(t, unix.SYS_GETSOCKNAME)
	got, err := Outputs(d, [6]uint64{3, 0x10200, lenAddr}, 0, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{0x10200, 16}, {lenAddr, 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("getsockname ranges %v; want %v", got, want)
	}

	// A unix socket's full path length can exceed the buffer; the kernel
	// copies no more than a sockaddr_storage.
	m.put32(lenAddr, 500)
	got, err = Outputs(d, [6]uint64{3, 0x10200, lenAddr}, 0, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Len != sockaddrStorage {
		t.Errorf("oversized address captured as %d bytes; want %d", got[0].Len, sockaddrStorage)
	}

	// recvfrom: data, source address, its length.
	m.put32(lenAddr, 28)
	d = mustLookup(t, unix.SYS_RECVFROM)
	got, err = Outputs(d, [6]uint64{3, 0x10400, 1500, 0, 0x10200, lenAddr}, 100, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{0x10400, 100}, {0x10200, 28}, {lenAddr, 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("recvfrom ranges %v; want %v", got, want)
	}
	// recvfrom on a connected socket: no address asked for, nothing read.
	got, err = Outputs(d, [6]uint64{3, 0x10400, 1500, 0, 0, 0}, 100, noRead)
	if err != nil || !reflect.DeepEqual(got, []Range{{0x10400, 100}}) {
		t.Errorf("recvfrom without address: %v, %v", got, err)
	}

	// getsockopt: the option's length after the call.
	m.put32(lenAddr, 4)
	d = mustLookup(t, unix.SYS_GETSOCKOPT)
	got, err = Outputs(d, [6]uint64{3, unix.SOL_SOCKET, unix.SO_ERROR, 0x10300, lenAddr}, 0, m.read)
	if err != nil || !reflect.DeepEqual(got, []Range{{0x10300, 4}, {lenAddr, 4}}) {
		t.Errorf("getsockopt: %v, %v", got, err)
	}

	// A negative socklen after a successful call is nonsense.
	m.put32(lenAddr, 0xffffffff)
	if _, err := Outputs(d, [6]uint64{3, 1, 4, 0x10300, lenAddr}, 0, m.read); !errors.Is(err, ErrBadOutput) {
		t.Errorf("negative socklen: err = %v; want ErrBadOutput", err)
	}
	// An unreadable socklen is reported.
	if _, err := Outputs(d, [6]uint64{3, 1, 4, 0x10300, 0x99999}, 0, m.read); err == nil {
		t.Error("unreadable socklen: no error")
	}
}

func TestOutputsIovec(t *testing.T) {
	m := newFakeMem(0x20000, 0x1000)
	iov := uint64(0x20000)
	m.putIovecs(iov, [2]uint64{0x30000, 10}, [2]uint64{0x40000, 0}, [2]uint64{0x50000, 100}, [2]uint64{0x60000, 50})
	d := mustLookup(t, unix.SYS_READV)

	// 70 bytes: the first buffer full, the empty one skipped, 60 in the third, none in the fourth.
	got, err := Outputs(d, [6]uint64{3, iov, 4}, 70, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{0x30000, 10}, {0x50000, 60}}; !reflect.DeepEqual(got, want) {
		t.Errorf("readv ranges %v; want %v", got, want)
	}
	// Nothing read: the iovec array is not even looked at.
	m.reads = 0
	if got, err := Outputs(d, [6]uint64{3, iov, 4}, 0, m.read); err != nil || got != nil || m.reads != 0 {
		t.Errorf("readv = 0: %v, %v, %d reads", got, err, m.reads)
	}
	// More bytes than the buffers hold.
	if _, err := Outputs(d, [6]uint64{3, iov, 4}, 500, m.read); !errors.Is(err, ErrBadOutput) {
		t.Errorf("overfull readv: err = %v", err)
	}
	// More iovecs than the kernel allows.
	if _, err := Outputs(d, [6]uint64{3, iov, 5000}, 10, m.read); !errors.Is(err, ErrBadOutput) {
		t.Errorf("5000 iovecs: err = %v", err)
	}
	// preadv2 has the same layout.
	d = mustLookup(t, unix.SYS_PREADV2)
	got, err = Outputs(d, [6]uint64{3, iov, 4, 0, 0, 0}, 160, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{0x30000, 10}, {0x50000, 100}, {0x60000, 50}}; !reflect.DeepEqual(got, want) {
		t.Errorf("preadv2 ranges %v; want %v", got, want)
	}
}

// putMsghdr writes a struct msghdr at addr.
func (m *fakeMem) putMsghdr(addr, name uint64, namelen uint32, iov, iovlen, control, controllen uint64) {
	m.put64(addr+uint64(offMsgName), name)
	m.put32(addr+uint64(offMsgNamelen), namelen)
	m.put64(addr+uint64(offMsgIov), iov)
	m.put64(addr+uint64(offMsgIovlen), iovlen)
	m.put64(addr+uint64(offMsgControl), control)
	m.put64(addr+uint64(offMsgControllen), controllen)
}

func TestOutputsMsghdr(t *testing.T) {
	m := newFakeMem(0x20000, 0x1000)
	msg, iov := uint64(0x20000), uint64(0x20100)
	m.putIovecs(iov, [2]uint64{0x30000, 8}, [2]uint64{0x40000, 64})
	m.putMsghdr(msg, 0x20200, 16, iov, 2, 0x20300, 24)
	d := mustLookup(t, unix.SYS_RECVMSG)
	got, err := Outputs(d, [6]uint64{3, msg, 0}, 20, m.read)
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{msg, sizeofMsghdr}, {0x20200, 16}, {0x30000, 8}, {0x40000, 12}, {0x20300, 24}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recvmsg ranges %v; want %v", got, want)
	}
	// No name, no control data: only the msghdr and the data.
	m.putMsghdr(msg, 0, 0, iov, 2, 0, 0)
	got, err = Outputs(d, [6]uint64{3, msg, 0}, 4, m.read)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Range{{msg, sizeofMsghdr}, {0x30000, 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("plain recvmsg ranges %v; want %v", got, want)
	}
	// Failed: nothing, and nothing read.
	m.reads = 0
	if got, err := Outputs(d, [6]uint64{3, msg, 0}, -int64(unix.EAGAIN), m.read); got != nil || err != nil || m.reads != 0 {
		t.Errorf("failed recvmsg: %v, %v, %d reads", got, err, m.reads)
	}
}

func TestOutputsMmsghdr(t *testing.T) {
	m := newFakeMem(0x20000, 0x1000)
	vec, iov0, iov1 := uint64(0x20000), uint64(0x20400), uint64(0x20500)
	m.putIovecs(iov0, [2]uint64{0x30000, 100})
	m.putIovecs(iov1, [2]uint64{0x40000, 100})
	m.putMsghdr(vec, 0, 0, iov0, 1, 0, 0)
	m.put32(vec+uint64(offMmsgLen), 7)
	e1 := vec + uint64(sizeofMmsghdr)
	m.putMsghdr(e1, 0x20600, 16, iov1, 1, 0, 0)
	m.put32(e1+uint64(offMmsgLen), 9)
	d := mustLookup(t, unix.SYS_RECVMMSG)
	got, err := Outputs(d, [6]uint64{3, vec, 8, 0, 0x20700}, 2, m.read)
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{
		{vec, sizeofMmsghdr}, {0x30000, 7},
		{e1, sizeofMmsghdr}, {0x20600, 16}, {0x40000, 9},
		{0x20700, sizeofTimespec},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("recvmmsg ranges %v; want %v", got, want)
	}
}

func TestOutputsTooLarge(t *testing.T) {
	cases := []struct {
		nr   int
		args [6]uint64
		ret  int64
	}{
		{unix.SYS_READ, [6]uint64{3, 0x1000, 1 << 30}, MaxOut + 1},
		{unix.SYS_EPOLL_WAIT, [6]uint64{3, 0x1000, 1 << 30}, MaxOut},
		{unix.SYS_POLL, [6]uint64{0x1000, 1 << 62, 0}, 0},
		{unix.SYS_RT_SIGPROCMASK, [6]uint64{0, 0, 0x1000, 1 << 40}, 0},
		{unix.SYS_MINCORE, [6]uint64{0, 1 << 62, 0x1000}, 0},
	}
	for _, c := range cases {
		d := mustLookup(t, c.nr)
		if _, err := Outputs(d, c.args, c.ret, noRead); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s: err = %v; want ErrTooLarge", d.Name, err)
		}
	}
	// Exactly MaxOut is allowed.
	d := mustLookup(t, unix.SYS_READ)
	if got, err := Outputs(d, [6]uint64{3, 0x1000, MaxOut}, MaxOut, noRead); err != nil || got[0].Len != MaxOut {
		t.Errorf("read of MaxOut: %v, %v", got, err)
	}
	// A range that wraps around the address space.
	if _, err := Outputs(d, [6]uint64{3, ^uint64(0) - 10, 100}, 100, noRead); !errors.Is(err, ErrBadOutput) {
		t.Errorf("wrapping range: err = %v", err)
	}
}

// FuzzOutputs feeds arbitrary arguments and tracee memory to Outputs: it
// must never panic, and whatever it returns must respect MaxOut.
func FuzzOutputs(f *testing.F) {
	f.Add(unix.SYS_RECVMSG, uint64(0x20000), uint64(2), int64(20), make([]byte, 256))
	f.Add(unix.SYS_RECVMMSG, uint64(0x20000), uint64(4), int64(2), make([]byte, 256))
	f.Add(unix.SYS_READV, uint64(0x20000), uint64(3), int64(100), make([]byte, 64))
	f.Add(unix.SYS_GETSOCKNAME, uint64(0x20000), uint64(0x20010), int64(0), []byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, nr int, a1, a2 uint64, ret int64, mem []byte) {
		d, ok := Lookup(nr)
		if !ok {
			return
		}
		m := &fakeMem{base: 0x20000, b: mem}
		args := [6]uint64{3, a1, a2, a2, a2, a2}
		rs, err := Outputs(d, args, ret, m.read)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Len <= 0 || r.Len > MaxOut || r.Addr == 0 {
				t.Fatalf("%s: bad range %+v", d.Name, r)
			}
		}
	})
}
