package replayer

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/tprec/tprec/syscalls"

	"golang.org/x/sys/unix"
)

// The clock path: calls of the vDSO's time functions completed inside the
// replayed process, without a ptrace stop.
//
// The recorder turns each vDSO time function into `mov eax, NR; syscall;
// ret` (recorder/vdso.go), so a program that reads the clock often makes
// half of its calls there: redis makes gettimeofday and clock_gettime
// calls between most of its reads and writes. Each one costs a replay a
// ptrace round trip (about 10 us on the machines measured), while its
// record is nothing but a few bytes to copy and a result.
//
// Run (not a debugger's session) maps a small region into the replayed
// process, shared with the replayer, and points the first instruction of
// each patched function at code there (a 5-byte jmp over the `mov`; the
// `syscall; ret` after it stay). Before it resumes the current thread, the
// engine writes the records the thread will make next, if they are such
// calls, into the region (arm). The code compares each call's number and
// arguments with the next record, writes the record's outputs, sets rax to
// its result and rcx and r11 as `syscall` sets them, and returns; a call
// that does not match, or one past the records armed, goes on to the
// original `syscall`, where the engine sees it as before (and reports a
// divergence if it is one). At the next stop the engine takes the count of
// records done (sync) and moves past them.
//
// The code uses only rax, rcx and r11 (which `syscall` overwrites anyway)
// and saves and restores rdi, rsi and the arithmetic flags in the region:
// it never touches the program's stack. A call it does not complete reaches
// the `syscall` with every register as the `mov` would have left it (a
// recording may end there, or a signal be delivered there). Records are armed only where
// nothing else must happen between them: the calls of the current thread,
// no recorded signal after them, outputs on pages already served, not the
// last call of the window, and the call after each is the same thread's.
// So no stop can come while a thread is in that code.

// clockNrs are the calls the recorder redirects from the vDSO.
var clockNrs = []int{unix.SYS_CLOCK_GETTIME, unix.SYS_GETTIMEOFDAY, unix.SYS_TIME, unix.SYS_GETCPU, unix.SYS_CLOCK_GETRES}

// Layout of the region: code, then the data the code reads and writes.
const (
	clockCodeSize = pageSize
	clockSize     = 16 * pageSize
	// data, from clockCodeSize
	cdCursor  = 0  // records done since the last arm
	cdCount   = 8  // records armed
	cdFlags   = 16 // ax after lahf; seto al
	cdNr      = 24 // the number of the call in progress
	cdSys     = 32 // the address of its `syscall`
	cdRdi     = 40
	cdRsi     = 48
	cdRet     = 56
	cdRetAddr = 64
	cdRcx     = 72 // rcx and r11 at entry, put back for the `syscall`
	cdR11     = 80
	cdRecords = 128
	// a record
	crNr      = 0
	crNArgs   = 8
	crArgs    = 16 // three
	crRet     = 40
	crRetAddr = 48 // rip after the `syscall`: what rcx holds after one
	crOut0    = 56 // address, length, 16 bytes
	crOut1    = 88
	crSize    = 128
	crOutMax  = 16
	// clockCap is how many records one arm can hold.
	clockCap = (clockSize - clockCodeSize - cdRecords) / crSize
)

type clockPath struct {
	addr  uint64         // the region in the replayed process
	buf   []byte         // the same region, mapped here
	sites map[int]uint64 // by call number: the patched function's first byte
	armed int            // records armed at the last resume
	done  int            // records done in the process, for Result
}

func (c *clockPath) data() []byte { return c.buf[clockCodeSize:] }

// setupClock maps the region, writes its code and patches the functions the
// log shows calls of. It returns nil, with no error, when the replay runs
// without it: a debugger drives it, the log has no such calls, or the
// functions are not where the recording patched them. It runs at launch,
// before the seccomp filter.
func (e *engine) setupClock() (*clockPath, error) {
	if e.dbg != nil || os.Getenv("TPREPLAY_NO_CLOCK_PATH") != "" {
		return nil, nil
	}
	want := map[int]bool{}
	for _, nr := range clockNrs {
		want[nr] = true
	}
	sites := map[int]uint64{}
	for i := range e.log {
		rec := &e.log[i]
		if !want[rec.Nr] || rec.Rip < 7 {
			continue
		}
		if _, ok := sites[rec.Nr]; ok {
			continue
		}
		site := rec.Rip - 7
		if err := e.touch(site, 8); err != nil {
			return nil, err
		}
		var b [8]byte
		if err := e.mem.ReadAt(b[:], site); err != nil || [8]byte(clockStub(rec.Nr)) != b {
			want[rec.Nr] = false // a direct syscall, not the vDSO's: nothing to patch
			continue
		}
		sites[rec.Nr] = site
	}
	if len(sites) == 0 {
		return nil, nil
	}
	var any uint64
	for _, s := range sites {
		any = s
	}
	addr, ok := clockPlace(any, occupied(e.c, e.log), e.base)
	if !ok {
		return nil, nil
	}
	c := &clockPath{addr: addr, sites: sites}
	for nr, s := range sites {
		if d := int64(addr) - int64(s+5); d > 1<<31-1-clockCodeSize || d < -(1<<31) {
			return nil, fmt.Errorf("clock path: region at %#x too far from %s at %#x", addr, syscalls.Name(nr), s)
		}
	}
	if err := e.mapClock(c); err != nil {
		return nil, err
	}
	code, entries := clockCode(addr, sites)
	copy(c.buf, code)
	for nr, s := range sites {
		jmp := make([]byte, 5)
		jmp[0] = 0xe9
		binary.LittleEndian.PutUint32(jmp[1:], uint32(int64(entries[nr])-int64(s+5)))
		if err := e.mem.WriteAt(jmp, s); err != nil {
			return nil, fmt.Errorf("clock path: patch %s: %w", syscalls.Name(nr), err)
		}
	}
	return c, nil
}

// clockStub is the recorder's replacement of a vDSO time function.
func clockStub(nr int) []byte {
	b := []byte{0xb8, 0, 0, 0, 0, 0x0f, 0x05, 0xc3}
	binary.LittleEndian.PutUint32(b[1:], uint32(nr))
	return b
}

// clockPlace finds a page-aligned address for the region within 1 GiB of
// near (a rel32 jump reaches it) and 64 MiB away from every range the
// replayed program uses and from the stub's page.
func clockPlace(near uint64, used [][2]uint64, stubBase uint64) (uint64, bool) {
	const step, margin = 64 << 20, 64 << 20
	used = append(used, [2]uint64{stubBase, stubBase + stubSize})
	for k := 1; k <= 16; k++ {
		for _, sign := range []int64{1, -1} {
			c := int64(pageDown(near)) + sign*int64(k)*step
			if c < 1<<32 || uint64(c)+clockSize > 0x7fff_f000_0000 {
				continue
			}
			a := uint64(c)
			free := true
			for _, u := range used {
				if a+clockSize+margin > u[0] && a < u[1]+margin {
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

// mapClock creates the region in the stub as a shared memfd mapping and maps
// it here too. The stub keeps no descriptor of it.
func (e *engine) mapClock(c *clockPath) error {
	s := e.stub
	name := s.base + stubScratchOff
	if err := e.mem.WriteAt([]byte("tpreplay-clock\x00"), name); err != nil {
		return fmt.Errorf("clock path: %w", err)
	}
	fd, err := s.injectOK("clock path: memfd_create", unix.SYS_MEMFD_CREATE, name, unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer s.inject(unix.SYS_CLOSE, uint64(fd))
	if _, err := s.injectOK("clock path: ftruncate", unix.SYS_FTRUNCATE, uint64(fd), clockSize); err != nil {
		return err
	}
	ret, err := s.injectOK("clock path: mmap", unix.SYS_MMAP, c.addr, clockSize, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC,
		unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE, uint64(fd), 0)
	if err != nil {
		return err
	}
	if uint64(ret) != c.addr {
		return fmt.Errorf("clock path: mmap gave %#x, not %#x", ret, c.addr)
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", s.pid, fd), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("clock path: %w", err)
	}
	defer f.Close()
	if c.buf, err = unix.Mmap(int(f.Fd()), 0, clockSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("clock path: map the region: %w", err)
	}
	return nil
}

// completed returns how many calls the process completed itself.
func (c *clockPath) completed() int {
	if c == nil {
		return 0
	}
	return c.done
}

// close unmaps the region here.
func (c *clockPath) close() {
	if c != nil && c.buf != nil {
		_ = unix.Munmap(c.buf)
		c.buf = nil
	}
}

// arm writes the records from e.next on that the current thread can complete
// in the process, and returns how many. Callers arm only when nothing else
// is pending (advance).
func (c *clockPath) arm(e *engine) int {
	d := c.data()
	n := 0
	tid := e.cur.rec.Tid
	for i := e.next; i+1 < len(e.log) && n < clockCap; i++ {
		rec := &e.log[i]
		site, ok := c.sites[rec.Nr]
		if !ok || rec.Rip != site+7 || rec.Tid != tid || e.log[i+1].Tid != tid || len(rec.Out) > 2 || len(rec.Pages) > 0 {
			break
		}
		if e.nextSig < len(e.sigs) && e.sigs[e.nextSig].Seq <= rec.Seq {
			break
		}
		fits := true
		for _, o := range rec.Out {
			fits = fits && o.Addr != 0 && len(o.Data) <= crOutMax
		}
		if !fits || e.lazyIn(rec.Out) {
			break
		}
		r := d[cdRecords+n*crSize : cdRecords+(n+1)*crSize]
		clear(r)
		le := binary.LittleEndian
		le.PutUint64(r[crNr:], uint64(rec.Nr))
		nargs := 3
		if desc, ok := syscalls.Lookup(rec.Nr); ok {
			nargs = min(desc.NArgs, 3)
		}
		le.PutUint64(r[crNArgs:], uint64(nargs))
		for j := 0; j < nargs; j++ {
			le.PutUint64(r[crArgs+8*j:], rec.Args[j])
		}
		le.PutUint64(r[crRet:], uint64(rec.Ret))
		le.PutUint64(r[crRetAddr:], rec.Rip)
		for j, o := range rec.Out {
			off := crOut0 + j*(crOut1-crOut0)
			le.PutUint64(r[off:], o.Addr)
			le.PutUint64(r[off+8:], uint64(len(o.Data)))
			copy(r[off+16:], o.Data)
		}
		n++
	}
	binary.LittleEndian.PutUint64(d[cdCursor:], 0)
	binary.LittleEndian.PutUint64(d[cdCount:], uint64(n))
	c.armed = n
	return n
}

// sync returns how many armed records the process completed and disarms.
func (c *clockPath) sync() int {
	d := c.data()
	done := int(binary.LittleEndian.Uint64(d[cdCursor:]))
	binary.LittleEndian.PutUint64(d[cdCount:], 0)
	binary.LittleEndian.PutUint64(d[cdCursor:], 0)
	if done > c.armed {
		done = c.armed // cannot happen: the code checks the count first
	}
	c.armed = 0
	c.done += done
	return done
}

// asm assembles the few instruction forms the clock code needs, with
// rip-relative references to the region's data resolved at the end.
type asm struct {
	base   uint64 // address of b[0]
	b      []byte
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at    int    // offset of the rel32
	end   int    // offset of the end of the instruction
	label string // a label, or "" for data
	data  int    // offset in the data part
}

func (a *asm) emit(b ...byte) { a.b = append(a.b, b...) }

func (a *asm) label(name string) { a.labels[name] = len(a.b) }

// dataRef emits an instruction whose last 4 bytes before tail extra bytes
// are a rip-relative displacement to data offset off.
func (a *asm) dataRef(off int, op []byte, tail ...byte) {
	a.emit(op...)
	at := len(a.b)
	a.emit(0, 0, 0, 0)
	a.emit(tail...)
	a.fixups = append(a.fixups, fixup{at: at, end: len(a.b), data: off})
}

// jump emits an instruction ending in a rel32 to a label.
func (a *asm) jump(label string, op ...byte) {
	a.emit(op...)
	at := len(a.b)
	a.emit(0, 0, 0, 0)
	a.fixups = append(a.fixups, fixup{at: at, end: len(a.b), label: label})
}

func (a *asm) resolve() {
	for _, f := range a.fixups {
		target := clockCodeSize + f.data
		if f.label != "" {
			target = a.labels[f.label]
		}
		binary.LittleEndian.PutUint32(a.b[f.at:], uint32(int32(target-f.end)))
	}
}

// clockCode returns the region's code for the patched functions, and the
// address of each one's entry.
func clockCode(base uint64, sites map[int]uint64) ([]byte, map[int]uint64) {
	a := &asm{base: base, labels: map[string]int{}}
	entries := map[int]uint64{}
	for _, nr := range clockNrs {
		site, ok := sites[nr]
		if !ok {
			continue
		}
		entries[nr] = base + uint64(len(a.b))
		a.dataRef(cdRcx, []byte{0x48, 0x89, 0x0d})                      // mov [rcx], rcx
		a.dataRef(cdR11, []byte{0x4c, 0x89, 0x1d})                      // mov [r11], r11
		a.emit(0x9f)                                                    // lahf
		a.emit(0x0f, 0x90, 0xc0)                                        // seto al
		a.dataRef(cdFlags, []byte{0x66, 0x89, 0x05})                    // mov [flags], ax
		a.dataRef(cdNr, []byte{0x48, 0xc7, 0x05}, u32le(uint32(nr))...) // mov qword [nr], imm32
		a.emit(0x48, 0xb8)                                              // mov rax, imm64
		a.emit(u64le(site + 5)...)                                      //   the `syscall`
		a.dataRef(cdSys, []byte{0x48, 0x89, 0x05})                      // mov [sys], rax
		a.jump("common", 0xe9)                                          // jmp common
	}
	a.label("common")
	a.dataRef(cdCursor, []byte{0x48, 0x8b, 0x0d})  // mov rcx, [cursor]
	a.dataRef(cdCount, []byte{0x48, 0x3b, 0x0d})   // cmp rcx, [count]
	a.jump("fallback", 0x0f, 0x83)                 // jae fallback
	a.emit(0x48, 0xc1, 0xe1, 0x07)                 // shl rcx, 7 (crSize)
	a.dataRef(cdRecords, []byte{0x48, 0x8d, 0x05}) // lea rax, [records]
	a.emit(0x48, 0x01, 0xc1)                       // add rcx, rax
	a.dataRef(cdNr, []byte{0x4c, 0x8b, 0x1d})      // mov r11, [nr]
	a.emit(0x4c, 0x3b, 0x59, crNr)                 // cmp r11, [rcx+nr]
	a.jump("fallback", 0x0f, 0x85)                 // jne fallback
	a.emit(0x48, 0x8b, 0x41, crNArgs)              // mov rax, [rcx+nargs]
	a.emit(0x48, 0x85, 0xc0)                       // test rax, rax
	a.jump("args", 0x0f, 0x84)                     // jz args
	a.emit(0x48, 0x3b, 0x79, crArgs)               // cmp rdi, [rcx+arg0]
	a.jump("fallback", 0x0f, 0x85)                 // jne fallback
	a.emit(0x48, 0x83, 0xf8, 0x01)                 // cmp rax, 1
	a.jump("args", 0x0f, 0x84)                     // je args
	a.emit(0x48, 0x3b, 0x71, crArgs+8)             // cmp rsi, [rcx+arg1]
	a.jump("fallback", 0x0f, 0x85)                 // jne fallback
	a.emit(0x48, 0x83, 0xf8, 0x02)                 // cmp rax, 2
	a.jump("args", 0x0f, 0x84)                     // je args
	a.emit(0x48, 0x3b, 0x51, crArgs+16)            // cmp rdx, [rcx+arg2]
	a.jump("fallback", 0x0f, 0x85)                 // jne fallback
	a.label("args")
	a.dataRef(cdRdi, []byte{0x48, 0x89, 0x3d}) // mov [rdi], rdi
	a.dataRef(cdRsi, []byte{0x48, 0x89, 0x35}) // mov [rsi], rsi
	for i, off := range []byte{crOut0, crOut1} {
		loop, done := fmt.Sprintf("copy%d", i), fmt.Sprintf("copied%d", i)
		a.emit(0x48, 0x8b, 0x79, off)    // mov rdi, [rcx+addr]
		a.emit(0x48, 0x8b, 0x41, off+8)  // mov rax, [rcx+len]
		a.emit(0x48, 0x8d, 0x71, off+16) // lea rsi, [rcx+data]
		a.label(loop)
		a.emit(0x48, 0x85, 0xc0) // test rax, rax
		a.jump(done, 0x0f, 0x84) // jz done
		a.emit(0x44, 0x8a, 0x1e) // mov r11b, [rsi]
		a.emit(0x44, 0x88, 0x1f) // mov [rdi], r11b
		a.emit(0x48, 0xff, 0xc6) // inc rsi
		a.emit(0x48, 0xff, 0xc7) // inc rdi
		a.emit(0x48, 0xff, 0xc8) // dec rax
		a.jump(loop, 0xe9)       // jmp loop
		a.label(done)
	}
	a.dataRef(cdRdi, []byte{0x48, 0x8b, 0x3d})     // mov rdi, [rdi]
	a.dataRef(cdRsi, []byte{0x48, 0x8b, 0x35})     // mov rsi, [rsi]
	a.emit(0x48, 0x8b, 0x41, crRet)                // mov rax, [rcx+ret]
	a.dataRef(cdRet, []byte{0x48, 0x89, 0x05})     // mov [ret], rax
	a.emit(0x48, 0x8b, 0x41, crRetAddr)            // mov rax, [rcx+retaddr]
	a.dataRef(cdRetAddr, []byte{0x48, 0x89, 0x05}) // mov [retaddr], rax
	a.dataRef(cdCursor, []byte{0x48, 0xff, 0x05})  // inc qword [cursor]
	// r11: rflags as `syscall` saves them: the arithmetic flags, IF and
	// the always-set bit 1 (DF, TF, AC are clear where a function is called).
	a.dataRef(cdFlags+1, []byte{0x44, 0x0f, 0xb6, 0x1d}) // movzx r11d, byte [flags+1]
	a.emit(0x41, 0x81, 0xe3, 0xd5, 0, 0, 0)              // and r11d, 0xd5
	a.emit(0x41, 0x81, 0xcb, 0x02, 0x02, 0, 0)           // or r11d, 0x202
	a.dataRef(cdFlags, []byte{0x80, 0x3d}, 0)            // cmp byte [flags], 0
	a.jump("noof", 0x0f, 0x84)                           // je noof
	a.emit(0x41, 0x81, 0xcb, 0x00, 0x08, 0, 0)           // or r11d, 0x800
	a.label("noof")
	a.dataRef(cdFlags, []byte{0x66, 0x8b, 0x05})   // mov ax, [flags]
	a.emit(0x04, 0x7f)                             // add al, 0x7f: OF = (al == 1)
	a.emit(0x9e)                                   // sahf
	a.dataRef(cdRet, []byte{0x48, 0x8b, 0x05})     // mov rax, [ret]
	a.dataRef(cdRetAddr, []byte{0x48, 0x8b, 0x0d}) // mov rcx, [retaddr]
	a.emit(0xff, 0xe1)                             // jmp rcx: the function's `ret`
	a.label("fallback")
	a.dataRef(cdFlags, []byte{0x66, 0x8b, 0x05}) // mov ax, [flags]
	a.emit(0x04, 0x7f)                           // add al, 0x7f
	a.emit(0x9e)                                 // sahf
	a.dataRef(cdNr, []byte{0x48, 0x8b, 0x05})    // mov rax, [nr]
	a.dataRef(cdRcx, []byte{0x48, 0x8b, 0x0d})   // mov rcx, [rcx]
	a.dataRef(cdR11, []byte{0x4c, 0x8b, 0x1d})   // mov r11, [r11]
	a.dataRef(cdSys, []byte{0xff, 0x25})         // jmp [sys]: the original `syscall`
	a.resolve()
	return a.b, entries
}

func u32le(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func u64le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
