package format

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
)

// section is one section ready to be framed: its type and its payload.
type section struct {
	typ     uint32
	payload []byte
}

// Write writes c, with the content of every page it references taken from
// pages, to path. The file appears complete or not at all: it is written to a
// temporary name in the same directory, synced, renamed over path and the
// directory synced. Its mode is 0600 because it holds the process's memory. On
// failure the temporary file is removed and path is untouched; a full disk
// gives an error that wraps syscall.ENOSPC.
func Write(path string, c *Checkpoint, pages PageSource) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	fail := func(what string, e error) error {
		if errors.Is(e, syscall.ENOSPC) {
			return fmt.Errorf("write checkpoint %s: no space left on the device holding %s: %w", path, dir, e)
		}
		return fmt.Errorf("write checkpoint %s: %s: %w", path, what, e)
	}
	if err = f.Chmod(0o600); err != nil {
		return fail("set mode", err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = Encode(bw, c, pages); err != nil {
		return fail("encode", err)
	}
	if err = bw.Flush(); err != nil {
		return fail("flush", err)
	}
	if err = f.Sync(); err != nil {
		return fail("sync", err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fail("close", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fail("rename", err)
	}
	// The rename is durable only once the directory is synced. If that fails
	// the file is in place but may not survive a crash: say so, keep it.
	if d, derr := os.Open(dir); derr == nil {
		derr = d.Sync()
		d.Close()
		if derr != nil {
			return fmt.Errorf("write checkpoint %s: sync directory %s: %w", path, dir, derr)
		}
	} else {
		return fmt.Errorf("write checkpoint %s: open directory %s for sync: %w", path, dir, derr)
	}
	return nil
}

// Encode writes the checkpoint file for c to w, taking page content from pages.
// It refuses a model the reader would refuse (unsorted syscalls, unaligned page
// addresses...) and a page source that lacks a page or returns wrong content.
func Encode(w io.Writer, c *Checkpoint, pages PageSource) error {
	secs, err := buildSections(c, pages)
	if err != nil {
		return err
	}
	flags := uint32(FlagZstd | FlagPageWords)
	for i := range c.Signals {
		if c.Signals[i].Handler != nil {
			flags |= FlagSignals
		}
	}
	return writeSectionsFlags(w, secs, flags)
}

// buildSections encodes every section of c, in file order.
func buildSections(c *Checkpoint, pages PageSource) ([]section, error) {
	if len(c.Syscalls) > MaxSyscalls {
		return nil, fmt.Errorf("encode checkpoint: %d syscall records, more than a checkpoint may hold (%d)", len(c.Syscalls), MaxSyscalls)
	}
	if p := checkModel(c, nil); p != nil {
		return nil, fmt.Errorf("encode checkpoint: %s: %s", SectionName(p.sec), p.msg)
	}
	z := newWriterCodec()
	// The syscall log is encoded while the pages are read and compressed:
	// each has a serial part (the log's streams, reading the pages) that
	// the other's compression fills the CPUs around.
	syscl := make(chan []byte, 1)
	go func() { syscl <- encodeSyscalls(z, c.Syscalls) }()
	idx, store, err := encodePages(z, c, pages)
	log := <-syscl
	if err != nil {
		return nil, err
	}
	return []section{
		{SecHeader, encodeHeader(&c.Header)},
		{SecInterval, packed(z, encodeIntervals(c.Intervals))},
		{SecFinal, encodeFinal(c.Final)},
		{SecSyscalls, log},
		{SecSignals, encodeSignals(c.Signals)},
		{SecEnd, encodeEnd(&c.End)},
		{SecPageIdx, idx},
		{SecPages, store},
	}, nil
}

// packed returns raw as a packed payload (version 3 packs INTVL: the maps
// and XSAVE images of successive intervals repeat).
func packed(z *codec, raw []byte) []byte {
	var e enc
	pack(&e, z, raw)
	return e.b
}

// writeSections frames the sections, then writes the directory and trailer.
func writeSections(w io.Writer, secs []section) error {
	return writeSectionsFlags(w, secs, FlagZstd|FlagPageWords)
}

func writeSectionsFlags(w io.Writer, secs []section, flags uint32) error {
	var hdr enc
	hdr.b = append(hdr.b, Magic...)
	hdr.u16(VersionMajor)
	hdr.u16(VersionMinor)
	hdr.u32(flags)
	chain := crc(hdr.b)
	if _, err := w.Write(hdr.b); err != nil {
		return err
	}
	off := int64(fileHeaderSize)
	var dir enc
	dir.u32(uint32(len(secs)))
	put := func(s section) error {
		var h enc
		h.u32(s.typ)
		h.u64(uint64(len(s.payload)))
		h.u32(crc(s.payload))
		chain = crc32Update(chain, h.b)
		if _, err := w.Write(h.b); err != nil {
			return err
		}
		if _, err := w.Write(s.payload); err != nil {
			return err
		}
		return nil
	}
	for _, s := range secs {
		dir.u32(s.typ)
		dir.u32(0)
		dir.u64(uint64(off))
		if err := put(s); err != nil {
			return err
		}
		off += sectionHeaderSize + int64(len(s.payload))
	}
	dirOff := off
	if err := put(section{SecDir, dir.b}); err != nil {
		return err
	}
	off += sectionHeaderSize + int64(len(dir.b))
	var t enc
	t.u64(uint64(dirOff))
	t.u64(uint64(off + trailerSize))
	t.u32(chain)
	t.u32(crc(t.b))
	t.b = append(t.b, EndMagic...)
	_, err := w.Write(t.b)
	return err
}

func encodeHeader(h *Header) []byte {
	var e enc
	e.str(h.Arch)
	e.str(h.KernelRelease)
	e.strs(h.CPUFlags)
	e.str(h.Hostname)
	e.str(h.ExePath)
	e.str(h.BuildID)
	e.strs(h.Cmdline)
	e.int(h.Pid)
	e.str(h.Backend)
	e.i64(int64(h.Interval))
	e.bool(h.FullPages)
	e.str(h.PageSetNote)
	e.time(h.StartTime)
	e.time(h.DumpTime)
	e.str(h.Reason)
	e.u64(h.Lost)
	e.u32(uint32(len(h.Modules))) // version 4.2
	for _, m := range h.Modules {
		e.str(m.Name)
		e.u64(m.LinkMap)
		e.u64(m.LAddr)
		e.u64(m.LD)
		e.u64(m.TLSModID)
		e.i64(m.TLSOffset)
	}
	e.u32(uint32(len(h.ThreadNames)))
	for _, t := range h.ThreadNames {
		e.int(t.Tid)
		e.str(t.Name)
	}
	e.u8(uint8(h.Schedule))     // version 7.1
	e.u32(uint32(len(h.XSave))) // version 7.2
	for _, c := range h.XSave {
		e.u8(c.Index)
		e.u32(c.Offset)
		e.u32(c.Size)
	}
	return e.b
}

func encodeIntervals(ivs []Interval) []byte {
	var e enc
	e.u32(uint32(len(ivs)))
	for i := range ivs {
		iv := &ivs[i]
		e.int(iv.Index)
		e.time(iv.Start)
		e.time(iv.End)
		e.u64(iv.FirstSeq)
		e.bool(iv.Replayable)
		e.str(iv.Reason)
		e.bool(iv.StartOmitted)
		e.threads(iv.Threads)
		e.u32(uint32(len(iv.Maps)))
		for _, m := range iv.Maps {
			e.u64(m.Start)
			e.u64(m.End)
			e.u32(m.Prot)
			e.bool(m.Shared)
			e.u64(m.Offset)
			e.str(m.Dev)
			e.u64(m.Inode)
			e.str(m.Path)
		}
		e.pageRefs(iv.Written)
		e.pageRefs(iv.Digests)
	}
	return e.b
}

func encodeFinal(refs []PageRef) []byte {
	var e enc
	e.pageRefs(refs)
	return e.b
}

func encodeSignals(sigs []SignalEvent) []byte {
	var e enc
	e.u32(uint32(len(sigs)))
	for i := range sigs {
		s := &sigs[i]
		e.u64(s.Seq)
		e.int(s.Tid)
		e.int(s.Signo)
		e.bytes(s.Siginfo)
		e.regs(&s.Regs)
	}
	// Version 3.1: what each delivery did, in the same order.
	for i := range sigs {
		e.int(sigs[i].Interval)
		h := sigs[i].Handler
		e.bool(h != nil)
		if h != nil {
			e.regs(&h.Regs)
			e.bytes(h.XState)
			e.u64(h.SigMask)
			e.u64(h.FrameAddr)
			e.bytes(h.Frame)
			e.pageRefs(h.Digests)
		}
	}
	return e.b
}

func encodeEnd(s *EndState) []byte {
	var e enc
	e.str(s.Kind)
	e.int(s.Tid)
	e.int(s.Signo)
	e.bytes(s.Siginfo)
	e.int(s.ExitCode)
	e.regs(&s.Regs)
	e.bytes(s.XState)
	e.u64(s.LastSeq)
	e.rseq(s.Rseq)
	e.pageRefs(s.Digests)
	e.threads(s.Threads) // version 4.1
	return e.b
}

// threads encodes a list of thread states: a count, then each thread.
func (e *enc) threads(ts []Thread) {
	e.u32(uint32(len(ts)))
	for j := range ts {
		t := &ts[j]
		e.int(t.Tid)
		e.regs(&t.Regs)
		e.bytes(t.XState)
		e.u64(t.SigMask)
		e.bool(t.InSyscall)
		e.rseq(t.Rseq)
	}
}

// storedOrder lists every distinct non-zero page hash that c references,
// with the address of its first reference (the one its words are stored
// relative to: pagewords.go), sorted by address, and for one address in the order of first reference
// (intervals oldest first, then the final pages, then mapped-file pages).
// The versions of one page (its originals in successive intervals and its
// final content) usually differ in a few bytes, and side by side they fall
// inside lz4's 64 KiB match window: a process that rewrites the same heap
// pages every interval stores each extra version in a fraction of a page.
// Address order also keeps the pages of one region in few blocks.
func storedOrder(c *Checkpoint) []PageRef {
	type ref struct {
		addr uint64
		rank int
		h    Hash
	}
	seen := map[Hash]bool{ZeroHash: true}
	var refs []ref
	add := func(rank int, list []PageRef) {
		for _, p := range list {
			if !seen[p.Hash] {
				seen[p.Hash] = true
				refs = append(refs, ref{p.Addr, rank, p.Hash})
			}
		}
	}
	for i := range c.Intervals {
		add(i, c.Intervals[i].Written)
	}
	add(len(c.Intervals), c.Final)
	for i := range c.Syscalls {
		add(len(c.Intervals)+1, c.Syscalls[i].Pages)
	}
	// Stable: references to one address at the same rank keep their order.
	sort.SliceStable(refs, func(i, j int) bool {
		if refs[i].addr != refs[j].addr {
			return refs[i].addr < refs[j].addr
		}
		return refs[i].rank < refs[j].rank
	})
	out := make([]PageRef, len(refs))
	for i, r := range refs {
		out[i] = PageRef{Addr: r.addr, Hash: r.h}
	}
	return out
}

// encodePages builds the PGIDX and PAGES payloads.
func encodePages(z *codec, c *Checkpoint, pages PageSource) (idx, store []byte, err error) {
	order := storedOrder(c)
	if len(order) > 0 && pages == nil {
		return nil, nil, fmt.Errorf("encode checkpoint: %d pages referenced and no page source", len(order))
	}
	type slot struct {
		h          Hash
		block, off uint32
	}
	slots := make([]slot, 0, len(order))
	nBlocks := (len(order) + PagesPerBlock - 1) / PagesPerBlock
	var table enc
	table.u32(uint32(nBlocks))
	tableLen := 4 + nBlocks*16
	var data bytes.Buffer
	// Blocks are read, then compressed side by side, a batch at a time.
	batch := make([][]byte, 0, 4*runtime.GOMAXPROCS(0))
	flush := func() {
		out := make([][]byte, len(batch))
		z.compressEach(len(batch), len(order)*PageSize, func(i int, compress func([]byte) []byte) { out[i] = compress(batch[i]) })
		for i, stored := range out {
			if stored == nil {
				stored = batch[i]
			}
			table.u64(uint64(tableLen + data.Len()))
			table.u32(uint32(len(stored)))
			table.u32(uint32(len(batch[i])))
			data.Write(stored)
		}
		batch = batch[:0]
	}
	for b := 0; b < nBlocks; b++ {
		first, end := b*PagesPerBlock, min((b+1)*PagesPerBlock, len(order))
		raw := make([]byte, 0, (end-first)*(PageSize+8))
		for i := first; i < end; i++ {
			h := order[i].Hash
			p, err := pages.Page(h)
			if err != nil {
				return nil, nil, fmt.Errorf("encode checkpoint: read page %x: %w", h, err)
			}
			if len(p) != PageSize {
				return nil, nil, fmt.Errorf("encode checkpoint: page %x: source returned %d bytes, want %d", h, len(p), PageSize)
			}
			if got := HashPage(p); got != h {
				return nil, nil, fmt.Errorf("encode checkpoint: page %x: source returned content that hashes to %x", h, got)
			}
			slots = append(slots, slot{h, uint32(b), uint32(len(raw))})
			raw = append(raw, p...)
			swapPageWords(raw[len(raw)-PageSize:], pageWordsAddr(order[i].Addr))
		}
		for i := first; i < end; i++ {
			raw = binary.LittleEndian.AppendUint64(raw, pageWordsAddr(order[i].Addr))
		}
		if batch = append(batch, raw); len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
	sort.Slice(slots, func(i, j int) bool { return bytes.Compare(slots[i].h[:], slots[j].h[:]) < 0 })
	var ix enc
	ix.u32(uint32(len(slots)))
	for _, s := range slots {
		ix.hash(s.h)
		ix.u32(s.block)
		ix.u32(s.off)
	}
	return ix.b, append(table.b, data.Bytes()...), nil
}
