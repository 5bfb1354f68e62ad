package proc

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Mem reads and writes a process's memory through /proc/PID/mem, which (unlike
// process_vm_writev) may write read-only and PROT_NONE pages of a tracee.
type Mem struct {
	f *os.File
}

// OpenMem opens /proc/PID/mem for reading and writing.
func OpenMem(pid int) (*Mem, error) {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open memory of %d: %w", pid, err)
	}
	return &Mem{f: f}, nil
}

// ReadAt reads len(b) bytes at addr.
func (m *Mem) ReadAt(b []byte, addr uint64) error {
	n, err := m.f.ReadAt(b, int64(addr))
	if err != nil || n != len(b) {
		return fmt.Errorf("read %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

// WriteAt writes b at addr.
func (m *Mem) WriteAt(b []byte, addr uint64) error {
	n, err := m.f.WriteAt(b, int64(addr))
	if err != nil || n != len(b) {
		return fmt.Errorf("write %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

// Close closes the file.
func (m *Mem) Close() error { return m.f.Close() }

// ReadPages reads whole pages at the given page addresses into dst (len(addrs)
// pages) with process_vm_readv, up to 1024 pages a call. Consecutive
// addresses are read as one range: the kernel pins the pages of a range
// together, and a boundary's originals, mostly runs of a heap, took half
// the time that way (4.0 against 2.0 ms for 2,500 pages). A page that
// cannot be read (unmapped meanwhile) fails the call.
func ReadPages(pid int, addrs []uint64, dst []byte) error {
	const batch = 1024
	var remote []unix.RemoteIovec
	for i := 0; i < len(addrs); i += batch {
		j := min(i+batch, len(addrs))
		local := []unix.Iovec{{Base: &dst[i*pageSize]}}
		local[0].SetLen((j - i) * pageSize)
		remote = remote[:0]
		for _, a := range addrs[i:j] {
			if k := len(remote) - 1; k >= 0 && uint64(remote[k].Base)+uint64(remote[k].Len) == a {
				remote[k].Len += pageSize
				continue
			}
			remote = append(remote, unix.RemoteIovec{Base: uintptr(a), Len: pageSize})
		}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return fmt.Errorf("read pages of %d: %w", pid, err)
		}
		if n != (j-i)*pageSize {
			return fmt.Errorf("read pages of %d: short read at %#x", pid, addrs[i+n/pageSize])
		}
	}
	return nil
}

// ReadBytes reads len(dst) bytes at addr with process_vm_readv and returns how
// many were readable.
func ReadBytes(pid int, addr uint64, dst []byte) (int, error) {
	if len(dst) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
	return unix.ProcessVMReadv(pid, local, remote, 0)
}

const pageSize = 4096
