package recorder

import (
	"strings"
	"testing"

	"github.com/tprec/tprec/format"
	"golang.org/x/sys/unix"
)

// The eBPF reader may take a vfork's record after the same thread made its
// next vfork: each record gets the capture of its own child, whatever the
// order, and a child no capture saw is said so.
func TestVforkCapturesMatchTheirChild(t *testing.T) {
	var v vforkCaptures
	for _, child := range []int{100, 101} {
		v.put(7, &vforkCapture{child: child, done: true, outs: []format.OutBuf{{Addr: uint64(child), Data: []byte{1}}}})
	}
	if c := v.get(7); c == nil || c.child != 101 {
		t.Fatalf("get: %+v, want the latest capture (child 101)", c)
	}
	for _, child := range []int{100, 101} {
		rec := format.Syscall{Seq: uint64(child), Tid: 7, Nr: unix.SYS_VFORK, Ret: int64(child)}
		if why := v.outputs(&rec); why != "" {
			t.Fatalf("vfork returning %d: %s", child, why)
		}
		if len(rec.Out) != 1 || rec.Out[0].Addr != uint64(child) {
			t.Errorf("vfork returning %d got the outputs %+v", child, rec.Out)
		}
	}
	// Out of order too.
	for _, child := range []int{300, 301} {
		v.put(9, &vforkCapture{child: child, done: true, outs: []format.OutBuf{{Addr: uint64(child)}}})
	}
	for _, child := range []int{301, 300} {
		rec := format.Syscall{Tid: 9, Nr: unix.SYS_CLONE3, Ret: int64(child)}
		if why := v.outputs(&rec); why != "" || len(rec.Out) != 1 || rec.Out[0].Addr != uint64(child) {
			t.Errorf("clone3 returning %d: %q, outputs %+v", child, why, rec.Out)
		}
	}
	rec := format.Syscall{Seq: 3, Tid: 7, Nr: unix.SYS_VFORK, Ret: 102}
	if why := v.outputs(&rec); !strings.Contains(why, "did not see") {
		t.Errorf("a vfork whose child was not captured: %q", why)
	}
	for i := 0; i < 2*maxPendingVforks; i++ {
		v.put(8, &vforkCapture{child: 200 + i})
	}
	if n := len(v.tid[8]); n != maxPendingVforks {
		t.Errorf("%d captures kept unmatched, want at most %d", n, maxPendingVforks)
	}
}
