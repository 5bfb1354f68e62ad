package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// A process in which uprobes have run holds their breakpoints in its code,
// and the exits of the kernel's uretprobe trampoline calls look like
// rt_sigreturn to the eBPF programs: the recorder must say its intervals
// cannot be replayed rather than write a checkpoint that diverges. A
// uretprobe on libc's getppid, filtered to a python3 loop calling it.
func TestUprobedProcessNotReplayable(t *testing.T) {
	requireRoot(t)
	target, _, done := startTarget(t, "/usr/bin/python3", "-S", "-c", `import os
while True:
    os.getppid()`)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatalf("load a uprobe program: %v", err)
	}
	defer prog.Close()
	libc, err := link.OpenExecutable("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	up, err := libc.Uretprobe("getppid", prog, &link.UprobeOptions{PID: target.Process.Pid})
	if err != nil {
		t.Fatalf("attach a uretprobe to getppid: %v", err)
	}
	defer up.Close()
	time.Sleep(200 * time.Millisecond)
	ck := attachAndCrash(t, target, done, 800*time.Millisecond, "--backend", "ebpf")
	ivs := intervalsIn(t, ck)
	if len(ivs) == 0 {
		t.Fatal("no interval in the checkpoint")
	}
	for _, iv := range ivs {
		if iv.Replayable || !strings.Contains(iv.Reason, "uprobes") {
			t.Errorf("interval %d: replayable %v, reason %q; want not replayable because of uprobes", iv.Index, iv.Replayable, iv.Reason)
		}
	}
	if out, code := runTool(t, "tpreplay", ck); code == 0 {
		t.Errorf("tpreplay succeeded on a process with uprobes:\n%s", out)
	}
}
