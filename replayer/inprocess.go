package replayer

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/internal/x86"
	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

// Calls completed inside the replayed process, without a ptrace stop.
//
// Most calls replay answers from the log are made by a `syscall`
// instruction right after `mov eax, NR` (5 bytes: b8 NR 00 00 00): glibc's
// wrappers of write, epoll_wait, openat, fstat, close and most others, and
// the recorder's own replacement of the vDSO's time functions, `mov eax,
// NR; syscall; ret` (recorder/vdso.go). A busy server makes hundreds of
// thousands of such calls a second, each one a ptrace round trip in replay
// (about 10 us on the machines measured), while its record is only a result
// and a few bytes to copy.
//
// Run (not a debugger's session) maps a region into the replayed process,
// shared with the replayer, and overwrites the `mov` before each such
// `syscall` the log shows with a 5-byte jmp to code there. Before it resumes
// the current thread, the engine writes into the region the records that
// thread will make next, as long as it can complete them there (arm). The
// code compares each call's number, arguments and address with the next
// record, writes the record's outputs, sets rax to its result and rcx and
// r11 as `syscall` sets them, and goes on after the `syscall`; a call that
// does not match, or one past the records armed, goes on to the original
// `syscall` with every register as the `mov` would have left it, where the
// engine sees it as before (and reports a divergence if it is one). At the
// next stop the engine takes the count of records done (sync) and moves past
// them.
//
// The code uses only rax, rcx and r11 (which `syscall` overwrites anyway)
// and saves and restores rdi, rsi and the arithmetic flags in the region: it
// never touches the program's stack (the red zone below it may hold live
// data). Records are armed only where nothing else must happen between them:
// calls of the current thread that replay answers from the log (not futex,
// whose replay may end other threads), no recorded signal after them,
// outputs on pages already served, not the last call of the window, and the
// call after each is the same thread's. So no stop can come while a thread
// is in that code.

// Layout of the region: code, then the data the code reads and writes.
const (
	ipCodeSize = 16 * pageSize
	ipDataSize = 256 * pageSize
	ipSize     = ipCodeSize + ipDataSize // one view
	// data, from ipCodeSize
	idCursor  = 0  // records done since the last arm
	idCount   = 8  // records armed
	idFlags   = 16 // ax after lahf; seto al
	idNr      = 24 // the number of the call in progress
	idSys     = 32 // the address of its `syscall`
	idRdi     = 40
	idRsi     = 48
	idRet     = 56
	idRetAddr = 64
	idRcx     = 72 // rcx and r11 at entry, put back for the `syscall`
	idR11     = 80
	idNext    = 88 // offset in the data of the next record
	idRec     = 96 // the record in progress
	// 128 to 512: the end search's (endsearch.go)
	idRecords = 512
	// a record
	irNr      = 0
	irNArgs   = 8
	irArgs    = 16 // six
	irRet     = 64
	irRetAddr = 72 // rip after the `syscall`: what rcx holds after one
	irNOuts   = 80
	irSize    = 88 // bytes of the record, outputs included
	irOuts    = 96 // each: address, length, data padded to 8 bytes
	// ipEntrySize bounds the code of one site's entry.
	ipEntrySize = 128
	// ipMaxViews bounds the views: one per group of sites within 1 GiB
	// (the program, its libraries, the vDSO).
	ipMaxViews = 8
)

// ipStub is what precedes and makes a call the code can take over.
func ipStub(nr int) []byte {
	b := []byte{0xb8, 0, 0, 0, 0, 0x0f, 0x05}
	binary.LittleEndian.PutUint32(b[1:], uint32(nr))
	return b
}

// glibc makes read, number 0, with `xor eax, eax` (2 bytes) before the
// `syscall`, in one of two ways. In a process of several threads, after its
// cancellation check: `mov edi, [rsp+8]; xor eax, eax; syscall`
// (ipReadStub): the jmp covers the first 5 of the 6 bytes before the
// `syscall`, and the code does the `mov` itself. In a process of one thread
// (__libc_single_threaded set), at the function's start: `cmp byte
// [rip+d], 0; je threaded; xor eax, eax; syscall` (ipReadSingle): the jmp
// covers the first 5 bytes of the `cmp`, and the code compares the byte
// itself and goes on to the threaded path where the `je` would. Either
// way it leaves the flags as the `xor` does.
var (
	ipReadStub   = []byte{0x8b, 0x7c, 0x24, 0x08, 0x31, 0xc0, 0x0f, 0x05}
	ipReadSingle = []byte{0x80, 0x3d, 0, 0, 0, 0, 0x00, 0x74, 0, 0x31, 0xc0, 0x0f, 0x05} // disp32 at 2, rel8 at 8
)

// readSingle reports whether b, the 13 bytes before and of a `syscall`, are
// ipReadSingle, and returns the address of the byte it compares and of the
// `je`'s target.
func readSingle(b []byte, sys uint64) (flag, threaded uint64, ok bool) {
	for i, v := range ipReadSingle {
		if i != 2 && i != 3 && i != 4 && i != 5 && i != 8 && b[i] != v {
			return 0, 0, false
		}
	}
	flag = sys - 4 + uint64(int64(int32(binary.LittleEndian.Uint32(b[2:]))))
	threaded = sys - 2 + uint64(int64(int8(b[8])))
	return flag, threaded, true
}

// prefixByte reports whether b can be an x86-64 instruction prefix (REX,
// operand or address size, segment, lock, rep).
func prefixByte(b byte) bool {
	switch {
	case b >= 0x40 && b <= 0x4f:
		return true
	case b == 0x66, b == 0x67, b == 0xf0, b == 0xf2, b == 0xf3, b == 0x26, b == 0x2e, b == 0x36, b == 0x3e, b == 0x64, b == 0x65:
		return true
	}
	return false
}

// ipSite is a `syscall` the code takes over.
type ipSite struct {
	nr   int
	kind int // ipMov, ipRead, ipReadOne
	// flag and threaded: for ipReadOne, the byte compared and where the
	// `je` goes.
	flag, threaded uint64
}

const (
	ipMov = iota
	ipRead
	ipReadOne
)

// patchAt returns where the jmp to a site's entry goes.
func (s ipSite) patchAt(sys uint64) uint64 {
	switch s.kind {
	case ipRead:
		return sys - 6
	case ipReadOne:
		return sys - 11
	}
	return sys - 5
}

type inProcess struct {
	buf   []byte   // the memfd, mapped here: the data, then each view's code
	views []uint64 // where each view is in the process
	// used: the ranges the window's maps and calls use, the stub, and
	// the views.
	used [][2]uint64
	// landings: the pages mapped for punned jmps to land on (endsearch.go,
	// punTarget), which a later search may land on again once the one
	// that mapped it is gone: a punned jmp over a 2-byte instruction has a
	// single page within its reach, where its rel32's fixed bytes put it.
	landings map[uint64]bool
	sites    map[uint64]ipSite // by address of the `syscall`
	// The records in the data: those of owner from log position base on,
	// armed of them, of which taken were done and accounted for. A stop
	// that comes before they are all done leaves the rest for the next
	// resume: each record is written once (a trial replay stops every few
	// calls to serve a page).
	owner *rthread
	base  int
	armed int
	taken int
	done  int // records done in the process, for Result
}

func (c *inProcess) data() []byte { return c.buf[:ipDataSize] }

// setupInProcess maps the region, writes its code and patches the calls the
// log shows. It returns nil, with no error, when the replay runs without
// it: TPREPLAY_NO_IN_PROCESS is set, or no view can be placed. Under a
// debugger, which sees every call's entry and exit, it patches no call: the
// region serves the end search alone.
//
// A rel32 jump reaches 2 GiB, and a program's code, its libraries and the
// vDSO lie further apart than that, so the region has a view near each
// group of sites: its own code, and the one data part, which the memfd
// maps at every view.
func (e *engine) setupInProcess() (*inProcess, error) {
	if os.Getenv("TPREPLAY_NO_IN_PROCESS") != "" {
		return nil, nil
	}
	sites := map[uint64]ipSite{}
	tried := map[uint64]bool{}
	for i := range e.log {
		if e.dbg != nil {
			// A debugger sees every call's entry and exit: the region
			// serves the end search alone.
			break
		}
		rec := &e.log[i]
		if !e.takeable(rec) || rec.Rip < 8 || tried[rec.Rip] {
			continue
		}
		tried[rec.Rip] = true
		sys := rec.Rip - 2
		// The bytes before the `syscall`, served first in a trial replay
		// (the code is the program's: the call ran it). The byte before the
		// instruction replaced must not be able to prefix it: a REX byte
		// makes b8 `mov r8d` and 8b 7c 24 08 `mov edi, [r12+8]`.
		b, ok := e.codeBefore(sys, 6)
		switch {
		case !ok:
		case [7]byte(ipStub(rec.Nr)) == [7]byte(b[1:]) && !prefixByte(b[0]):
			sites[sys] = ipSite{nr: rec.Nr}
		case rec.Nr != unix.SYS_READ:
		case [8]byte(ipReadStub) == [8]byte(b[0:]):
			if p, ok := e.codeBefore(sys, 7); ok && !prefixByte(p[0]) {
				sites[sys] = ipSite{nr: rec.Nr, kind: ipRead}
			}
		default:
			if p, ok := e.codeBefore(sys, 12); ok && !prefixByte(p[0]) {
				if flag, threaded, ok := readSingle(p[1:], sys); ok {
					sites[sys] = ipSite{nr: rec.Nr, kind: ipReadOne, flag: flag, threaded: threaded}
				}
			}
		}
		// Else made otherwise (a call through syscall(2), a number in a
		// register): a stop each.
	}
	// Groups of sites within 1 GiB of their lowest, each with a view. The
	// end rip counts as one: an end search may need a view in reach of it
	// (endsearch.go).
	order := make([]uint64, 0, len(sites)+1)
	for s := range sites {
		order = append(order, s)
	}
	ends := []uint64{}
	if rip := e.end.Regs.Rip; rip != 0 && e.end.Kind != format.EndExit {
		ends = append(ends, rip)
	}
	// And where other threads were running at the end: their stops are
	// compared in the process too (threads.go, stopInProcess).
	for _, t := range e.endThreads() {
		if !t.InSyscall && t.Tid != e.thread.Tid {
			ends = append(ends, t.Regs.Rip)
		}
	}
	for _, rip := range ends {
		if _, ok := sites[rip]; !ok && !slices.Contains(order, rip) {
			order = append(order, rip)
		}
	}
	slices.Sort(order)
	var groups [][]uint64
	for _, s := range order {
		if n := len(groups); n > 0 && s-groups[n-1][0] < 1<<30 && len(groups[n-1]) < (ipCodeSize-pageSize)/ipEntrySize {
			groups[n-1] = append(groups[n-1], s)
		} else if n < ipMaxViews {
			groups = append(groups, []uint64{s})
		}
	}
	used := occupied(e.c, e.log)
	var views []uint64
	var placed [][]uint64
	for _, g := range groups {
		addr, ok := ipPlace(g[0], used, e.base)
		if !ok {
			continue
		}
		used = append(used, [2]uint64{addr, addr + ipSize})
		views = append(views, addr)
		placed = append(placed, g)
	}
	if len(views) == 0 {
		return nil, nil
	}
	c := &inProcess{sites: map[uint64]ipSite{}, views: views, used: append(used, [2]uint64{e.base, e.base + stubSize})}
	if err := e.mapInProcess(c, views); err != nil {
		return nil, err
	}
	for k, g := range placed {
		gs := map[uint64]ipSite{}
		for _, s := range g {
			if site, ok := sites[s]; ok {
				gs[s] = site
			}
		}
		code, entries := ipCode(views[k], gs)
		if len(code) > ipCodeSize {
			continue // cannot happen with ipEntrySize: its sites make a stop each
		}
		copy(c.buf[ipDataSize+k*ipCodeSize:], code)
		for _, sys := range g {
			if _, ok := sites[sys]; !ok {
				continue // an end rip
			}
			at := sites[sys].patchAt(sys)
			d := int64(entries[sys]) - int64(at+5)
			if d > 1<<31-1 || d < -(1<<31) {
				continue
			}
			jmp := []byte{0xe9, 0, 0, 0, 0}
			binary.LittleEndian.PutUint32(jmp[1:], uint32(int32(d)))
			if err := e.mem.WriteAt(jmp, at); err != nil {
				return nil, fmt.Errorf("in-process calls: patch %s at %#x: %w", syscalls.Name(sites[sys].nr), at, err)
			}
			c.sites[sys] = sites[sys]
		}
	}
	return c, nil
}

// codeBefore returns the n bytes before the `syscall` at sys and its own 2,
// serving them first. A page that cannot be served or read makes the call
// one that stops.
func (e *engine) codeBefore(sys uint64, n int) ([]byte, bool) {
	b := make([]byte, n+2)
	if e.touch(sys-uint64(n), n+2) != nil || e.mem.ReadAt(b, sys-uint64(n)) != nil {
		return nil, false
	}
	return b, true
}

// takeable reports whether a record is of a kind the code can complete:
// one replay answers from the log by its result and outputs alone.
func (e *engine) takeable(rec *format.Syscall) bool {
	d, ok := syscalls.Lookup(rec.Nr)
	if !ok || d.Kind != syscalls.Emulate || rec.Nr == unix.SYS_FUTEX || rec.Nr == unix.SYS_RESTART_SYSCALL || len(rec.Pages) > 0 || e.startsThread(rec) {
		return false
	}
	if _, ok := rseqRegistration(rec); ok {
		return false // the engine writes the area (rseqRegistered)
	}
	// What --output-dir saves is read from the program's memory at the
	// call's entry stop.
	return e.out == nil || !e.out.captures(rec.Nr)
}

// ipPlace finds a page-aligned address for the region within 1 GiB of near
// (a rel32 jump reaches it from 1 GiB around near) and 64 MiB away from
// every range the replayed program uses and from the stub's page.
//
// Low addresses count too: a program linked at a fixed address (Debian's
// python3.11 lies at 0x400000, its heap just above) has all of its code
// below 4 GiB, and a lower bound there left its end searches and calls
// without a view: a stop at every pass of the interpreter's loop, 11,000
// a second, where the recording made 30 million.
func ipPlace(near uint64, used [][2]uint64, stubBase uint64) (uint64, bool) {
	const step, margin, lowest = 64 << 20, 64 << 20, 16 << 20
	used = append(used, [2]uint64{stubBase, stubBase + stubSize})
	for k := 1; k <= 16; k++ {
		for _, sign := range []int64{1, -1} {
			c := int64(pageDown(near)) + sign*int64(k)*step
			if c < lowest || uint64(c)+ipSize > 0x7fff_f000_0000 {
				continue
			}
			a := uint64(c)
			free := true
			for _, u := range used {
				if a+ipSize+margin > u[0] && a < u[1]+margin {
					free = false
					break
				}
			}
			if free {
				return a, true
			}
		}
	}
	return 0, false
}

// mapInProcess creates the memfd in the stub and maps a view of it at each
// address: its code part, then the data part. It maps the whole memfd here
// too. The stub keeps no descriptor of it.
func (e *engine) mapInProcess(c *inProcess, views []uint64) error {
	s := e.stub
	name := s.base + stubScratchOff
	if err := e.mem.WriteAt([]byte("tpreplay-calls\x00"), name); err != nil {
		return fmt.Errorf("in-process calls: %w", err)
	}
	fd, err := s.injectOK("in-process calls: memfd_create", unix.SYS_MEMFD_CREATE, name, unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer s.inject(unix.SYS_CLOSE, uint64(fd))
	total := ipDataSize + len(views)*ipCodeSize
	if _, err := s.injectOK("in-process calls: ftruncate", unix.SYS_FTRUNCATE, uint64(fd), uint64(total)); err != nil {
		return err
	}
	for k, v := range views {
		for _, part := range [][3]uint64{{v, ipCodeSize, uint64(ipDataSize + k*ipCodeSize)}, {v + ipCodeSize, ipDataSize, 0}} {
			ret, err := s.injectOK("in-process calls: mmap", unix.SYS_MMAP, part[0], part[1], unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
				unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE, uint64(fd), part[2])
			if err != nil {
				return err
			}
			if uint64(ret) != part[0] {
				return fmt.Errorf("in-process calls: mmap gave %#x, not %#x", ret, part[0])
			}
		}
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", s.pid, fd), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("in-process calls: %w", err)
	}
	defer f.Close()
	if c.buf, err = unix.Mmap(int(f.Fd()), 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("in-process calls: map the region: %w", err)
	}
	return nil
}

// viewNear returns a view whose end search code (endCode) a rel32 reaches
// from addr and back.
func (c *inProcess) viewNear(addr uint64) (uint64, bool) {
	for _, v := range c.views {
		if d := int64(v+endCode) - int64(addr); d > -(1<<31)+2*pageSize && d < 1<<31-2*pageSize {
			return v, true
		}
	}
	return 0, false
}

// viewIndex returns the position of view v, whose code follows the data in
// buf in that order.
func (c *inProcess) viewIndex(v uint64) int { return slices.Index(c.views, v) }

// completed returns how many calls the process completed itself.
func (c *inProcess) completed() int {
	if c == nil {
		return 0
	}
	return c.done
}

// close unmaps the region here.
func (c *inProcess) close() {
	if c != nil && c.buf != nil {
		_ = unix.Munmap(c.buf)
		c.buf = nil
	}
}

// arm makes the records from e.next on that the current thread can complete
// in the process available to the code, and returns how many. Callers arm
// only when nothing else is pending (advance).
func (c *inProcess) arm(e *engine) int {
	d := c.data()
	le := binary.LittleEndian
	if c.owner == e.cur && c.base+c.taken == e.next && c.taken < c.armed {
		// The rest of the last records: what made them completable then
		// still holds (pages served stay served, signals delivered only
		// move the next one later).
		le.PutUint64(d[idCount:], uint64(c.armed))
		return c.armed - c.taken
	}
	n, off := 0, idRecords
	tid := e.cur.rec.Tid
	for i := e.next; i+1 < len(e.log); i++ {
		rec := &e.log[i]
		if site, ok := c.sites[rec.Rip-2]; !ok || site.nr != rec.Nr || rec.Tid != tid || e.log[i+1].Tid != tid || !e.takeable(rec) {
			break
		}
		if e.nextSig < len(e.sigs) && e.sigs[e.nextSig].Seq <= rec.Seq {
			break
		}
		size := irOuts
		for _, o := range rec.Out {
			size += 16 + (len(o.Data)+7)&^7
		}
		if off+size > len(d) || e.lazyIn(rec.Out) {
			break
		}
		putRecord(d[off:off+size], rec)
		off += size
		n++
	}
	le.PutUint64(d[idCursor:], 0)
	le.PutUint64(d[idNext:], idRecords)
	le.PutUint64(d[idCount:], uint64(n))
	c.owner, c.base, c.armed, c.taken = e.cur, e.next, n, 0
	return n
}

// putRecord writes rec into r, which has its size (irSize).
func putRecord(r []byte, rec *format.Syscall) {
	le := binary.LittleEndian
	clear(r[:irOuts])
	le.PutUint64(r[irNr:], uint64(rec.Nr))
	nargs := 6
	if desc, ok := syscalls.Lookup(rec.Nr); ok {
		nargs = desc.NArgs
	}
	le.PutUint64(r[irNArgs:], uint64(nargs))
	for j := 0; j < nargs; j++ {
		le.PutUint64(r[irArgs+8*j:], rec.Args[j])
	}
	le.PutUint64(r[irRet:], uint64(rec.Ret))
	le.PutUint64(r[irRetAddr:], rec.Rip)
	le.PutUint64(r[irNOuts:], uint64(len(rec.Out)))
	le.PutUint64(r[irSize:], uint64(len(r)))
	o := irOuts
	for _, out := range rec.Out {
		le.PutUint64(r[o:], out.Addr)
		le.PutUint64(r[o+8:], uint64(len(out.Data)))
		copy(r[o+16:], out.Data)
		o += 16 + (len(out.Data)+7)&^7
	}
}

// sync returns how many armed records the process completed since the last
// resume, and disarms the rest: the code falls back to the `syscall` until
// the next arm.
func (c *inProcess) sync() int {
	d := c.data()
	cursor := min(int(binary.LittleEndian.Uint64(d[idCursor:])), c.armed) // the code checks the count first
	binary.LittleEndian.PutUint64(d[idCount:], uint64(cursor))
	done := cursor - c.taken
	c.taken = cursor
	c.done += done
	return done
}

// asm assembles the code of a view (x86.Asm): its rip-relative references
// to the view's data part (dataRef) and jumps to labels.
type asm struct {
	*x86.Asm
	data uint64 // the address of the view's data part
}

// newAsm returns an assembler for code at base in the view at view.
func newAsm(view, base uint64) *asm {
	return &asm{Asm: x86.New(base), data: view + ipCodeSize}
}

// dataRef emits op, a rip-relative displacement to data offset off, then
// tail (an immediate).
func (a *asm) dataRef(off int, op []byte, tail ...byte) {
	a.RelTo(a.data+uint64(off), op, tail...)
}

// jump emits op and a rel32 to a label.
func (a *asm) jump(label string, op ...byte) { a.Rel(label, op) }

// ipCode returns the region's code for the sites (by `syscall` address, the
// call number), and the address of each site's entry.
func ipCode(base uint64, sites map[uint64]ipSite) ([]byte, map[uint64]uint64) {
	a := newAsm(base, base)
	entries := map[uint64]uint64{}
	order := make([]uint64, 0, len(sites))
	for s := range sites {
		order = append(order, s)
	}
	slices.Sort(order)
	for _, sys := range order {
		site := sites[sys]
		entries[sys] = a.Here()
		if site.kind == ipRead {
			a.Emit(0x8b, 0x7c, 0x24, 0x08) // mov edi, [rsp+8], as the site does
		}
		a.dataRef(idRcx, []byte{0x48, 0x89, 0x0d}) // mov [rcx], rcx
		a.dataRef(idR11, []byte{0x4c, 0x89, 0x1d}) // mov [r11], r11
		if site.kind == ipReadOne {
			one := fmt.Sprintf("one%x", sys)
			a.Emit(0x48, 0xb9)                         // mov rcx, imm64
			a.Emit(u64le(site.flag)...)                //   __libc_single_threaded
			a.Emit(0x80, 0x39, 0x00)                   // cmp byte [rcx], 0
			a.dataRef(idRcx, []byte{0x48, 0x8b, 0x0d}) // mov rcx, [rcx]
			a.jump(one, 0x0f, 0x85)                    // jne one: one thread
			a.Emit(0xff, 0x25, 0, 0, 0, 0)             // jmp [rip+0]: where the `je` goes, flags as its `cmp` left them
			a.Emit(u64le(site.threaded)...)
			a.Label(one)
		}
		if site.kind != ipMov {
			// The flags after `xor eax, eax`: ZF and PF (and bit 1 of ah).
			a.dataRef(idFlags, []byte{0x66, 0xc7, 0x05}, 0x00, 0x46) // mov word [flags], 0x4600
		} else {
			a.Emit(0x9f)                                 // lahf
			a.Emit(0x0f, 0x90, 0xc0)                     // seto al
			a.dataRef(idFlags, []byte{0x66, 0x89, 0x05}) // mov [flags], ax
		}
		a.dataRef(idNr, []byte{0x48, 0xc7, 0x05}, u32le(uint32(site.nr))...) // mov qword [nr], imm32
		a.Emit(0x48, 0xb8)                                                   // mov rax, imm64
		a.Emit(u64le(sys)...)                                                //   the `syscall`
		a.dataRef(idSys, []byte{0x48, 0x89, 0x05})                           // mov [sys], rax
		a.jump("common", 0xe9)                                               // jmp common
	}
	a.Label("common")
	a.dataRef(idCursor, []byte{0x48, 0x8b, 0x0d}) // mov rcx, [cursor]
	a.dataRef(idCount, []byte{0x48, 0x3b, 0x0d})  // cmp rcx, [count]
	a.jump("fallback", 0x0f, 0x83)                // jae fallback
	a.dataRef(idNext, []byte{0x48, 0x8b, 0x0d})   // mov rcx, [next]
	a.dataRef(0, []byte{0x48, 0x8d, 0x05})        // lea rax, [data]
	a.Emit(0x48, 0x01, 0xc1)                      // add rcx, rax
	a.dataRef(idNr, []byte{0x4c, 0x8b, 0x1d})     // mov r11, [nr]
	a.Emit(0x4c, 0x3b, 0x59, irNr)                // cmp r11, [rcx+nr]
	a.jump("fallback", 0x0f, 0x85)                // jne fallback
	a.dataRef(idSys, []byte{0x48, 0x8b, 0x05})    // mov rax, [sys]
	a.Emit(0x48, 0x83, 0xc0, 0x02)                // add rax, 2
	a.Emit(0x48, 0x3b, 0x41, irRetAddr)           // cmp rax, [rcx+retaddr]
	a.jump("fallback", 0x0f, 0x85)                // jne fallback: the call is the next record's, made elsewhere
	a.Emit(0x48, 0x8b, 0x41, irNArgs)             // mov rax, [rcx+nargs]
	// cmp REG, [rcx+arg i] for rdi, rsi, rdx, r10, r8, r9
	cmpArg := [][]byte{{0x48, 0x3b, 0x79}, {0x48, 0x3b, 0x71}, {0x48, 0x3b, 0x51}, {0x4c, 0x3b, 0x51}, {0x4c, 0x3b, 0x41}, {0x4c, 0x3b, 0x49}}
	for i, op := range cmpArg {
		a.Emit(0x48, 0x83, 0xf8, byte(i)) // cmp rax, i
		a.jump("args", 0x0f, 0x84)        // je args
		a.Emit(op...)
		a.Emit(byte(irArgs + 8*i))     // cmp REG, [rcx+arg i]
		a.jump("fallback", 0x0f, 0x85) // jne fallback
	}
	a.Label("args")
	a.dataRef(idRdi, []byte{0x48, 0x89, 0x3d}) // mov [rdi], rdi
	a.dataRef(idRsi, []byte{0x48, 0x89, 0x35}) // mov [rsi], rsi
	a.dataRef(idRec, []byte{0x48, 0x89, 0x0d}) // mov [rec], rcx
	a.Emit(0x48, 0x8b, 0x41, irNOuts)          // mov rax, [rcx+nouts]
	a.Emit(0x48, 0x8d, 0x71, irOuts)           // lea rsi, [rcx+outs]
	a.Label("out")
	a.Emit(0x48, 0x85, 0xc0)       // test rax, rax
	a.jump("outs", 0x0f, 0x84)     // jz outs
	a.Emit(0x48, 0x8b, 0x3e)       // mov rdi, [rsi]
	a.Emit(0x48, 0x8b, 0x4e, 0x08) // mov rcx, [rsi+8]
	a.Emit(0x49, 0x89, 0xcb)       // mov r11, rcx
	a.Emit(0x48, 0x83, 0xc6, 0x10) // add rsi, 16
	a.Emit(0xf3, 0xa4)             // rep movsb
	a.Emit(0x49, 0xf7, 0xdb)       // neg r11
	a.Emit(0x49, 0x83, 0xe3, 0x07) // and r11, 7
	a.Emit(0x4c, 0x01, 0xde)       // add rsi, r11: to the next output
	a.Emit(0x48, 0xff, 0xc8)       // dec rax
	a.jump("out", 0xe9)            // jmp out
	a.Label("outs")
	a.dataRef(idRec, []byte{0x48, 0x8b, 0x0d})     // mov rcx, [rec]
	a.dataRef(idRdi, []byte{0x48, 0x8b, 0x3d})     // mov rdi, [rdi]
	a.dataRef(idRsi, []byte{0x48, 0x8b, 0x35})     // mov rsi, [rsi]
	a.Emit(0x48, 0x8b, 0x41, irRet)                // mov rax, [rcx+ret]
	a.dataRef(idRet, []byte{0x48, 0x89, 0x05})     // mov [ret], rax
	a.Emit(0x48, 0x8b, 0x41, irRetAddr)            // mov rax, [rcx+retaddr]
	a.dataRef(idRetAddr, []byte{0x48, 0x89, 0x05}) // mov [retaddr], rax
	a.Emit(0x48, 0x8b, 0x41, irSize)               // mov rax, [rcx+size]
	a.dataRef(idNext, []byte{0x48, 0x01, 0x05})    // add [next], rax
	a.dataRef(idCursor, []byte{0x48, 0xff, 0x05})  // inc qword [cursor]
	// r11: rflags as `syscall` saves them: the arithmetic flags, IF and
	// the always-set bit 1 (DF, TF, AC are clear in compiled code).
	a.dataRef(idFlags+1, []byte{0x44, 0x0f, 0xb6, 0x1d}) // movzx r11d, byte [flags+1]
	a.Emit(0x41, 0x81, 0xe3, 0xd5, 0, 0, 0)              // and r11d, 0xd5
	a.Emit(0x41, 0x81, 0xcb, 0x02, 0x02, 0, 0)           // or r11d, 0x202
	a.dataRef(idFlags, []byte{0x80, 0x3d}, 0)            // cmp byte [flags], 0
	a.jump("noof", 0x0f, 0x84)                           // je noof
	a.Emit(0x41, 0x81, 0xcb, 0x00, 0x08, 0, 0)           // or r11d, 0x800
	a.Label("noof")
	a.dataRef(idFlags, []byte{0x66, 0x8b, 0x05})   // mov ax, [flags]
	a.Emit(0x04, 0x7f)                             // add al, 0x7f: OF = (al == 1)
	a.Emit(0x9e)                                   // sahf
	a.dataRef(idRet, []byte{0x48, 0x8b, 0x05})     // mov rax, [ret]
	a.dataRef(idRetAddr, []byte{0x48, 0x8b, 0x0d}) // mov rcx, [retaddr]
	a.Emit(0xff, 0xe1)                             // jmp rcx: on after the `syscall`
	a.Label("fallback")
	a.dataRef(idFlags, []byte{0x66, 0x8b, 0x05}) // mov ax, [flags]
	a.Emit(0x04, 0x7f)                           // add al, 0x7f
	a.Emit(0x9e)                                 // sahf
	a.dataRef(idNr, []byte{0x48, 0x8b, 0x05})    // mov rax, [nr]
	a.dataRef(idRcx, []byte{0x48, 0x8b, 0x0d})   // mov rcx, [rcx]
	a.dataRef(idR11, []byte{0x4c, 0x8b, 0x1d})   // mov r11, [r11]
	a.dataRef(idSys, []byte{0xff, 0x25})         // jmp [sys]: the original `syscall`
	if err := a.Resolve(); err != nil {
		panic(err) // a label not set: the code above is wrong
	}
	return a.B, entries
}

func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
