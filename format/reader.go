package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"syscall"
)

// File is an open checkpoint file. Checkpoint holds everything but page
// content, decoded and checked; the File itself is the PageSource for the
// content, reading and decompressing only the block that holds a page.
type File struct {
	Checkpoint *Checkpoint

	r      io.ReaderAt
	closer io.Closer
	size   int64
	major  uint16
	minor  uint16
	codec  *codec // how chunks and page blocks are compressed (file-header flags)
	// pageWords: each block ends with its pages' addresses, which their
	// words are stored relative to (FlagPageWords).
	pageWords bool
	sections  []SectionStats
	index     []indexEntry // sorted by hash
	blocks    []blockEntry
	pagesOff  int64 // file offset of the PAGES payload

	mu     sync.Mutex
	closed bool
	cache  []cachedBlock // most recently used first
}

type indexEntry struct {
	h          Hash
	block, off uint32
}

type blockEntry struct {
	off       int64 // file offset of the compressed block
	comp, raw uint32
	pages     uint32 // bytes of pages at the head of the unpacked block
}

type cachedBlock struct {
	n    int
	data []byte
}

// blockCacheBytes bounds the decompressed page blocks a File keeps (at
// least one). The replayer reads a start state roughly in address order,
// where a few blocks would do; but a window that maps the same file again
// and again reads the pages each mapping touched, from blocks all over the
// store, at every mapping: with 8 blocks kept, a python3 mapping a 20 MB
// file 480 times spent 4.4 of its 9.1 s of replay decompressing the same
// 81 blocks again (by hand).
const blockCacheBytes = 64 << 20

// complete reports whether this build knows every field of the file's
// version: an older major, or this major at a minor not above its own. Only
// then are bytes after the last known field of a payload an error; a later
// minor may append fields.
func (f *File) complete() bool {
	return f.major < VersionMajor || f.minor <= VersionMinor
}

// unpacked unpacks the packed payload d holds (SYSCL; INTVL from version
// 3), decodes it with decode and returns its unpacked size.
func (f *File) unpacked(d *dec, decode func(*dec)) int64 {
	b := unpack(d, f.codec)
	if d.fail != nil {
		return 0
	}
	d2 := &dec{b: b, base: -1, fileOff: d.base, sec: d.sec}
	decode(d2)
	d2.end(f.complete())
	d.fail = d2.fail
	return int64(len(b))
}

// Stats are byte counts of a checkpoint file, for tpinspect.
type Stats struct {
	FileSize int64
	// Sections lists every section in file order, the directory included.
	Sections []SectionStats
	// StoredPages is the number of distinct pages in the page store.
	StoredPages int
	Blocks      int
	// PagesRaw is the size of the stored pages, PagesCompressed that of
	// the blocks as stored (block table excluded; from version 5.1 the
	// blocks also hold their pages' addresses).
	PagesRaw, PagesCompressed int64
}

// SectionStats describes one section.
type SectionStats struct {
	Name   string // "HEADR", ... or "TYPE<n>" for a type this reader skipped
	Type   uint32
	Offset int64 // file offset of the section header
	Size   int64 // payload bytes in the file
	Raw    int64 // payload bytes once decompressed (Size when not compressed)
}

// Open opens and checks the checkpoint file at path. Errors about the
// content are *FormatError (errors.Is(err, ErrFormat)).
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	if st.IsDir() {
		fh.Close()
		return nil, fmt.Errorf("open checkpoint: %w", &os.PathError{Op: "read", Path: path, Err: syscall.EISDIR})
	}
	f, err := Decode(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// Close releases the file. Page fails afterwards.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.cache = nil
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// Stats returns the byte counts of the file.
func (f *File) Stats() Stats {
	s := Stats{
		FileSize:    f.size,
		Sections:    append([]SectionStats(nil), f.sections...),
		StoredPages: len(f.index),
		Blocks:      len(f.blocks),
	}
	for _, b := range f.blocks {
		s.PagesRaw += int64(b.pages)
		s.PagesCompressed += int64(b.comp)
	}
	return s
}

// Has tells whether the page store holds content h (ZeroHash always counts).
func (f *File) Has(h Hash) bool { return h == ZeroHash || f.find(h) >= 0 }

func (f *File) find(h Hash) int {
	i := sort.Search(len(f.index), func(i int) bool { return bytes.Compare(f.index[i].h[:], h[:]) >= 0 })
	if i < len(f.index) && f.index[i].h == h {
		return i
	}
	return -1
}

// Page implements PageSource. It returns a copy the caller may keep and
// modify, after checking that the stored content still hashes to h.
func (f *File) Page(h Hash) ([]byte, error) {
	if h == ZeroHash {
		return make([]byte, PageSize), nil
	}
	i := f.find(h)
	if i < 0 {
		return nil, fmt.Errorf("%w: %x", ErrNoPage, h)
	}
	e := f.index[i]
	data, err := f.block(int(e.block))
	if err != nil {
		return nil, err
	}
	p := append([]byte(nil), data[e.off:e.off+PageSize]...)
	if got := HashPage(p); got != h {
		return nil, &FormatError{Section: "PAGES", Offset: f.blocks[e.block].off,
			Msg: fmt.Sprintf("page %x at byte %d of block %d has content %x (corrupt block)", h, e.off, e.block, got)}
	}
	return p, nil
}

// block returns the decompressed content of block n, from the cache if it is
// there.
func (f *File) block(n int) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("read checkpoint page: file is closed")
	}
	for i, c := range f.cache {
		if c.n == n {
			copy(f.cache[1:i+1], f.cache[:i])
			f.cache[0] = c
			return c.data, nil
		}
	}
	b := f.blocks[n]
	comp, err := readAt(f.r, b.off, int64(b.comp), "PAGES")
	if err != nil {
		return nil, err
	}
	data := make([]byte, b.raw)
	if b.comp == b.raw {
		copy(data, comp)
	} else if err := f.codec.decompress(comp, data); err != nil {
		return nil, &FormatError{Section: "PAGES", Offset: b.off,
			Msg: fmt.Sprintf("block %d does not decompress to %d bytes: %v", n, b.raw, err)}
	}
	if f.pageWords {
		addrs := data[b.pages:]
		for i := 0; i < int(b.pages)/PageSize; i++ {
			swapPageWords(data[i*PageSize:(i+1)*PageSize], binary.LittleEndian.Uint64(addrs[i*8:]))
		}
		data = data[:b.pages]
	}
	f.cache = append(f.cache, cachedBlock{})
	copy(f.cache[1:], f.cache[:len(f.cache)-1])
	f.cache[0] = cachedBlock{n, data}
	kept := 0
	for i, c := range f.cache {
		if kept += len(c.data); kept > blockCacheBytes && i > 0 {
			clear(f.cache[i:])
			f.cache = f.cache[:i]
			break
		}
	}
	return data, nil
}

// readAt reads n bytes at off, in bounded steps so that a size taken from a
// damaged file costs no more memory than the bytes really there.
func readAt(r io.ReaderAt, off, n int64, sec string) ([]byte, error) {
	const step = 16 << 20
	out := make([]byte, 0, min(n, step))
	for int64(len(out)) < n {
		k := min(n-int64(len(out)), step)
		out = append(out, make([]byte, k)...)
		at := off + int64(len(out)) - k
		if _, err := r.ReadAt(out[len(out)-int(k):], at); err != nil {
			return nil, readErr(sec, at, k, err)
		}
	}
	return out, nil
}

// crcAt computes the CRC32C of n bytes at off without holding them.
func crcAt(r io.ReaderAt, off, n int64, sec string) (uint32, error) {
	buf := make([]byte, min(n, 1<<20))
	var c uint32
	for done := int64(0); done < n; {
		k := min(n-done, int64(len(buf)))
		if _, err := r.ReadAt(buf[:k], off+done); err != nil {
			return 0, readErr(sec, off+done, k, err)
		}
		c = crc32Update(c, buf[:k])
		done += k
	}
	return c, nil
}

func readErr(sec string, off, n int64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{Section: sec, Offset: off, Msg: fmt.Sprintf("file ends before the %d bytes it should hold here (truncated)", n)}
	}
	return &FormatError{Section: sec, Offset: off, Msg: fmt.Sprintf("read %d bytes: %v", n, err)}
}

// rawSection is a section as the directory and its header describe it.
type rawSection struct {
	typ     uint32
	off     int64 // file offset of the section header
	length  int64 // payload length
	sum     uint32
	payload []byte // nil for PAGES and skipped sections
}

func (s *rawSection) name() string  { return SectionName(s.typ) }
func (s *rawSection) payOff() int64 { return s.off + sectionHeaderSize }

// Decode reads and checks a checkpoint file of size bytes from r. It reads
// every byte once to check the CRCs, keeps the decoded model and the page
// index, and reads page blocks again only on demand.
func Decode(r io.ReaderAt, size int64) (*File, error) {
	f := &File{r: r, size: size}
	if size < 8 {
		return nil, &FormatError{Section: secFileHeader, Offset: 0, Msg: fmt.Sprintf("not a tprec checkpoint (%d bytes, too short for the magic)", size)}
	}
	hdr, err := readAt(r, 0, min(size, fileHeaderSize), secFileHeader)
	if err != nil {
		return nil, err
	}
	if string(hdr[:8]) != Magic {
		return nil, &FormatError{Section: secFileHeader, Offset: 0, Msg: fmt.Sprintf("not a tprec checkpoint (magic %q, want %q)", hdr[:8], Magic)}
	}
	if size < fileHeaderSize+sectionHeaderSize+trailerSize {
		return nil, &FormatError{Section: secFileHeader, Offset: 0, Msg: fmt.Sprintf("file of %d bytes is too short to be a checkpoint (truncated)", size)}
	}
	f.major = binary.LittleEndian.Uint16(hdr[8:])
	f.minor = binary.LittleEndian.Uint16(hdr[10:])
	flags := le32(hdr[12:])
	if f.major < 1 || f.major > VersionMajor {
		return nil, &FormatError{Section: secFileHeader, Offset: 8, Msg: fmt.Sprintf("format version %d.%d is not supported: this build reads versions 1.x to %d.x", f.major, f.minor, VersionMajor)}
	}
	if flags&requiredFlags&^knownFlags != 0 {
		return nil, &FormatError{Section: secFileHeader, Offset: 12, Msg: fmt.Sprintf("file needs features this build lacks (flags %#x)", flags&requiredFlags&^knownFlags)}
	}
	f.codec = &codec{zstd: flags&FlagZstd != 0}
	f.pageWords = flags&FlagPageWords != 0

	// Trailer: where the directory is, and a check of the file's framing.
	tOff := size - trailerSize
	tr, err := readAt(r, tOff, trailerSize, secTrailer)
	if err != nil {
		return nil, err
	}
	if string(tr[24:]) != EndMagic {
		return nil, &FormatError{Section: secTrailer, Offset: tOff + 24, Msg: "no end marker: the file is truncated or was not completely written"}
	}
	if got := crc(tr[:20]); got != le32(tr[20:]) {
		return nil, &FormatError{Section: secTrailer, Offset: tOff, Msg: fmt.Sprintf("trailer CRC %08x, want %08x", got, le32(tr[20:]))}
	}
	if n := le64(tr[8:]); n != uint64(size) {
		return nil, &FormatError{Section: secTrailer, Offset: tOff + 8, Msg: fmt.Sprintf("file is %d bytes, its trailer says %d (truncated or extended)", size, n)}
	}
	dirOff := le64(tr[:])
	if dirOff < fileHeaderSize || dirOff > uint64(tOff-sectionHeaderSize) {
		return nil, &FormatError{Section: secTrailer, Offset: tOff, Msg: fmt.Sprintf("directory offset %d outside the file", dirOff)}
	}
	chain := crc(hdr)

	// Directory: it lists every other section, in file order.
	dir := rawSection{off: int64(dirOff)}
	if err := f.readSectionHeader(&dir, SecDir, tOff); err != nil {
		return nil, err
	}
	if dir.off+sectionHeaderSize+dir.length != tOff {
		return nil, &FormatError{Section: "DIRCT", Offset: dir.off + 4, Msg: fmt.Sprintf("directory of %d bytes does not end where the trailer starts", dir.length)}
	}
	if dir.payload, err = readAt(r, dir.payOff(), dir.length, "DIRCT"); err != nil {
		return nil, err
	}
	if got := crc(dir.payload); got != dir.sum {
		return nil, &FormatError{Section: "DIRCT", Offset: dir.payOff(), Msg: fmt.Sprintf("payload CRC %08x, want %08x", got, dir.sum)}
	}
	d := &dec{b: dir.payload, base: dir.payOff(), sec: "DIRCT"}
	n := d.count("section", dirEntrySize)
	secs := make([]rawSection, 0, n)
	next := int64(fileHeaderSize)
	for i := 0; i < n && d.fail == nil; i++ {
		at := d.off
		s := rawSection{typ: d.u32("section type")}
		if d.u32("reserved") != 0 {
			d.off -= 4
			d.failf("reserved field is not zero")
		}
		off := d.u64("section offset")
		if d.fail != nil {
			break
		}
		if off != uint64(next) {
			d.off = at
			d.failf("section %d (%s) at offset %d, want %d (sections follow each other)", i, SectionName(s.typ), off, next)
			break
		}
		s.off = next
		if s.typ == SecDir {
			d.off = at
			d.failf("the directory lists itself")
			break
		}
		if err := f.readSectionHeader(&s, s.typ, int64(dirOff)); err != nil {
			return nil, err
		}
		var h enc
		h.u32(s.typ)
		h.u64(uint64(s.length))
		h.u32(s.sum)
		chain = crc32Update(chain, h.b)
		next = s.payOff() + s.length
		secs = append(secs, s)
	}
	d.end(f.complete())
	if err := d.err(); err != nil {
		return nil, err
	}
	if next != int64(dirOff) {
		return nil, &FormatError{Section: "DIRCT", Offset: int64(dirOff), Msg: fmt.Sprintf("sections end at %d, the directory starts at %d", next, dirOff)}
	}
	var h enc
	h.u32(SecDir)
	h.u64(uint64(dir.length))
	h.u32(dir.sum)
	chain = crc32Update(chain, h.b)
	if want := le32(tr[16:]); chain != want {
		return nil, &FormatError{Section: secTrailer, Offset: tOff + 16, Msg: fmt.Sprintf("framing CRC %08x, want %08x (a section header is damaged)", chain, want)}
	}

	// Payloads: check every CRC, keep the ones decoded here.
	byType := map[uint32]*rawSection{}
	for i := range secs {
		s := &secs[i]
		known := s.typ >= SecHeader && s.typ <= SecPages
		if !known && s.typ&criticalBit != 0 {
			return nil, &FormatError{Section: s.name(), Offset: s.off, Msg: "section type unknown to this build and marked as required: upgrade tprec"}
		}
		if known && byType[s.typ] != nil {
			return nil, &FormatError{Section: s.name(), Offset: s.off, Msg: "section appears twice"}
		}
		var got uint32
		if known && s.typ != SecPages {
			if s.payload, err = readAt(r, s.payOff(), s.length, s.name()); err != nil {
				return nil, err
			}
			got = crc(s.payload)
		} else if got, err = crcAt(r, s.payOff(), s.length, s.name()); err != nil {
			return nil, err
		}
		if got != s.sum {
			return nil, &FormatError{Section: s.name(), Offset: s.payOff(), Msg: fmt.Sprintf("payload CRC %08x, want %08x", got, s.sum)}
		}
		if known {
			byType[s.typ] = s
		}
	}
	for t := SecHeader; t <= SecPages; t++ {
		if byType[t] == nil {
			return nil, &FormatError{Section: SectionName(t), Offset: int64(dirOff), Msg: "required section missing"}
		}
	}

	c := &Checkpoint{}
	f.Checkpoint = c
	raw := map[uint32]int64{}
	steps := []struct {
		t  uint32
		fn func(*dec)
	}{
		{SecHeader, func(d *dec) { decodeHeader(d, &c.Header) }},
		{SecInterval, func(d *dec) {
			if f.major < 3 {
				c.Intervals = decodeIntervals(d, f.major)
				return
			}
			raw[SecInterval] = f.unpacked(d, func(d2 *dec) { c.Intervals = decodeIntervals(d2, f.major) })
		}},
		{SecFinal, func(d *dec) { c.Final = d.pageRefs("final page") }},
		{SecSyscalls, func(d *dec) {
			raw[SecSyscalls] = f.unpacked(d, func(d2 *dec) {
				switch f.major {
				case 1:
					c.Syscalls = decodeSyscallsV1(d2)
				case 2, 3:
					c.Syscalls = decodeSyscallsV2(d2, f.major)
				default:
					c.Syscalls = decodeSyscalls(d2, f.major)
				}
			})
		}},
		{SecSignals, func(d *dec) { c.Signals = decodeSignals(d) }},
		{SecEnd, func(d *dec) { decodeEnd(d, &c.End) }},
		{SecPageIdx, func(d *dec) { f.decodeIndex(d) }},
	}
	if err := f.decodeBlocks(byType[SecPages]); err != nil {
		return nil, err
	}
	raw[SecPages] = 4 + int64(len(f.blocks))*16
	for _, b := range f.blocks {
		raw[SecPages] += int64(b.raw)
	}
	for _, st := range steps {
		s := byType[st.t]
		d := &dec{b: s.payload, base: s.payOff(), sec: s.name()}
		st.fn(d)
		d.end(f.complete())
		if err := d.err(); err != nil {
			return nil, err
		}
	}
	if p := checkModel(c, f.Has); p != nil {
		s := byType[p.sec]
		return nil, &FormatError{Section: s.name(), Offset: s.payOff(), Msg: p.msg}
	}
	for _, s := range secs {
		r := s.length
		if v, ok := raw[s.typ]; ok {
			r = v
		}
		f.sections = append(f.sections, SectionStats{Name: s.name(), Type: s.typ, Offset: s.off, Size: s.length, Raw: r})
	}
	f.sections = append(f.sections, SectionStats{Name: "DIRCT", Type: SecDir, Offset: dir.off, Size: dir.length, Raw: dir.length})
	return f, nil
}

// readSectionHeader reads the header of the section at s.off, which must be of
// type want and end by limit.
func (f *File) readSectionHeader(s *rawSection, want uint32, limit int64) error {
	name := SectionName(want)
	h, err := readAt(f.r, s.off, sectionHeaderSize, name)
	if err != nil {
		return err
	}
	if t := le32(h); t != want {
		return &FormatError{Section: name, Offset: s.off, Msg: fmt.Sprintf("section header says type %d (%s), want %d", t, SectionName(t), want)}
	}
	n := le64(h[4:])
	if n > uint64(limit-s.payOff()) {
		return &FormatError{Section: name, Offset: s.off + 4, Msg: fmt.Sprintf("payload length %d runs past byte %d", n, limit)}
	}
	s.typ = want
	s.length = int64(n)
	s.sum = le32(h[12:])
	return nil
}
