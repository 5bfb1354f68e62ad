package format

import (
	"crypto/sha256"
	"fmt"
	"sync"
)

// HashPage names a page's content.
func HashPage(data []byte) Hash {
	sum := sha256.Sum256(data)
	var h Hash
	copy(h[:], sum[:16])
	return h
}

func hashZero() Hash { return HashPage(make([]byte, PageSize)) }

// PageSource gives page content by hash. The reader's File implements it by
// reading (and decompressing) only the block that holds the page.
type PageSource interface {
	Page(h Hash) ([]byte, error)
}

// MemStore is a PageSource held in memory, used by the recorder to assemble a
// checkpoint before writing it.
type MemStore struct {
	mu    sync.Mutex
	pages map[Hash][]byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{pages: map[Hash][]byte{}} }

// Put stores a copy of one page (zero pages are not stored) and returns its hash.
func (s *MemStore) Put(data []byte) Hash {
	h := HashPage(data)
	if h == ZeroHash {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pages[h]; !ok {
		s.pages[h] = append([]byte(nil), data...)
	}
	return h
}

// PutHashed stores a page whose hash the caller already computed.
func (s *MemStore) PutHashed(h Hash, data []byte) {
	if h == ZeroHash {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pages[h]; !ok {
		s.pages[h] = append([]byte(nil), data...)
	}
}

// Page implements PageSource.
func (s *MemStore) Page(h Hash) ([]byte, error) {
	if h == ZeroHash {
		return make([]byte, PageSize), nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pages[h]
	if !ok {
		return nil, fmt.Errorf("%w: page %x", ErrNoPage, h)
	}
	return p, nil
}

// Hashes returns every stored hash (order unspecified).
func (s *MemStore) Hashes() []Hash {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Hash, 0, len(s.pages))
	for h := range s.pages {
		out = append(out, h)
	}
	return out
}

// Len is the number of distinct non-zero pages stored.
func (s *MemStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pages)
}

// StartState computes the memory content at the start of interval index k (an
// index into c.Intervals) by Transplay's splicing rule: the original saved by the
// earliest interval at or after k that wrote the page, else the final content.
// The result maps page address to content hash.
func (c *Checkpoint) StartState(k int) map[uint64]Hash {
	m := make(map[uint64]Hash, len(c.Final))
	for _, p := range c.Final {
		m[p.Addr] = p.Hash
	}
	for j := len(c.Intervals) - 1; j >= k; j-- {
		for _, p := range c.Intervals[j].Written {
			m[p.Addr] = p.Hash
		}
	}
	return m
}

// DigestPage is the hash an end-state digest holds for the page at addr: the
// page's hash with the bytes of the rseq area (if it lies in the page) zeroed,
// since the kernel rewrites them after a migration, outside any syscall.
func DigestPage(addr uint64, data []byte, rs Rseq) Hash {
	if rs.Len == 0 || rs.Addr+uint64(rs.Len) <= addr || rs.Addr >= addr+PageSize {
		return HashPage(data)
	}
	masked := append([]byte(nil), data...)
	lo := max(rs.Addr, addr) - addr
	hi := min(rs.Addr+uint64(rs.Len), addr+PageSize) - addr
	clear(masked[lo:hi])
	return HashPage(masked)
}
