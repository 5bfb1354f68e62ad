package proc

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/tprec/tprec/format"
)

// recordedXState is the end thread's XSAVE image of a checkpoint recorded on
// a CPU with AVX-512 and neither protection keys nor AMX: 2,688 bytes, mask
// 0xe7. A machine whose kernel saves more (11,008 bytes with AMX) refused it
// with EFAULT, and every replay of the file failed in its rebuild.
func recordedXState(t *testing.T) []byte {
	t.Helper()
	f, err := format.Open("../replayer/testdata/memcached-end-after-exit.tpc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x := f.Checkpoint.End.XState
	if len(x) != 2688 || binary.LittleEndian.Uint64(x[xsaveUserMask:]) != 0xe7 {
		t.Fatalf("the test file's image has %d bytes, mask %#x: not the one this test is about", len(x), binary.LittleEndian.Uint64(x[xsaveUserMask:]))
	}
	return x
}

// checkCarried compares what a thread holds after SetXState(want) with want:
// the x87/SSE area, and each component want has in use that this CPU saves.
func checkCarried(t *testing.T, got, want []byte) {
	t.Helper()
	le := binary.LittleEndian
	if !bytes.Equal(got[:xsaveUserMask], want[:xsaveUserMask]) {
		t.Errorf("the x87/SSE area was not carried over")
	}
	here, bv := le.Uint64(got[xsaveUserMask:]), le.Uint64(want[xsaveBV:])
	if g := le.Uint64(got[xsaveBV:]); g != bv&here {
		t.Errorf("components in use %#x, want %#x (%#x of which this CPU saves %#x)", g, bv&here, bv, here)
	}
	for i := 2; i < 63; i++ {
		if bv&here&(1<<i) == 0 {
			continue
		}
		off, size := xsaveComponent(i)
		if !bytes.Equal(got[off:off+size], want[off:off+size]) {
			t.Errorf("component %d (%d bytes at %d) was not carried over", i, size, off)
		}
	}
}

func TestXStateFromAnotherCPU(t *testing.T) {
	rec := recordedXState(t)
	onStoppedSleeper(t, func(pid int, mem *Mem) error {
		orig, err := GetXState(pid)
		if err != nil {
			return err
		}
		t.Logf("this kernel's image: %d bytes, mask %#x", len(orig), binary.LittleEndian.Uint64(orig[xsaveUserMask:]))
		if err := SetXState(pid, rec); err != nil {
			return err
		}
		got, err := GetXState(pid)
		if err != nil {
			return err
		}
		if len(got) != len(orig) {
			t.Errorf("image of %d bytes after the write, %d before", len(got), len(orig))
		}
		checkCarried(t, got, rec)
		return SetXState(pid, orig)
	})
}

// An image that uses a component this CPU does not save (here: the first
// one, from 3 up, missing from this kernel's mask) is written without it;
// what it shares with this CPU is kept.
func TestXStateWithComponentThisCPULacks(t *testing.T) {
	onStoppedSleeper(t, func(pid int, mem *Mem) error {
		le := binary.LittleEndian
		orig, err := GetXState(pid)
		if err != nil {
			return err
		}
		here := le.Uint64(orig[xsaveUserMask:])
		missing := 3
		for ; missing < 63 && here&(1<<missing) != 0; missing++ {
		}
		x := bytes.Clone(orig)
		for i := 160; i < 416; i++ { // xmm0-15
			x[i] = byte(i)
		}
		bv := le.Uint64(x[xsaveBV:]) | xsaveLegacyBV | 1<<missing
		if here&4 != 0 {
			off, size := xsaveComponent(2)
			for i := off; i < off+size; i++ {
				x[i] = byte(3 * i)
			}
			bv |= 4
		}
		le.PutUint64(x[xsaveUserMask:], here|1<<missing)
		le.PutUint64(x[xsaveBV:], bv)
		if err := SetXState(pid, x); err != nil {
			return err
		}
		got, err := GetXState(pid)
		if err != nil {
			return err
		}
		if le.Uint64(got[xsaveBV:])&(1<<missing) != 0 {
			t.Errorf("component %d, which this CPU lacks, is in use after the write", missing)
		}
		checkCarried(t, got, x)
		return SetXState(pid, orig)
	})
}
