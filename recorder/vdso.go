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
	rets []uint64 // offsets of the stub's `ret` instructions
	nr   int
	// body: the function's first original bytes (up to 40), for the
	// clock log's stubs (clocklog.go), which run the function itself.
	body []byte
}

var vdsoRedirects = []struct {
	sym  string
	nr   int
	stub func(nr int) vdsoCode
}{
	{"__vdso_clock_gettime", unix.SYS_CLOCK_GETTIME, vdsoStub},
	{"__vdso_gettimeofday", unix.SYS_GETTIMEOFDAY, vdsoStub},
	{"__vdso_time", unix.SYS_TIME, vdsoStub},
	{"__vdso_getcpu", unix.SYS_GETCPU, vdsoStub},
	{"__vdso_clock_getres", unix.SYS_CLOCK_GETRES, vdsoStub},
	{"__vdso_getrandom", unix.SYS_GETRANDOM, getrandomStub},
}

// vdsoCode is a stub and where its `syscall` and `ret` instructions are.
type vdsoCode struct {
	code []byte
	sys  uint64
	rets []uint64
}

// vdsoStub is `mov eax, NR; syscall; ret`.
func vdsoStub(nr int) vdsoCode {
	b := []byte{0xb8, 0, 0, 0, 0, 0x0f, 0x05, 0xc3}
	binary.LittleEndian.PutUint32(b[1:], uint32(nr))
	return vdsoCode{code: b, sys: 5, rets: []uint64{7}}
}

// getrandomStub replaces the vDSO's getrandom (Linux 6.11 and later), which
// glibc 2.41 and later call for getrandom(3) and arc4random(3): it reads the
// kernel's random generation from [vvar] and expands a ChaCha state kept in
// the process's memory, without a syscall, so a replay would neither have
// [vvar] nor the bytes. Its signature is getrandom(buf, len, flags,
// opaque_state, opaque_len); the stub makes the first three the getrandom
// syscall, whose bytes the log keeps. A caller asking for the state's
// parameters (opaque_len = ~0: glibc at start-up) gets -ENOSYS, so that a
// program the recorder launches uses the syscall from the start; one that
// set its states up before an attach has its calls go through the stub.
//
//	cmp r8, -1; je 1f; mov eax, NR; syscall; ret
//	1: mov rax, -ENOSYS; ret
func getrandomStub(nr int) vdsoCode {
	b := []byte{
		0x49, 0x83, 0xf8, 0xff, // cmp r8, -1
		0x74, 0x08, // je +8
		0xb8, 0, 0, 0, 0, // mov eax, NR
		0x0f, 0x05, // syscall
		0xc3,                                     // ret
		0x48, 0xc7, 0xc0, 0xda, 0xff, 0xff, 0xff, // mov rax, -38
		0xc3, // ret
	}
	binary.LittleEndian.PutUint32(b[7:], uint32(nr))
	return vdsoCode{code: b, sys: 11, rets: []uint64{13, 21}}
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
	syms, err := vdsoSymbols(img)
	if err != nil {
		return nil, fmt.Errorf("patch vdso: %w", err)
	}
	addrOf := map[string]uint64{}
	sizeOf := map[string]uint64{}
	for _, s := range syms {
		addrOf[s.Name] = vm.Start + s.Off
		sizeOf[s.Name] = s.Size
	}
	p := &vdsoPatch{start: vm.Start, end: vm.End}
	var bodies []vdsoRange // the patched functions past their stubs
	for _, r := range vdsoRedirects {
		a, ok := addrOf[r.sym]
		if !ok {
			continue
		}
		c := r.stub(r.nr)
		stub := c.code
		if a < vm.Start || a+uint64(len(stub)) > vm.End {
			return nil, fmt.Errorf("patch vdso: %s at %#x outside the image", r.sym, a)
		}
		if uint64(len(stub)) > sizeOf[r.sym] {
			return nil, fmt.Errorf("patch vdso: %s is %d bytes, its stub %d", r.sym, sizeOf[r.sym], len(stub))
		}
		orig := append([]byte(nil), img[a-vm.Start:a-vm.Start+uint64(len(stub))]...)
		body := append([]byte(nil), img[a-vm.Start:min(a-vm.Start+40, uint64(len(img)))]...)
		p.sites = append(p.sites, vdsoSite{addr: a, orig: orig, stub: stub, rets: c.rets, nr: r.nr, body: body})
		if _, logged := clockLoggable[r.nr]; logged {
			// The clock log runs the function's body: neither the
			// trampoline nor the recorder's injections may use it.
			continue
		}
		bodies = append(bodies, vdsoRange{a + uint64(len(stub)), a + sizeOf[r.sym]})
		if p.insn == 0 {
			p.insn = a + c.sys
		}
	}
	if p.insn == 0 {
		// A vDSO with only the logged functions: their stubs serve
		// until the clock log is installed, which then leaves the
		// recorder its own (clockLog.insn).
		for _, s := range p.sites {
			p.insn = s.addr + 5
			break
		}
	}
	if p.insn == 0 {
		return nil, fmt.Errorf("patch vdso: no known time function in the vDSO")
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

// vdsoSymbol is a dynamic symbol of a vDSO image: its offset from the
// image's start (where the mapping starts) and its size.
type vdsoSymbol struct {
	Name      string
	Off, Size uint64
}

// vdsoSymbols lists the dynamic symbols of the vDSO image img.
func vdsoSymbols(img []byte) ([]vdsoSymbol, error) {
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("parse image: %w", err)
	}
	var load uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			load = p.Vaddr - p.Off
			break
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("symbols: %w", err)
	}
	out := make([]vdsoSymbol, len(syms))
	for i, s := range syms {
		out[i] = vdsoSymbol{s.Name, s.Value - load, s.Size}
	}
	return out, nil
}

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
// from a stub's syscall sits on the stub's `ret`). At a `ret` (`mov eax`,
// `syscall`, `ret` at 0, 5 and 7 in most stubs) the `ret` is done here;
// anywhere else in a stub nothing has been done that the function does not
// do again when entered from its start with the same arguments, so it is.
// It reports whether it moved the thread.
func (p *vdsoPatch) leave(regs *format.Regs, mem *proc.Mem) (bool, error) {
	for _, s := range p.sites {
		off := regs.Rip - s.addr
		if off == 0 || off >= uint64(len(s.stub)) {
			continue
		}
		if !slices.Contains(s.rets, off) {
			regs.Rip = s.addr
			return true, nil
		}
		var b [8]byte
		if err := mem.ReadAt(b[:], regs.Rsp); err != nil {
			return false, err
		}
		regs.Rip = binary.LittleEndian.Uint64(b[:])
		regs.Rsp += 8
		return true, nil
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
