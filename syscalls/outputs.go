package syscalls

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxOut bounds a single output range. A call that wrote more (a 100 MiB
// read) is not captured: the caller marks the interval not replayable.
const MaxOut = 64 << 20

// uioMaxIov is the kernel's limit on iovec and mmsghdr counts
// (include/uapi/linux/uio.h: UIO_MAXIOV); a successful call never used more.
const uioMaxIov = 1024

// ErrTooLarge is returned (wrapped) by Outputs when an output exceeds MaxOut.
var ErrTooLarge = errors.New("syscalls: output larger than MaxOut")

// ErrBadOutput is returned (wrapped) by Outputs when the process's own
// descriptions of its buffers (a socklen_t, an iovec, a msghdr) make no sense
// for a call that succeeded.
var ErrBadOutput = errors.New("syscalls: inconsistent output description")

// Range is a span of the process's memory the kernel wrote.
type Range struct {
	Addr uint64
	Len  int
}

// Outputs computes the memory ranges the kernel wrote into the process for a
// completed call d(args) = ret, in the order the table declares them. Ranges
// may overlap (a msghdr and the name it points to are separate ranges); their
// content is to be read after the call, so overlapping ranges agree.
//
// read reads the process's memory; Outputs uses it for the socklen_t of
// SizeArgPtr outputs and to walk iovec arrays and msghdrs, and may call it
// several times. Zero-length outputs and NULL pointers are omitted. A failed
// call (ret < 0) yields only the outputs marked OnError, and a read error
// while working those out drops the output instead of failing. A range longer
// than MaxOut is an error wrapping ErrTooLarge.
func Outputs(d *Desc, args [6]uint64, ret int64, read func(addr uint64, n int) ([]byte, error)) ([]Range, error) {
	return AppendOutputs(nil, d, args, ret, read)
}

// AppendOutputs is Outputs appending the ranges to dst: the eBPF record
// builder reuses one list for every call, where a new one per call was a
// third of its allocations.
func AppendOutputs(dst []Range, d *Desc, args [6]uint64, ret int64, read func(addr uint64, n int) ([]byte, error)) ([]Range, error) {
	c := collector{args: args, ret: ret, read: read, failed: ret < 0, out: dst}
	for _, o := range OutsOf(d, args, ret) {
		if c.failed && !o.OnError {
			continue
		}
		if o.Arg < 0 || o.Arg >= len(args) {
			return nil, fmt.Errorf("%s: output argument %d: %w", d.Name, o.Arg, ErrBadOutput)
		}
		ptr := args[o.Arg]
		if ptr == 0 {
			continue
		}
		var err error
		switch o.Kind {
		case OutPlain:
			var n int64
			n, err = c.size(o.Size)
			if err == nil {
				err = c.add(ptr, n)
			}
		case OutIovec:
			if o.Size.Arg < 0 || o.Size.Arg >= len(args) {
				return nil, fmt.Errorf("%s: iovec count argument %d: %w", d.Name, o.Size.Arg, ErrBadOutput)
			}
			err = c.iovecs(ptr, args[o.Size.Arg], c.retBytes())
		case OutMsghdr:
			err = c.msghdr(ptr, c.retBytes(), true)
		case OutMmsghdr:
			err = c.mmsghdrs(ptr, c.retBytes())
		default:
			err = fmt.Errorf("output kind %d: %w", o.Kind, ErrBadOutput)
		}
		if err != nil {
			if c.failed && !errors.Is(err, ErrTooLarge) {
				continue
			}
			return nil, fmt.Errorf("%s: argument %d: %w", d.Name, o.Arg, err)
		}
	}
	return c.out, nil
}

type collector struct {
	args   [6]uint64
	ret    int64
	read   func(addr uint64, n int) ([]byte, error)
	failed bool
	out    []Range
}

func (c *collector) retBytes() int64 {
	if c.failed {
		return 0
	}
	return c.ret
}

// add appends [addr, addr+n) unless it is empty.
func (c *collector) add(addr uint64, n int64) error {
	switch {
	case n == 0:
		return nil
	case n < 0:
		return fmt.Errorf("length %d at %#x: %w", n, addr, ErrBadOutput)
	case n > MaxOut:
		return fmt.Errorf("%d bytes at %#x: %w", n, addr, ErrTooLarge)
	case addr+uint64(n) < addr:
		return fmt.Errorf("%d bytes at %#x wrap around: %w", n, addr, ErrBadOutput)
	}
	c.out = append(c.out, Range{Addr: addr, Len: int(n)})
	return nil
}

// size evaluates a plain output's size. Products are checked against MaxOut
// before they are formed, so they cannot overflow.
func (c *collector) size(s Size) (int64, error) {
	arg := func() (uint64, error) {
		if s.Arg < 0 || s.Arg >= len(c.args) {
			return 0, fmt.Errorf("size argument %d: %w", s.Arg, ErrBadOutput)
		}
		return c.args[s.Arg], nil
	}
	times := func(v uint64, n int) (int64, error) {
		if n < 0 || (n > 0 && v > MaxOut/uint64(n)) {
			return 0, fmt.Errorf("%d entries of %d bytes: %w", v, n, ErrTooLarge)
		}
		return int64(v) * int64(n), nil
	}
	var n int64
	switch s.Kind {
	case SizeFixed:
		n = int64(s.N)
	case SizeRet:
		n = c.retBytes()
	case SizeArg:
		v, err := arg()
		if err != nil {
			return 0, err
		}
		if v > MaxOut {
			return 0, fmt.Errorf("%d bytes: %w", v, ErrTooLarge)
		}
		n = int64(v)
	case SizeArgPtr:
		v, err := arg()
		if err != nil || v == 0 {
			return 0, err
		}
		l, err := c.u32(v)
		if err != nil {
			return 0, err
		}
		n = int64(int32(l))
		if n < 0 {
			return 0, fmt.Errorf("length %d stored at %#x: %w", n, v, ErrBadOutput)
		}
	case SizeRetTimes:
		return times(uint64(c.retBytes()), s.N)
	case SizeArgTimes:
		v, err := arg()
		if err != nil {
			return 0, err
		}
		return times(v, s.N)
	default:
		return 0, fmt.Errorf("size kind %d: %w", s.Kind, ErrBadOutput)
	}
	if s.Max > 0 && n > int64(s.Max) {
		n = int64(s.Max)
	}
	return n, nil
}

// readN reads exactly n bytes at addr.
func (c *collector) readN(addr uint64, n int) ([]byte, error) {
	b, err := c.read(addr, n)
	if err != nil {
		return nil, fmt.Errorf("read %d bytes at %#x: %w", n, addr, err)
	}
	if len(b) < n {
		return nil, fmt.Errorf("read %d bytes at %#x: got %d: %w", n, addr, len(b), ErrBadOutput)
	}
	return b, nil
}

func (c *collector) u32(addr uint64) (uint32, error) {
	b, err := c.readN(addr, 4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

// iovecs walks count struct iovec at addr, in order, covering total bytes:
// the kernel fills each buffer before the next.
func (c *collector) iovecs(addr, count uint64, total int64) error {
	if total <= 0 || count == 0 {
		return nil
	}
	if count > uioMaxIov {
		return fmt.Errorf("%d iovecs: %w", count, ErrBadOutput)
	}
	b, err := c.readN(addr, int(count)*sizeofIovec)
	if err != nil {
		return err
	}
	for k := 0; k < int(count) && total > 0; k++ {
		e := b[k*sizeofIovec:]
		base := binary.LittleEndian.Uint64(e[offIovBase:])
		n := binary.LittleEndian.Uint64(e[offIovLen:])
		if n > uint64(total) {
			n = uint64(total)
		}
		if base == 0 && n > 0 {
			return fmt.Errorf("iovec %d is NULL: %w", k, ErrBadOutput)
		}
		if err := c.add(base, int64(n)); err != nil {
			return err
		}
		total -= int64(n)
	}
	if total > 0 {
		return fmt.Errorf("%d bytes beyond the iovecs: %w", total, ErrBadOutput)
	}
	return nil
}

// msghdr adds the ranges recvmsg wrote for the struct msghdr at addr whose
// call received total bytes of data: the msghdr itself when self (msg_namelen,
// msg_controllen and msg_flags are written back), the iovec buffers, the
// source address and the control data, the last two with the lengths the
// kernel stored in the msghdr.
func (c *collector) msghdr(addr uint64, total int64, self bool) error {
	b, err := c.readN(addr, sizeofMsghdr)
	if err != nil {
		return err
	}
	if self {
		if err := c.add(addr, int64(sizeofMsghdr)); err != nil {
			return err
		}
	}
	name := binary.LittleEndian.Uint64(b[offMsgName:])
	namelen := int64(binary.LittleEndian.Uint32(b[offMsgNamelen:]))
	if name != 0 {
		if namelen > sockaddrStorage {
			namelen = sockaddrStorage
		}
		if err := c.add(name, namelen); err != nil {
			return err
		}
	}
	iov := binary.LittleEndian.Uint64(b[offMsgIov:])
	iovlen := binary.LittleEndian.Uint64(b[offMsgIovlen:])
	if err := c.iovecs(iov, iovlen, total); err != nil {
		return err
	}
	control := binary.LittleEndian.Uint64(b[offMsgControl:])
	controllen := binary.LittleEndian.Uint64(b[offMsgControllen:])
	if control != 0 {
		if controllen > MaxOut {
			return fmt.Errorf("msg_controllen %d: %w", controllen, ErrTooLarge)
		}
		if err := c.add(control, int64(controllen)); err != nil {
			return err
		}
	}
	return nil
}

// mmsghdrs adds the ranges recvmmsg wrote for its first count entries: each
// whole struct mmsghdr (msg_len is written), then what msghdr adds for it
// with msg_len bytes of data.
func (c *collector) mmsghdrs(addr uint64, count int64) error {
	if count <= 0 {
		return nil
	}
	if count > uioMaxIov {
		return fmt.Errorf("%d messages: %w", count, ErrBadOutput)
	}
	for k := int64(0); k < count; k++ {
		e := addr + uint64(k)*uint64(sizeofMmsghdr)
		if err := c.add(e, int64(sizeofMmsghdr)); err != nil {
			return err
		}
		l, err := c.u32(e + uint64(offMmsgLen))
		if err != nil {
			return err
		}
		if err := c.msghdr(e, int64(l), false); err != nil {
			return err
		}
	}
	return nil
}
