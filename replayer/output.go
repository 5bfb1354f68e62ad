package replayer

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tprec/tprec/format"

	"golang.org/x/sys/unix"
)

// outputs copies what the replayed program writes to its descriptors into
// DIR/fd-N.out. It is the only place replay writes to the host.
type outputs struct {
	dir   string
	files map[int]*os.File
}

func newOutputs(dir string) (*outputs, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	return &outputs{dir: dir, files: map[int]*os.File{}}, nil
}

func (o *outputs) close() error {
	if o == nil {
		return nil
	}
	var first error
	for _, f := range o.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// captures reports whether capture saves what calls of number nr write:
// the write-like calls, whose bytes it reads at the call's entry.
func (o *outputs) captures(nr int) bool {
	switch nr {
	case unix.SYS_WRITE, unix.SYS_PWRITE64, unix.SYS_SENDTO, unix.SYS_WRITEV, unix.SYS_PWRITEV, unix.SYS_PWRITEV2, unix.SYS_SENDMSG:
		return true
	}
	return false
}

// capture is called at the entry of a write-like syscall whose recorded result
// is n > 0 bytes: it reads those bytes from the program's memory as they are
// now, exactly what the kernel would have taken.
func (o *outputs) capture(mem memReader, rec *format.Syscall) error {
	if o == nil || rec.Ret <= 0 || !o.captures(rec.Nr) {
		return nil
	}
	n := uint64(rec.Ret)
	fd := int(int32(rec.Args[0]))
	var iov [][2]uint64 // address, length
	switch rec.Nr {
	case unix.SYS_WRITE, unix.SYS_PWRITE64, unix.SYS_SENDTO:
		iov = [][2]uint64{{rec.Args[1], n}}
	case unix.SYS_WRITEV, unix.SYS_PWRITEV, unix.SYS_PWRITEV2:
		var err error
		if iov, err = readIovecs(mem, rec.Args[1], rec.Args[2]); err != nil {
			return err
		}
	case unix.SYS_SENDMSG:
		// struct msghdr: msg_name, msg_namelen, msg_iov (offset 16), msg_iovlen (24).
		var hdr [32]byte
		if err := mem.ReadAt(hdr[:], rec.Args[1]); err != nil {
			return fmt.Errorf("capture output: %w", err)
		}
		var err error
		if iov, err = readIovecs(mem, binary.LittleEndian.Uint64(hdr[16:]), binary.LittleEndian.Uint64(hdr[24:])); err != nil {
			return err
		}
	default:
		return nil
	}
	var data []byte
	for _, v := range iov {
		if n == 0 {
			break
		}
		l := min(v[1], n)
		b := make([]byte, l)
		if err := mem.ReadAt(b, v[0]); err != nil {
			return fmt.Errorf("capture output of fd %d: %w", fd, err)
		}
		data = append(data, b...)
		n -= l
	}
	f := o.files[fd]
	if f == nil {
		var err error
		f, err = os.OpenFile(filepath.Join(o.dir, fmt.Sprintf("fd-%d.out", fd)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("capture output: %w", err)
		}
		o.files[fd] = f
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("capture output: %w", err)
	}
	return nil
}

type memReader interface {
	ReadAt(b []byte, addr uint64) error
}

func readIovecs(mem memReader, addr, count uint64) ([][2]uint64, error) {
	if count > 1024 { // UIO_MAXIOV
		return nil, fmt.Errorf("capture output: %d iovecs", count)
	}
	raw := make([]byte, 16*count)
	if err := mem.ReadAt(raw, addr); err != nil {
		return nil, fmt.Errorf("capture output: read iovec array: %w", err)
	}
	out := make([][2]uint64, count)
	for i := range out {
		out[i] = [2]uint64{binary.LittleEndian.Uint64(raw[16*i:]), binary.LittleEndian.Uint64(raw[16*i+8:])}
	}
	return out, nil
}
