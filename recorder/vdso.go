package recorder

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// vdsoPatch redirects the vDSO's time functions to the real syscalls. They read
// the TSC and the kernel's vvar page without entering the kernel, so a syscall
// log alone cannot replay them; with the patch each call is an ordinary syscall
// the log captures. Each entry point becomes `mov eax, NR; syscall; ret`: the
// arguments are already in the syscall argument registers (the C calling
// convention and the syscall convention agree on rdi, rsi, rdx). The patched
// clock_gettime also gives the recorder a `syscall` instruction to inject
// through into a shadow (dropFiles); calls into the target go through the
// trampoline placed with the patch.
type vdsoPatch struct {
	sites      []vdsoSite
	insn       uint64 // address of a patched `syscall` instruction
	start, end uint64 // the [vdso] mapping
	// tramp is the code the target's own threads make the recorder's
	// calls through (proc.Trampoline), in bytes of the vDSO no code uses;
	// trampSite puts them back at the end.
	tramp     *proc.Trampoline
	trampSite vdsoSite
}

type vdsoSite struct {
	addr uint64
	orig []byte
	stub []byte
}

var vdsoRedirects = []struct {
	sym string
	nr  int
}{
	{"__vdso_clock_gettime", unix.SYS_CLOCK_GETTIME},
	{"__vdso_gettimeofday", unix.SYS_GETTIMEOFDAY},
	{"__vdso_time", unix.SYS_TIME},
	{"__vdso_getcpu", unix.SYS_GETCPU},
	{"__vdso_clock_getres", unix.SYS_CLOCK_GETRES},
}

func vdsoStub(nr int) []byte {
	b := []byte{0xb8, 0, 0, 0, 0, 0x0f, 0x05, 0xc3}
	binary.LittleEndian.PutUint32(b[1:], uint32(nr))
	return b
}

// patchVDSO patches the [vdso] of a stopped process, unless one of its
// threads is stopped inside it (rips), anywhere but at an entry point:
// resumed inside an entry point's first bytes it would run the middle of a
// stub, and resumed further in a function it would go on reading the clock
// from [vvar], which the first interval's replay does not have. Then it
// returns nil and no error, and the caller tries again at a later stop.
func patchVDSO(mem *proc.Mem, maps []format.Mapping, rips []uint64) (*vdsoPatch, error) {
	p, err := planVDSO(mem, maps)
	if err != nil {
		return nil, err
	}
	for _, rip := range rips {
		if rip >= p.start && rip < p.end && !slices.ContainsFunc(p.sites, func(s vdsoSite) bool { return s.addr == rip }) {
			return nil, nil
		}
	}
	for i, s := range p.sites {
		if err := mem.WriteAt(s.stub, s.addr); err != nil {
			p.sites = p.sites[:i]
			p.undo(mem)
			return nil, fmt.Errorf("patch vdso: %w", err)
		}
	}
	if err := mem.WriteAt(p.trampSite.stub, p.trampSite.addr); err != nil {
		p.trampSite = vdsoSite{}
		p.undo(mem)
		return nil, fmt.Errorf("patch vdso: write the trampoline: %w", err)
	}
	return p, nil
}

// planVDSO finds the entry points to patch and their original bytes.
func planVDSO(mem *proc.Mem, maps []format.Mapping) (*vdsoPatch, error) {
	var vm *format.Mapping
	for i := range maps {
		if maps[i].Path == "[vdso]" {
			vm = &maps[i]
		}
	}
	if vm == nil {
		return nil, fmt.Errorf("patch vdso: the process has no [vdso] mapping")
	}
	img := make([]byte, vm.End-vm.Start)
	if err := mem.ReadAt(img, vm.Start); err != nil {
		return nil, fmt.Errorf("patch vdso: %w", err)
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("patch vdso: parse image: %w", err)
	}
	var loadVaddr uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			loadVaddr = p.Vaddr - p.Off
			break
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("patch vdso: symbols: %w", err)
	}
	addrOf := map[string]uint64{}
	sizeOf := map[string]uint64{}
	for _, s := range syms {
		addrOf[s.Name] = vm.Start + s.Value - loadVaddr
		sizeOf[s.Name] = s.Size
	}
	p := &vdsoPatch{start: vm.Start, end: vm.End}
	for _, r := range vdsoRedirects {
		a, ok := addrOf[r.sym]
		if !ok {
			continue
		}
		stub := vdsoStub(r.nr)
		if a < vm.Start || a+uint64(len(stub)) > vm.End {
			return nil, fmt.Errorf("patch vdso: %s at %#x outside the image", r.sym, a)
		}
		orig := append([]byte(nil), img[a-vm.Start:a-vm.Start+uint64(len(stub))]...)
		p.sites = append(p.sites, vdsoSite{addr: a, orig: orig, stub: stub})
		if p.insn == 0 {
			p.insn = a + 5
		}
	}
	if p.insn == 0 {
		return nil, fmt.Errorf("patch vdso: no known time function in the vDSO")
	}
	var bodies []vdsoRange
	for _, r := range vdsoRedirects {
		if a, ok := addrOf[r.sym]; ok {
			bodies = append(bodies, vdsoRange{a + uint64(len(vdsoStub(r.nr))), a + sizeOf[r.sym]})
		}
	}
	at, err := trampolineSite(img, vm.Start, bodies, uint64(proc.TrampolineSize()))
	if err != nil {
		return nil, err
	}
	p.tramp = proc.NewTrampoline(at)
	img0 := p.tramp.Image()
	p.trampSite = vdsoSite{addr: at, orig: append([]byte(nil), img[at-vm.Start:at-vm.Start+uint64(len(img0))]...), stub: img0}
	return p, nil
}

type vdsoRange struct{ start, end uint64 }

// trampolineSite chooses where the trampoline goes: in the padding after
// the end of the vDSO's ELF image (its sections and section headers), which
// nothing reads, when the page has room; else in the body of a patched
// function past its stub, which no thread can enter any more (bodies). The
// vDSO mapping starts at base; the address is 16-byte aligned.
func trampolineSite(img []byte, base uint64, bodies []vdsoRange, size uint64) (uint64, error) {
	if len(img) < 64 {
		return 0, fmt.Errorf("patch vdso: image of %d bytes", len(img))
	}
	// e_shoff, e_shentsize, e_shnum of the ELF64 header.
	end := binary.LittleEndian.Uint64(img[0x28:]) + uint64(binary.LittleEndian.Uint16(img[0x3a:]))*uint64(binary.LittleEndian.Uint16(img[0x3c:]))
	if f, err := elf.NewFile(bytes.NewReader(img)); err == nil {
		for _, s := range f.Sections {
			if s.Type != elf.SHT_NOBITS && s.Offset+s.FileSize > end {
				end = s.Offset + s.FileSize
			}
		}
		for _, p := range f.Progs {
			if p.Off+p.Filesz > end {
				end = p.Off + p.Filesz
			}
		}
	}
	align := func(a uint64) uint64 { return (a + 15) &^ 15 }
	if end = align(end); end+size <= uint64(len(img)) {
		return base + end, nil
	}
	for _, b := range bodies {
		if s := align(b.start); s+size <= b.end {
			return s, nil
		}
	}
	return 0, fmt.Errorf("patch vdso: no room for the recorder's %d-byte trampoline (%d bytes after the image, none in the patched functions)", size, uint64(len(img))-min(end, uint64(len(img))))
}

// leave moves a stopped thread out of the stubs, so that undo cannot leave
// it in the middle of the original code (a thread interrupted on its way back
// from a stub's syscall sits on the stub's `ret`). A stub's instructions start
// at 0 (`mov eax`), 5 (`syscall`) and 7 (`ret`): at 5 the call has not been
// made and the function is entered again from its start, with the same
// arguments; at 7 the `ret` is done here. It reports whether it moved the
// thread.
func (p *vdsoPatch) leave(regs *format.Regs, mem *proc.Mem) (bool, error) {
	for _, s := range p.sites {
		switch regs.Rip - s.addr {
		case 5:
			regs.Rip = s.addr
			return true, nil
		case 7:
			var b [8]byte
			if err := mem.ReadAt(b[:], regs.Rsp); err != nil {
				return false, err
			}
			regs.Rip = binary.LittleEndian.Uint64(b[:])
			regs.Rsp += 8
			return true, nil
		}
	}
	return false, nil
}

// undo writes the original bytes back.
func (p *vdsoPatch) undo(mem *proc.Mem) error {
	var first error
	for _, s := range append(p.sites, p.trampSite) {
		if s.addr == 0 {
			continue
		}
		if err := mem.WriteAt(s.orig, s.addr); err != nil && first == nil {
			first = err
		}
	}
	p.sites, p.trampSite = nil, vdsoSite{}
	return first
}
