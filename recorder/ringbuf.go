package recorder

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ringReader consumes a BPF ring buffer map (kernel/bpf/ringbuf.c) through
// its memory mapping: the consumer position's page, writable, at offset 0;
// the producer position's page and the data, mapped twice in a row so that a
// record that wraps around is contiguous, read-only after it.
//
// It hands out records in batches and publishes the consumer position once
// per batch. Publishing it after every record, as a general-purpose reader
// does, costs the traced program: every bpf_ringbuf_reserve reads the
// consumer position and writes the producer position, so a reader that
// touches both for each record moves two cache lines between the CPUs for
// every syscall. Records are passed as slices of the mapping, valid until the
// callback returns.
type ringRing struct {
	consPos *uint64
	prodPos *uint64
	data    []byte // 2 * size: the data pages mapped twice
	mask    uint64
}

// Record header (include/uapi/linux/bpf.h): u32 length with two flag bits,
// u32 page offset; the data follows, the whole rounded up to 8 bytes.
const (
	ringHdrSize    = 8
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	// ringPublishEvery bounds the bytes consumed before the position is
	// published, so the producers regain space during a long batch.
	ringPublishEvery = 1 << 20
)

// errRingCorrupt: a header says more than the producer wrote.
var errRingCorrupt = errors.New("ring buffer record longer than the data written")

// drain passes committed records to fn, in order, at most limit of them,
// stopping at the first record still being written, and returns how many it
// passed. The consumer position is published every ringPublishEvery bytes
// and at the end.
func (r *ringRing) drain(limit int, fn func([]byte)) (int, error) {
	cons := atomic.LoadUint64(r.consPos)
	prod := atomic.LoadUint64(r.prodPos)
	published, n := cons, 0
	defer func() {
		if cons != published {
			atomic.StoreUint64(r.consPos, cons)
		}
	}()
	for cons < prod && n < limit {
		off := cons & r.mask
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
		if hdr&ringBusyBit != 0 {
			break
		}
		length := uint64(hdr &^ (ringBusyBit | ringDiscardBit))
		total := (length + ringHdrSize + 7) &^ 7
		if total > prod-cons || length > r.mask+1 {
			return n, fmt.Errorf("%w: %d bytes at position %d, %d available", errRingCorrupt, length, cons, prod-cons)
		}
		if hdr&ringDiscardBit == 0 {
			start := off + ringHdrSize
			fn(r.data[start : start+length : start+length])
			n++
		}
		cons += total
		if cons-published >= ringPublishEvery {
			atomic.StoreUint64(r.consPos, cons)
			published = cons
		}
		if cons == prod {
			// More may have been committed meanwhile.
			prod = atomic.LoadUint64(r.prodPos)
		}
	}
	return n, nil
}

// pending reports whether a record is in the ring, committed or not.
func (r *ringRing) pending() uint64 {
	return atomic.LoadUint64(r.prodPos) - atomic.LoadUint64(r.consPos)
}

// ringReader is a ringRing over a map's memory, with a way to sleep until
// the ring has data, a period passes, or another goroutine pokes it.
type ringReader struct {
	ringRing
	consMap, dataMap []byte
	epfd, wake       int
}

// newRingReader maps the ring buffer map of descriptor fd and size bytes.
func newRingReader(fd, size int) (*ringReader, error) {
	page := os.Getpagesize()
	r := &ringReader{epfd: -1, wake: -1}
	var err error
	if r.consMap, err = unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("map ring buffer consumer page: %w", err)
	}
	if r.dataMap, err = unix.Mmap(fd, int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		r.close()
		return nil, fmt.Errorf("map ring buffer data: %w", err)
	}
	r.consPos = (*uint64)(unsafe.Pointer(&r.consMap[0]))
	r.prodPos = (*uint64)(unsafe.Pointer(&r.dataMap[0]))
	r.data = r.dataMap[page:]
	r.mask = uint64(size - 1)
	if r.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		r.close()
		return nil, fmt.Errorf("ring buffer eventfd: %w", err)
	}
	if r.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		r.close()
		return nil, fmt.Errorf("ring buffer epoll: %w", err)
	}
	for _, f := range []int{fd, r.wake} {
		if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, f, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f)}); err != nil {
			r.close()
			return nil, fmt.Errorf("ring buffer epoll: %w", err)
		}
	}
	return r, nil
}

// wait sleeps until the kernel signals data (a record sent with a wakeup),
// poke is called, or timeout passes.
func (r *ringReader) wait(timeout time.Duration) error {
	var evs [2]unix.EpollEvent
	n, err := unix.EpollWait(r.epfd, evs[:], int(timeout/time.Millisecond))
	if err != nil && !errors.Is(err, unix.EINTR) {
		return fmt.Errorf("wait for ring buffer: %w", err)
	}
	for _, ev := range evs[:max(n, 0)] {
		if int(ev.Fd) == r.wake {
			var b [8]byte
			unix.Read(r.wake, b[:])
		}
	}
	return nil
}

// poke wakes a wait.
func (r *ringReader) poke() {
	var one [8]byte
	one[0] = 1
	unix.Write(r.wake, one[:])
}

// close releases the mappings and descriptors; no drain or wait may run.
func (r *ringReader) close() {
	for _, m := range [][]byte{r.consMap, r.dataMap} {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.consMap, r.dataMap, r.data = nil, nil, nil
	for _, fd := range []int{r.epfd, r.wake} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	r.epfd, r.wake = -1, -1
}
