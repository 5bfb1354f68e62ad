package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"time"
)

// File framing constants; FORMAT.md describes every byte.
const (
	// Magic opens every checkpoint file.
	Magic = "TPCKPT\x00\x01"
	// EndMagic closes every checkpoint file (the last 8 bytes of the trailer).
	EndMagic = "TPCKEND\x00"

	// VersionMajor changes when a reader of the previous major version could
	// no longer decode a file correctly. Version 2 changed the syscall log's
	// encoding (compact records, see syslog.go). Version 3 stores the memory
	// of one interval start instead of every one (Interval.StartOmitted, with
	// boundary digests for the others) and stores short outputs as
	// differences (syslog.go): a version 2 reader would replay from a start
	// the file does not hold. Version 4 lays the syscall log out in streams
	// and version 5 marks outputs that repeat the compared record's
	// (syslog4.go): an older reader would misread the log. Version 6
	// takes what a repeated output repeats from the last non-empty output
	// of its number and descriptor (logModel.lastData): a version 5 reader
	// would take other bytes. Version 7 keeps the last outputs of each
	// number apart from those of other numbers and descriptors, which
	// version 6 shared (logModel.outSlot): a version 6 reader would take
	// other bytes. This reader reads versions 1 to 7.
	VersionMajor = 7
	// VersionMinor changes when fields are appended at the end of a section
	// payload or new sections appear; older readers skip what they do not know.
	// Version 2.1 compressed with zstd (FlagZstd), as every later one does.
	// Version 3.1 appends to SIGNL what each signal's delivery did
	// (SignalEvent.Handler), which replay needs to deliver it.
	// Version 4.1 appends to ENDST the state of the other threads at the
	// end (EndState.Threads). Version 4.2 appends to HEADR the dynamic
	// loader's list of objects (Header.Modules). Version 5.1 stores the
	// words of page blocks relative to their address (FlagPageWords).
	// Version 7.1 appends to HEADR the order a replay of several threads
	// runs them in (Header.Schedule). Version 7.2 appends to HEADR where
	// the recording CPU lays out each XSAVE component (Header.XSave).
	VersionMinor = 2

	fileHeaderSize    = 16
	sectionHeaderSize = 16
	trailerSize       = 32
	dirEntrySize      = 16

	// requiredFlags are the file-header flag bits a reader must understand:
	// any set bit among them that this reader does not know is rejected.
	requiredFlags = 0x0000ffff
	// FlagZstd (version 2.1): compressed chunks and page blocks are zstd
	// frames; without it they are lz4 blocks.
	FlagZstd = 1 << 0
	// FlagSignals (version 3.1): a replayable interval holds a signal
	// delivery, which a reader must reproduce (SignalEvent.Handler); a
	// reader that cannot would diverge there.
	FlagSignals = 1 << 1
	// FlagPageWords (version 5.1): each page block ends with the address of
	// each of its pages, and a page's words within pageWordWindow of their
	// own address are stored as their distance from it (pagewords.go).
	FlagPageWords = 1 << 2
	knownFlags    = FlagZstd | FlagSignals | FlagPageWords
)

// Section types. A type with criticalBit set cannot be skipped by a reader that
// does not know it; any other unknown type is skipped after its CRC is checked.
const (
	SecHeader   uint32 = 1
	SecInterval uint32 = 2
	SecFinal    uint32 = 3
	SecSyscalls uint32 = 4
	SecSignals  uint32 = 5
	SecEnd      uint32 = 6
	SecPageIdx  uint32 = 7
	SecPages    uint32 = 8
	SecDir      uint32 = 16

	criticalBit uint32 = 1 << 31
)

// Names used in FormatError.Section for places that are not sections.
const (
	secFileHeader = "FILEHDR"
	secTrailer    = "TRAILER"
)

// SectionName returns the five-letter name of a section type, or "TYPE<n>".
func SectionName(t uint32) string {
	switch t {
	case SecHeader:
		return "HEADR"
	case SecInterval:
		return "INTVL"
	case SecFinal:
		return "FINAL"
	case SecSyscalls:
		return "SYSCL"
	case SecSignals:
		return "SIGNL"
	case SecEnd:
		return "ENDST"
	case SecPageIdx:
		return "PGIDX"
	case SecPages:
		return "PAGES"
	case SecDir:
		return "DIRCT"
	}
	return fmt.Sprintf("TYPE%d", t)
}

// Limits a reader enforces before allocating anything a file asks for.
const (
	// PagesPerBlock is how many pages the writer puts in one compressed block.
	PagesPerBlock = 64
	// maxBlockRaw bounds a page block's uncompressed size for readers.
	maxBlockRaw = maxBlockPages * (PageSize + 8)
	// maxBlockPages bounds the pages of a block.
	maxBlockPages = 1024
	// packChunk is the uncompressed size of each lz4 chunk of a packed payload.
	packChunk = 1 << 20
	// maxPackChunk bounds a packed payload's chunk size for readers.
	maxPackChunk = 16 << 20
	// regsSize is the encoded size of Regs: 27 little-endian uint64.
	regsSize = 27 * 8
	// pageRefSize is the encoded size of a PageRef.
	pageRefSize = 8 + 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func crc32Update(c uint32, b []byte) uint32 { return crc32.Update(c, castagnoli, b) }

// zeroTimeSec is time.Time{}.Unix(): the zero time is encoded as itself.
var zeroTimeSec = time.Time{}.Unix()

// enc appends little-endian fields to a buffer.
type enc struct{ b []byte }

func (e *enc) u8(v uint8)   { e.b = append(e.b, v) }
func (e *enc) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int64)  { e.u64(uint64(v)) }
func (e *enc) int(v int)    { e.i64(int64(v)) }

func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

func (e *enc) bytes(v []byte) {
	e.u32(uint32(len(v)))
	e.b = append(e.b, v...)
}

func (e *enc) str(v string) {
	e.u32(uint32(len(v)))
	e.b = append(e.b, v...)
}

func (e *enc) strs(v []string) {
	e.u32(uint32(len(v)))
	for _, s := range v {
		e.str(s)
	}
}

func (e *enc) time(t time.Time) {
	e.i64(t.Unix())
	e.u32(uint32(t.Nanosecond()))
}

func (e *enc) hash(h Hash) { e.b = append(e.b, h[:]...) }

func (e *enc) regs(r *Regs) {
	for _, v := range regsList(r) {
		e.u64(*v)
	}
}

func (e *enc) pageRefs(refs []PageRef) {
	e.u32(uint32(len(refs)))
	for _, p := range refs {
		e.u64(p.Addr)
		e.hash(p.Hash)
	}
}

// regsList gives the registers in user_regs_struct order.
func regsList(r *Regs) [27]*uint64 {
	return [27]*uint64{
		&r.R15, &r.R14, &r.R13, &r.R12, &r.Rbp, &r.Rbx, &r.R11, &r.R10, &r.R9, &r.R8,
		&r.Rax, &r.Rcx, &r.Rdx, &r.Rsi, &r.Rdi, &r.OrigRax, &r.Rip, &r.Cs, &r.Eflags,
		&r.Rsp, &r.Ss, &r.FsBase, &r.GsBase, &r.Ds, &r.Es, &r.Fs, &r.Gs,
	}
}

// dec reads little-endian fields from an untrusted buffer. The first failure
// sticks: later reads return zero values, and err() reports where it happened.
// Every length and count is checked against the bytes that remain before
// anything is allocated from it.
type dec struct {
	b       []byte
	off     int
	sec     string
	base    int64 // file offset of b[0], or -1 when b is decompressed data
	fileOff int64 // file offset reported for decompressed data
	fail    *FormatError
}

func (d *dec) failf(format string, args ...any) {
	if d.fail != nil {
		return
	}
	msg := fmt.Sprintf(format, args...)
	off := d.base + int64(d.off)
	if d.base < 0 {
		off = d.fileOff
		msg = fmt.Sprintf("at byte %d of the decompressed payload: %s", d.off, msg)
	}
	d.fail = &FormatError{Section: d.sec, Offset: off, Msg: msg}
	d.off = len(d.b)
}

func (d *dec) err() error {
	if d.fail == nil {
		return nil
	}
	return d.fail
}

func (d *dec) remaining() int { return len(d.b) - d.off }

func (d *dec) take(n int, what string) []byte {
	if d.fail != nil {
		return nil
	}
	if n < 0 || n > d.remaining() {
		d.failf("%s: need %d bytes, %d left (truncated or corrupt)", what, n, d.remaining())
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *dec) u8(what string) uint8 {
	p := d.take(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *dec) u32(what string) uint32 {
	p := d.take(4, what)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

func (d *dec) u64(what string) uint64 {
	p := d.take(8, what)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

func (d *dec) i64(what string) int64 { return int64(d.u64(what)) }

func (d *dec) int(what string) int {
	v := d.i64(what)
	if v < math.MinInt || v > math.MaxInt {
		d.failf("%s: %d out of range", what, v)
		return 0
	}
	return int(v)
}

func (d *dec) bool(what string) bool {
	switch d.u8(what) {
	case 0:
		return false
	case 1:
		return true
	}
	d.off--
	d.failf("%s: boolean byte is neither 0 nor 1", what)
	return false
}

// count reads a uint32 element count and checks that count elements of at
// least minSize bytes each fit in what remains.
func (d *dec) count(what string, minSize int) int {
	n := d.u32(what + " count")
	if d.fail != nil {
		return 0
	}
	if uint64(n)*uint64(minSize) > uint64(d.remaining()) {
		d.off -= 4
		d.failf("%s count %d does not fit in the %d bytes left", what, n, d.remaining()-4)
		return 0
	}
	return int(n)
}

func (d *dec) bytes(what string) []byte {
	n := d.count(what+" length", 1)
	if n == 0 {
		return nil
	}
	p := d.take(n, what)
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *dec) str(what string) string {
	n := d.count(what+" length", 1)
	p := d.take(n, what)
	return string(p)
}

func (d *dec) strs(what string) []string {
	n := d.count(what, 4)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str(what)
	}
	return out
}

func (d *dec) time(what string) time.Time {
	sec := d.i64(what + " seconds")
	nsec := d.u32(what + " nanoseconds")
	if d.fail != nil {
		return time.Time{}
	}
	if nsec >= 1e9 {
		d.off -= 4
		d.failf("%s: nanoseconds %d out of range", what, nsec)
		return time.Time{}
	}
	if sec == zeroTimeSec && nsec == 0 {
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *dec) hash(what string) Hash {
	var h Hash
	copy(h[:], d.take(len(h), what))
	return h
}

func (d *dec) regs(r *Regs) {
	if d.remaining() < regsSize {
		d.failf("registers: need %d bytes, %d left", regsSize, d.remaining())
		return
	}
	for _, v := range regsList(r) {
		*v = d.u64("register")
	}
}

func (d *dec) pageRefs(what string) []PageRef {
	n := d.count(what, pageRefSize)
	if n == 0 {
		return nil
	}
	out := make([]PageRef, n)
	for i := range out {
		out[i].Addr = d.u64(what + " address")
		out[i].Hash = d.hash(what + " hash")
	}
	return out
}

// end checks that the payload was consumed. A newer minor version may append
// fields this reader does not know; the same or an older one may not.
// end fails on bytes left after the last field when the reader knows every
// field of the file's version (File.complete).
func (d *dec) end(complete bool) {
	if d.fail == nil && d.remaining() > 0 && complete {
		d.failf("%d unexpected bytes after the last field", d.remaining())
	}
}

func (e *enc) rseq(r Rseq) {
	e.u64(r.Addr)
	e.u32(r.Len)
	e.u32(r.Sig)
}

func (d *dec) rseq() Rseq {
	return Rseq{Addr: d.u64("rseq address"), Len: d.u32("rseq length"), Sig: d.u32("rseq signature")}
}
