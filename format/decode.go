package format

import (
	"bytes"
	"fmt"
	"time"
)

// Smallest encoded sizes of repeated records, used to bound counts before
// allocating (see dec.count).
const (
	minInterval   = 8 + 12 + 12 + 8 + 1 + 4 + 4 + 4 + 4
	minThread     = 8 + regsSize + 4 + 8 + 1 + 16
	minMapping    = 8 + 8 + 4 + 1 + 8 + 4 + 8 + 4
	minSyscall    = 8 + 8 + 8 + 6*8 + 8 + 8 + 4 // version 1
	minOutBuf     = 8 + 4                       // version 1
	minSignal     = 8 + 8 + 8 + 4 + regsSize
	minModule     = 4 + 5*8
	minThreadName = 8 + 4
	minXComponent = 1 + 4 + 4
	indexSize     = 16 + 4 + 4
	blockSize     = 8 + 4 + 4
)

func decodeHeader(d *dec, h *Header) {
	h.Arch = d.str("arch")
	h.KernelRelease = d.str("kernel release")
	h.CPUFlags = d.strs("cpu flags")
	h.Hostname = d.str("hostname")
	h.ExePath = d.str("executable path")
	h.BuildID = d.str("build-id")
	h.Cmdline = d.strs("command line")
	h.Pid = d.int("pid")
	h.Backend = d.str("backend")
	h.Interval = time.Duration(d.i64("interval"))
	h.FullPages = d.bool("full pages")
	h.PageSetNote = d.str("page set note")
	h.StartTime = d.time("start time")
	h.DumpTime = d.time("dump time")
	h.Reason = d.str("reason")
	h.Lost = d.u64("lost events")
	if d.remaining() > 0 { // version 4.2
		if n := d.count("module", minModule); n > 0 {
			h.Modules = make([]Module, n)
			for i := range h.Modules {
				m := &h.Modules[i]
				m.Name = d.str("module name")
				m.LinkMap = d.u64("module link map")
				m.LAddr = d.u64("module load bias")
				m.LD = d.u64("module dynamic section")
				m.TLSModID = d.u64("module TLS id")
				m.TLSOffset = d.i64("module TLS offset")
			}
		}
		if n := d.count("thread name", minThreadName); n > 0 {
			h.ThreadNames = make([]ThreadName, n)
			for i := range h.ThreadNames {
				h.ThreadNames[i].Tid = d.int("thread id")
				h.ThreadNames[i].Name = d.str("thread name")
			}
		}
	}
	if d.remaining() > 0 { // version 7.1
		h.Schedule = Schedule(d.u8("schedule")) // the replayer refuses one it does not know
	}
	if d.remaining() > 0 { // version 7.2
		if n := d.count("xsave component", minXComponent); n > 0 {
			h.XSave = make([]XComponent, n)
			for i := range h.XSave {
				c := &h.XSave[i]
				c.Index = d.u8("xsave component number")
				c.Offset = d.u32("xsave component offset")
				c.Size = d.u32("xsave component size")
			}
		}
	}
}

func decodeIntervals(d *dec, major uint16) []Interval {
	n := d.count("interval", minInterval)
	if n == 0 {
		return nil
	}
	out := make([]Interval, n)
	for i := range out {
		iv := &out[i]
		iv.Index = d.int("interval index")
		iv.Start = d.time("interval start")
		iv.End = d.time("interval end")
		iv.FirstSeq = d.u64("first sequence number")
		iv.Replayable = d.bool("replayable")
		iv.Reason = d.str("reason")
		iv.StartOmitted = major >= 3 && d.bool("start omitted")
		iv.Threads = d.threads()
		if nm := d.count("mapping", minMapping); nm > 0 {
			iv.Maps = make([]Mapping, nm)
			for j := range iv.Maps {
				m := &iv.Maps[j]
				m.Start = d.u64("mapping start")
				m.End = d.u64("mapping end")
				m.Prot = d.u32("mapping protection")
				m.Shared = d.bool("mapping shared")
				m.Offset = d.u64("mapping offset")
				m.Dev = d.str("mapping device")
				m.Inode = d.u64("mapping inode")
				m.Path = d.str("mapping path")
			}
		}
		iv.Written = d.pageRefs("written page")
		if major >= 3 {
			iv.Digests = d.pageRefs("boundary digest")
		}
		if d.fail != nil {
			return nil
		}
	}
	return out
}

// decodeSyscallsV1 reads the fixed-width log of version 1 files.
func decodeSyscallsV1(d *dec) []Syscall {
	n := d.count("syscall", minSyscall)
	if n == 0 {
		return nil
	}
	out := make([]Syscall, n)
	for i := range out {
		s := &out[i]
		s.Seq = d.u64("sequence number")
		s.Tid = d.int("tid")
		s.Nr = d.int("syscall number")
		for j := range s.Args {
			s.Args[j] = d.u64("argument")
		}
		s.Ret = d.i64("return value")
		s.Rip = d.u64("rip")
		if no := d.count("output buffer", minOutBuf); no > 0 {
			s.Out = make([]OutBuf, no)
			for j := range s.Out {
				s.Out[j].Addr = d.u64("output address")
				s.Out[j].Data = d.bytes("output data")
			}
		}
		s.Pages = d.pageRefs("mapped file page")
		if d.fail != nil {
			return nil
		}
	}
	return out
}

func decodeSignals(d *dec) []SignalEvent {
	n := d.count("signal", minSignal)
	if n == 0 {
		return nil
	}
	out := make([]SignalEvent, n)
	for i := range out {
		s := &out[i]
		s.Seq = d.u64("sequence number")
		s.Tid = d.int("tid")
		s.Signo = d.int("signal number")
		s.Siginfo = d.bytes("siginfo")
		d.regs(&s.Regs)
	}
	if d.remaining() == 0 {
		return out // before version 3.1
	}
	for i := range out {
		out[i].Interval = d.int("signal's interval")
		if !d.bool("signal handler seen") {
			continue
		}
		h := &Delivery{}
		d.regs(&h.Regs)
		h.XState = d.bytes("handler xstate")
		h.SigMask = d.u64("handler signal mask")
		h.FrameAddr = d.u64("signal frame address")
		h.Frame = d.bytes("signal frame")
		h.Digests = d.pageRefs("signal digest")
		out[i].Handler = h
	}
	return out
}

func decodeEnd(d *dec, s *EndState) {
	s.Kind = d.str("kind")
	s.Tid = d.int("tid")
	s.Signo = d.int("signal number")
	s.Siginfo = d.bytes("siginfo")
	s.ExitCode = d.int("exit code")
	d.regs(&s.Regs)
	s.XState = d.bytes("xstate")
	s.LastSeq = d.u64("last sequence number")
	s.Rseq = d.rseq()
	s.Digests = d.pageRefs("digest")
	if d.remaining() > 0 { // version 4.1
		s.Threads = d.threads()
	}
}

// threads decodes a list of thread states (enc.threads).
func (d *dec) threads() []Thread {
	nt := d.count("thread", minThread)
	if nt == 0 {
		return nil
	}
	ts := make([]Thread, nt)
	for j := range ts {
		t := &ts[j]
		t.Tid = d.int("tid")
		d.regs(&t.Regs)
		t.XState = d.bytes("xstate")
		t.SigMask = d.u64("signal mask")
		t.InSyscall = d.bool("in syscall")
		t.Rseq = d.rseq()
	}
	return ts
}

// decodeBlocks reads the block table at the head of the PAGES payload; the
// blocks themselves are read by File.block on demand.
func (f *File) decodeBlocks(s *rawSection) error {
	head, err := readAt(f.r, s.payOff(), min(s.length, 4), s.name())
	if err != nil {
		return err
	}
	d := &dec{b: head, base: s.payOff(), sec: s.name()}
	nb := d.u32("block count")
	if err := d.err(); err != nil {
		return err
	}
	tableLen := 4 + int64(nb)*blockSize
	if tableLen > s.length {
		return &FormatError{Section: s.name(), Offset: s.payOff(), Msg: fmt.Sprintf("block count %d does not fit in a %d-byte section", nb, s.length)}
	}
	tbl, err := readAt(f.r, s.payOff()+4, tableLen-4, s.name())
	if err != nil {
		return err
	}
	d = &dec{b: tbl, base: s.payOff() + 4, sec: s.name()}
	f.pagesOff = s.payOff()
	f.blocks = make([]blockEntry, nb)
	perPage := uint32(PageSize) // unpacked bytes per page
	if f.pageWords {
		perPage += 8
	}
	for i := range f.blocks {
		at := d.off
		off := d.u64("block offset")
		comp := d.u32("block compressed length")
		raw := d.u32("block length")
		if d.fail != nil {
			break
		}
		bad := ""
		switch {
		case off < uint64(tableLen) || off > uint64(s.length) || uint64(comp) > uint64(s.length)-off:
			bad = fmt.Sprintf("block %d (%d bytes at %d) lies outside the page data", i, comp, off)
		case raw == 0 || raw%perPage != 0 || raw > maxBlockPages*perPage:
			what := "pages"
			if f.pageWords {
				what = "pages and their addresses"
			}
			bad = fmt.Sprintf("block %d length %d is not a whole number of %s up to %d", i, raw, what, maxBlockPages*perPage)
		case comp == 0 || comp > raw || uint64(comp)*f.codec.maxRatio() < uint64(raw):
			bad = fmt.Sprintf("block %d of %d bytes cannot hold %d bytes", i, comp, raw)
		}
		if bad != "" {
			d.off = at
			d.failf("%s", bad)
			break
		}
		f.blocks[i] = blockEntry{off: f.pagesOff + int64(off), comp: comp, raw: raw, pages: raw / perPage * PageSize}
	}
	if err := d.err(); err != nil {
		f.blocks = nil
		return err
	}
	return nil
}

// decodeIndex reads PGIDX: sorted hashes and where each page lies. It runs
// after decodeBlocks.
func (f *File) decodeIndex(d *dec) {
	n := d.count("page", indexSize)
	f.index = make([]indexEntry, 0, n)
	for i := 0; i < n; i++ {
		at := d.off
		e := indexEntry{h: d.hash("page hash"), block: d.u32("page block"), off: d.u32("page offset")}
		if d.fail != nil {
			return
		}
		bad := ""
		switch {
		case e.h == ZeroHash:
			bad = "the zero page is stored"
		case i > 0 && bytes.Compare(f.index[i-1].h[:], e.h[:]) >= 0:
			bad = fmt.Sprintf("page %x out of order or listed twice", e.h)
		case int(e.block) >= len(f.blocks):
			bad = fmt.Sprintf("page %x in block %d of %d", e.h, e.block, len(f.blocks))
		case e.off%PageSize != 0 || uint64(e.off)+PageSize > uint64(f.blocks[e.block].pages):
			bad = fmt.Sprintf("page %x at byte %d of a block of %d bytes of pages", e.h, e.off, f.blocks[e.block].pages)
		}
		if bad != "" {
			d.off = at
			d.failf("%s", bad)
			return
		}
		f.index = append(f.index, e)
	}
}
