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

// intelAVX512 is the layout of the CPU that recorded the test file: an
// Intel CPU with AVX-512 (and the room of MPX's components, 3 and 4, which
// its kernel does not save); amdAVX512 is an AMD one's (Zen 4, which CI
// runs on too). CPUID leaf 0xD gave them.
var intelAVX512, amdAVX512 = layoutOf(map[int][2]uint32{2: {576, 256}, 5: {1088, 64}, 6: {1152, 512}, 7: {1664, 1024}}),
	layoutOf(map[int][2]uint32{2: {576, 256}, 5: {832, 64}, 6: {896, 512}, 7: {1408, 1024}})

func layoutOf(m map[int][2]uint32) XSaveLayout {
	var l XSaveLayout
	for i, c := range m {
		l[i].Offset, l[i].Size = c[0], c[1]
	}
	return l
}

// checkCarried compares what a thread holds after SetXState(want), got,
// laid out as here, with want, laid out as from: the x87/SSE area, and
// each component want has in use that this CPU saves.
func checkCarried(t *testing.T, got, want []byte, from, here XSaveLayout) {
	t.Helper()
	le := binary.LittleEndian
	if !bytes.Equal(got[:xsaveUserMask], want[:xsaveUserMask]) {
		t.Errorf("the x87/SSE area was not carried over")
	}
	mask, bv := le.Uint64(got[xsaveUserMask:]), le.Uint64(want[xsaveBV:])
	if g := le.Uint64(got[xsaveBV:]); g != bv&mask {
		t.Errorf("components in use %#x, want %#x (%#x of which this CPU saves %#x)", g, bv&mask, bv, mask)
	}
	for i := 2; i < 63; i++ {
		if bv&mask&(1<<i) == 0 {
			continue
		}
		at, to := from[i], here[i]
		if !bytes.Equal(got[to.Offset:to.Offset+to.Size], want[at.Offset:at.Offset+at.Size]) {
			t.Errorf("component %d (%d bytes at %d, at %d here) was not carried over", i, at.Size, at.Offset, to.Offset)
		}
	}
}

// writeXState writes x, laid out as from says, into a stopped thread, reads
// it back and hands check what the thread holds, with this CPU's layout.
func writeXState(t *testing.T, x []byte, from *XSaveLayout, check func(got []byte, here XSaveLayout)) {
	t.Helper()
	onStoppedSleeper(t, func(pid int, mem *Mem) error {
		orig, err := GetXState(pid)
		if err != nil {
			return err
		}
		here := LocalXSaveLayout(XSaveMask(orig))
		t.Logf("this kernel's image: %d bytes, mask %#x, opmask at %d", len(orig), XSaveMask(orig), here[5].Offset)
		if err := SetXState(pid, x, from); err != nil {
			return err
		}
		got, err := GetXState(pid)
		if err != nil {
			return err
		}
		if len(got) != len(orig) {
			t.Errorf("image of %d bytes after the write, %d before", len(got), len(orig))
		}
		check(got, here)
		return SetXState(pid, orig, nil)
	})
}

func TestXStateFromAnotherCPU(t *testing.T) {
	rec := recordedXState(t)
	writeXState(t, rec, &intelAVX512, func(got []byte, here XSaveLayout) {
		checkCarried(t, got, rec, intelAVX512, here)
	})
}

// A file older than the layout's record (7.1) names no layout: its image
// is taken as this CPU lays it out when its size says so, else AVX alone
// is carried (the test file's, recorded on an Intel CPU, on an AMD one).
func TestXStateWithoutLayout(t *testing.T) {
	rec := recordedXState(t)
	writeXState(t, rec, nil, func(got []byte, here XSaveLayout) {
		want := rec
		if layoutEnd(here, XSaveMask(rec)) != len(rec) {
			t.Logf("this CPU lays the image out otherwise: AVX alone is carried")
			want = bytes.Clone(rec)
			binary.LittleEndian.PutUint64(want[xsaveBV:], binary.LittleEndian.Uint64(rec[xsaveBV:])&(xsaveLegacyBV|4))
		}
		checkCarried(t, got, want, intelAVX512, here)
	})
}

// fitXState moves each component from the recording CPU's offset to this
// one's, whichever kind of CPU each is; the machine the test runs on does
// not matter.
func TestFitXStateBetweenLayouts(t *testing.T) {
	le := binary.LittleEndian
	image := func(l XSaveLayout, mask uint64, fill bool) []byte {
		x := make([]byte, layoutEnd(l, mask))
		le.PutUint64(x[xsaveUserMask:], mask)
		if fill {
			for i := range x[:xsaveUserMask] {
				x[i] = byte(i)
			}
			for i := 2; i < 64; i++ {
				if mask&(1<<i) != 0 {
					for k := range l[i].Size {
						x[l[i].Offset+k] = byte(i*7 + int(k))
					}
				}
			}
			le.PutUint64(x[xsaveBV:], mask|xsaveLegacyBV)
		}
		return x
	}
	const mask = 0xe7
	for _, c := range []struct {
		name     string
		from, to XSaveLayout
	}{{"intel to amd", intelAVX512, amdAVX512}, {"amd to intel", amdAVX512, intelAVX512}, {"same", amdAVX512, amdAVX512}} {
		t.Run(c.name, func(t *testing.T) {
			x := image(c.from, mask, true)
			got := fitXState(x, image(c.to, mask, false), &c.from, c.to)
			if len(got) != layoutEnd(c.to, mask) {
				t.Fatalf("%d bytes, want %d", len(got), layoutEnd(c.to, mask))
			}
			checkCarried(t, got, x, c.from, c.to)
			// Without the layout, only a same-sized image is taken as laid
			// out here; else AVX alone.
			got = fitXState(x, image(c.to, mask, false), nil, c.to)
			want := x
			if layoutEnd(c.to, mask) != len(x) {
				want = bytes.Clone(x)
				le.PutUint64(want[xsaveBV:], mask&(xsaveLegacyBV|4))
			}
			checkCarried(t, got, want, c.from, c.to)
		})
	}
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
			avx := LocalXSaveLayout(here)[2]
			for i := int(avx.Offset); i < int(avx.Offset+avx.Size); i++ {
				x[i] = byte(3 * i)
			}
			bv |= 4
		}
		le.PutUint64(x[xsaveUserMask:], here|1<<missing)
		le.PutUint64(x[xsaveBV:], bv)
		if err := SetXState(pid, x, nil); err != nil {
			return err
		}
		got, err := GetXState(pid)
		if err != nil {
			return err
		}
		if le.Uint64(got[xsaveBV:])&(1<<missing) != 0 {
			t.Errorf("component %d, which this CPU lacks, is in use after the write", missing)
		}
		l := LocalXSaveLayout(here)
		checkCarried(t, got, x, l, l)
		return SetXState(pid, orig, nil)
	})
}

// LocalXSaveMask, read from XCR0, is the feature mask the kernel gives a
// thread's image on this machine.
func TestLocalXSaveMask(t *testing.T) {
	rec := recordedXState(t)
	writeXState(t, rec, &intelAVX512, func(got []byte, here XSaveLayout) {
		if m, want := LocalXSaveMask(), XSaveMask(got); m != want {
			t.Errorf("XCR0 %#x, a thread's image says %#x", m, want)
		}
	})
}
