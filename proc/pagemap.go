package proc

import (
	"encoding/binary"
	"fmt"
	"os"
)

// Pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	PMPresent   = 1 << 63
	PMSwapped   = 1 << 62
	PMFile      = 1 << 61
	PMExclusive = 1 << 56
	PMSoftDirty = 1 << 55
	PMPFNMask   = (1 << 55) - 1
)

// Pagemap holds an open /proc/PID/pagemap.
type Pagemap struct{ f *os.File }

// OpenPagemap opens the pagemap of pid. PFNs are only visible with CAP_SYS_ADMIN.
func OpenPagemap(pid int) (*Pagemap, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, fmt.Errorf("open pagemap: %w", err)
	}
	return &Pagemap{f: f}, nil
}

// Range returns one entry per page of [start, end).
func (p *Pagemap) Range(start, end uint64) ([]uint64, error) {
	n := int((end - start) / pageSize)
	buf := make([]byte, n*8)
	if _, err := p.f.ReadAt(buf, int64(start/pageSize*8)); err != nil {
		return nil, fmt.Errorf("read pagemap %#x-%#x: %w", start, end, err)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[i*8:])
	}
	return out, nil
}

// Close closes the file.
func (p *Pagemap) Close() error { return p.f.Close() }
