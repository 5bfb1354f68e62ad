package proc

import (
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func filter(t *testing.T, prog []bpf.Instruction) *bpf.VM {
	t.Helper()
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	sf := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		sf[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	vm, err := seccompVM(sf)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// Action reads struct seccomp_data as the kernel lays it out (native
// little-endian words: the number, the architecture, the low and high
// halves of 64-bit arguments) and takes the action of highest precedence
// over all filters.
func TestSeccompAction(t *testing.T) {
	first := filter(t, []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArchX86_64, SkipTrue: 1},
		bpf.RetConstant{Val: SeccompKillProcess},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipFalse: 1},
		bpf.RetConstant{Val: SeccompKillProcess},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_MADVISE, SkipFalse: 4},
		bpf.LoadAbsolute{Off: 32, Size: 4}, // args[2] low half
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.MADV_DOFORK, SkipFalse: 1},
		bpf.RetConstant{Val: SeccompErrno | 1},
		bpf.RetConstant{Val: SeccompLog},
		bpf.LoadAbsolute{Off: 20, Size: 4}, // args[0] high half
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x7f, SkipFalse: 1},
		bpf.RetConstant{Val: SeccompTrap},
		bpf.RetConstant{Val: SeccompAllow},
	})
	second := filter(t, []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_GETPID, SkipFalse: 1},
		bpf.RetConstant{Val: SeccompErrno | 38},
		bpf.RetConstant{Val: SeccompAllow},
	})
	sf := &SeccompFilters{Filters: []*bpf.VM{first, second}}
	for _, c := range []struct {
		nr   uint64
		args [6]uint64
		want uint32
	}{
		{unix.SYS_CLONE, [6]uint64{unix.CLONE_FILES}, SeccompKillProcess},
		{unix.SYS_MADVISE, [6]uint64{0x1000, 0x1000, unix.MADV_DOFORK}, SeccompErrno | 1},
		{unix.SYS_MADVISE, [6]uint64{0x1000, 0x1000, unix.MADV_DONTFORK}, SeccompLog},
		{unix.SYS_WAIT4, [6]uint64{0x7f_0000_0001}, SeccompTrap},
		{unix.SYS_WAIT4, [6]uint64{1}, SeccompAllow},
		{unix.SYS_GETPID, [6]uint64{}, SeccompErrno | 38},
	} {
		got, err := sf.Action(c.nr, c.args, 0x7fff_0000_1000)
		if err != nil || got != c.want {
			t.Errorf("syscall %d%v: %#x (%v), want %#x", c.nr, c.args, got, err, c.want)
		}
	}
	strict := &SeccompFilters{Strict: true}
	if a, _ := strict.Action(unix.SYS_CLONE, [6]uint64{}, 0); a != SeccompKillThread {
		t.Errorf("strict mode lets clone through: %#x", a)
	}
	if a, _ := strict.Action(unix.SYS_WRITE, [6]uint64{}, 0); a != SeccompAllow {
		t.Errorf("strict mode refuses write: %#x", a)
	}
}
