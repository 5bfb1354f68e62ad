package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/proc"
)

// A checkpoint is replayed on another machine than the one it was recorded
// on: a bug report's reader runs tpreplay on their own kernel and CPU.
// TestReplayOnOtherKernels records Debian's own programs on this machine's
// kernel, then boots each kernel scripts/fetch-kernels.sh fetched (Debian
// 12's 6.1 and Debian 11's 5.10) under qemu's software CPU, with nothing
// but a static tpreplay, busybox and the checkpoints in its initramfs: no
// binary, library or file of the recording machine. Every replay must
// verify there. qemu's CPU lacks AVX-512 and more, which this machine's may
// have: the recorded programs run with glibc told not to use AVX-512 and
// xsavec (GLIBC_TUNABLES), and the replays take --any-cpu. One more recording,
// without that, shows what a user sees when the replay CPU lacks an
// instruction the recording used, where the recording CPU had AVX-512.
func TestReplayOnOtherKernels(t *testing.T) {
	qemu, busybox := vmTools(t)
	kernels := otherKernels(t)
	bin := staticTool(t, "tpreplay")
	py := "/usr/bin/python3"
	// glibc off AVX-512 and off xsavec, which its loader's lazy binding
	// uses where the CPU has it: a window that bound a function for the
	// first time (redis-server's, 1 CI run in 2) stopped on it. Where this
	// CPU has TSX, glibc's string functions are then its *_rtm ones, which
	// end in xtest: qemu's CPU has no TSX, and the replays run them
	// (replayer/xtest.go).
	noAVX512 := "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-XSAVEC"

	type vmRun struct {
		name  string
		ck    string
		args  []string
		check func(t *testing.T, out string, code int)
	}
	verified := func(t *testing.T, out string, code int) {
		if code != 0 || !verifiedRe.MatchString(out) {
			t.Errorf("exit %d, not verified:\n%s", code, out)
		}
	}
	var runs []vmRun
	// Where this CPU has TSX, the replays under qemu run glibc's xtest
	// patched, and say so.
	tsx := hasCPUFlag(t, "rtm")
	verifiedTSX := func(t *testing.T, out string, code int) {
		verified(t, out, code)
		if tsx && !strings.Contains(out, "xtest instructions of the recorded code ran as cmp eax, eax") {
			t.Errorf("recorded on a CPU with TSX and replayed on qemu's, without: no xtest patched:\n%s", out)
		}
	}

	// python3 reading files and sleeping (eBPF, every start stored): the
	// whole window, and from its last interval.
	script := pythonScript(t, "otherkernel.py", otherKernelScript)
	target, _, done := startTarget(t, "/usr/bin/env", noAVX512, py, "-S", script)
	ck := attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", "ebpf", "--keep", "4", "--all-starts")
	idx := intervalsOf(t, ck)
	if len(idx) < 2 {
		t.Fatalf("python3's checkpoint has %d replayable intervals, want 2 or more", len(idx))
	}
	runs = append(runs, vmRun{"python3, eBPF", ck, nil, verifiedTSX},
		vmRun{fmt.Sprintf("python3, eBPF, from interval %d", idx[len(idx)-1]), ck, []string{"--from", fmt.Sprint(idx[len(idx)-1])}, verified})

	// The same with the ptrace backend.
	target, _, done = startTarget(t, "/usr/bin/env", noAVX512, py, "-S", script)
	ck = attachAndCrash(t, target, done, 1500*time.Millisecond, "--backend", "ptrace", "--keep", "4")
	runs = append(runs, vmRun{"python3, ptrace", ck, nil, verified})

	// redis-server's five threads under redis-benchmark (eBPF, the clock
	// log), crashed in its main thread.
	srv, srvDone := redisUnderLoadVia(t, []string{"/usr/bin/env", noAVX512}, "6441")
	pid := srv.Process.Pid
	ck = crashThread(t, srv, srvDone, pid, 2*time.Second, "--backend", "ebpf")
	runs = append(runs, vmRun{"redis-server, eBPF", ck, nil, verifiedTSX})

	// Recorded with AVX-512 allowed: glibc's string functions use it where
	// this CPU has it, and qemu's CPU does not.
	if hasCPUFlag(t, "avx512vl") {
		target, _, done = startTarget(t, py, "-S", script)
		ck = attachAndCrash(t, target, done, 1500*time.Millisecond, "--keep", "4")
		runs = append(runs, vmRun{"python3 with AVX-512", ck, nil, func(t *testing.T, out string, code int) {
			if code != 1 || !strings.Contains(out, "SIGILL") || !strings.Contains(out, "AVX-512") {
				t.Errorf("exit %d, want a divergence (exit 1) at a SIGILL that names AVX-512:\n%s", code, out)
			}
		}})
	} else {
		t.Log("this CPU has no AVX-512: the run that replays AVX-512 code on a CPU without it is left out")
	}

	// The initramfs: busybox, tpreplay, the checkpoints, and an init that
	// replays each and powers off.
	files := map[string]string{"/bin/tpreplay": bin}
	// With tprec.gdb=N on the kernel command line, init serves checkpoint
	// N to gdb on the second serial port instead (gdbInVM).
	var init strings.Builder
	init.WriteString(`n=$(/bin/busybox sed -n 's/.*tprec.gdb=\([0-9]*\).*/\1/p' /proc/cmdline)
if [ -n "$n" ]; then
	exec 3<>/dev/ttyS1
	/bin/busybox stty raw -echo <&3
	echo "tprec-vm gdb ready"
	/bin/tpreplay --any-cpu --gdb-stdio /ck/$n.tpc <&3 >&3
	echo "tprec-vm gdb exit $?"
	/bin/busybox poweroff -f
fi
`)
	for i, r := range runs {
		name := fmt.Sprintf("/ck/%d.tpc", i)
		files[name] = r.ck
		fmt.Fprintf(&init, "echo 'tprec-vm run %d'\n/bin/tpreplay --any-cpu %s %s 2>&1\necho \"tprec-vm exit %d $?\"\n", i, strings.Join(r.args, " "), name, i)
	}
	initrd := initramfs(t, busybox, files, init.String())

	// gdb on python3's replay, with libc's symbols (libc6-dbg): a
	// breakpoint, stepping both ways, reverse-continue, the crash and the
	// end of the recording. Served by tpreplay on the other kernel, gdb
	// must print what it prints for tpreplay on this one.
	needTool(t, "gdb")
	gdbScript := `break write
continue
echo @@write\n
bt 2
info registers rip rdi rdx
echo @@stepi\n
stepi
stepi
info registers rip
echo @@rstepi\n
reverse-stepi
reverse-stepi
info registers rip
echo @@rcont\n
reverse-continue
info registers rip
echo @@crash\n
delete
continue
info registers rip
echo @@end\n
continue
`
	host, _ := gdbTarget(t, runs[0].ck)
	hostOut := sections(runGDB(t, py, host, gdbScript))
	for _, k := range []string{"write", "stepi", "rstepi", "rcont", "crash", "end"} {
		if strings.TrimSpace(hostOut[k]) == "" {
			t.Fatalf("gdb on this machine's replay printed nothing for %s: %v", k, hostOut)
		}
	}
	if !strings.Contains(hostOut["write"], "#0  __GI___libc_write") || !strings.Contains(hostOut["crash"], "SIGSEGV") || hostOut["stepi"] == hostOut["rstepi"] {
		t.Fatalf("gdb on this machine's replay: %v", hostOut)
	}

	for _, k := range kernels {
		t.Run(strings.TrimPrefix(filepath.Base(k), "vmlinuz-"), func(t *testing.T) {
			t.Run("gdb", func(t *testing.T) {
				out, console := gdbInVM(t, qemu, k, initrd, 0, py, gdbScript)
				vmOut := sections(out)
				for _, k := range []string{"write", "stepi", "rstepi", "rcont", "crash", "end"} {
					if vmOut[k] != hostOut[k] {
						t.Errorf("%s: gdb printed, on the other kernel:\n%s\nand on this one:\n%s", k, vmOut[k], hostOut[k])
					}
				}
				if !strings.Contains(console, "tprec-vm gdb exit 0") {
					t.Errorf("tpreplay --gdb-stdio did not end with 0 on the other kernel; its console:\n%s", console)
				}
				if t.Failed() {
					t.Logf("gdb:\n%s\nthe VM's console:\n%s", out, console)
				}
			})
			console := bootOnce(t, qemu, k, initrd)
			release := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
			if !strings.Contains(console, "tprec-vm kernel "+release) {
				t.Fatalf("the VM did not run kernel %s; its console:\n%s", release, clip([]byte(console)))
			}
			for i, r := range runs {
				out, code, ok := vmRunOutput(console, i)
				if !ok {
					t.Errorf("%s: no result on the VM's console:\n%s", r.name, clip([]byte(console)))
					continue
				}
				t.Run(r.name, func(t *testing.T) {
					r.check(t, out, code)
					t.Logf("on %s: exit %d\n%s", release, code, out)
				})
			}
		})
	}
}

// initramfs makes an initramfs holding busybox, the files (by their path
// there, from their path here) and an init that mounts /proc, /sys, /dev,
// /tmp and tracefs, prints the kernel's release, runs script (busybox sh)
// and powers off.
func initramfs(t *testing.T, busybox string, files map[string]string, script string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, busybox, filepath.Join(root, "bin/busybox"), 0o755)
	for to, from := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, to)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, from, filepath.Join(root, to), 0o755)
	}
	init := `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t tmpfs tmp /tmp
/bin/busybox mount -t tracefs tracefs /sys/kernel/tracing
/bin/busybox ip link set lo up
echo "tprec-vm kernel $(/bin/busybox uname -r)"
` + script + "/bin/busybox poweroff -f\n"
	if err := os.WriteFile(filepath.Join(root, "init"), []byte(init), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(t.TempDir(), "initrd")
	pack := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet > "+initrd)
	pack.Dir = root
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, out)
	}
	return initrd
}

// otherKernelScript reads a file, hashes it and sleeps, in a loop.
const otherKernelScript = `
import os, time, hashlib
h = {}
i = 0
while True:
    with open('/etc/services', 'rb') as f:
        b = f.read()
    h[i % 500] = hashlib.md5(b + str(i).encode()).hexdigest()
    os.write(1, b'')
    i += 1
    time.sleep(0.001)
`

// vmTools is what a test that boots a VM needs: root, qemu, cpio (to make
// the initramfs) and a static busybox (the VM's init and shell).
func vmTools(t *testing.T) (qemu, busybox string) {
	t.Helper()
	requireRoot(t)
	qemu = needTool(t, "qemu-system-x86_64")
	needTool(t, "cpio")
	return qemu, staticBusybox(t)
}

// hasBPFLoop reports whether a kernel release (uname -r) is 5.17 or later,
// which has the bpf_loop helper tprec's eBPF programs call.
func hasBPFLoop(release string) bool {
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	return major > 5 || major == 5 && minor >= 17
}

// bootOnce boots kernel with initrd under qemu's software CPU and returns
// what the VM printed on its console; extra are more qemu arguments.
func bootOnce(t *testing.T, qemu, kernel, initrd string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, append(append(qemuArgs(kernel, initrd, ""), "-serial", "stdio"), extra...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the VM did not power off within 10 minutes; its console:\n%s", clip(out))
	}
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, clip(out))
	}
	return strings.ReplaceAll(string(out), "\r\n", "\n")
}

// gdbInVM boots kernel with initrd and tprec.gdb=n, and runs gdb on prog
// with script against the tpreplay the VM serves on its second serial port.
// gdb talks to it through a relay that starts once the VM is ready: bytes
// sent to a serial port before the guest opened it are lost, and gdb would
// then wait out its timeout before sending them again. It returns what gdb
// printed and the VM's console.
func gdbInVM(t *testing.T, qemu, kernel, initrd string, n int, prog, script string) (string, string) {
	t.Helper()
	serial, err := net.Listen("tcp", "127.0.0.1:0") // qemu's second serial port connects here
	if err != nil {
		t.Fatal(err)
	}
	defer serial.Close()
	front, err := net.Listen("tcp", "127.0.0.1:0") // gdb connects here
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	consoleFile := filepath.Join(t.TempDir(), "console")
	console := func() string {
		b, _ := os.ReadFile(consoleFile)
		return strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, append(qemuArgs(kernel, initrd, fmt.Sprintf("tprec.gdb=%d", n)),
		"-serial", "file:"+consoleFile, "-serial", "tcp:"+serial.Addr().String())...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	guest, err := serial.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	for deadline := time.Now().Add(5 * time.Minute); !strings.Contains(console(), "tprec-vm gdb ready"); time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the VM ended (%v) before serving gdb; its console:\n%s", err, console())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the VM was not ready for gdb within 5 minutes; its console:\n%s", console())
		}
	}
	go func() {
		c, err := front.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		go io.Copy(guest, c)
		io.Copy(c, guest)
	}()
	out := runGDB(t, prog, front.Addr().String(), script)
	select {
	case <-done:
		done <- nil
	case <-time.After(2 * time.Minute):
		t.Errorf("the VM did not power off within 2 minutes of gdb's end")
	}
	return out, console()
}

// qemuArgs boots kernel with initrd on qemu's software CPU (the KVM of a
// VM may not boot a stock kernel), with extra on the kernel command line
// and no device but the serial ports the caller adds.
func qemuArgs(kernel, initrd, extra string) []string {
	return []string{"-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "1024",
		"-kernel", kernel, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet " + extra,
		"-nographic", "-no-reboot", "-display", "none", "-monitor", "none", "-nodefaults"}
}

var vmExitRe = regexp.MustCompile(`tprec-vm exit (\d+) (\d+)`)

// vmRunOutput cuts run i's output and exit code out of the VM's console.
func vmRunOutput(console string, i int) (string, int, bool) {
	start := strings.Index(console, fmt.Sprintf("tprec-vm run %d\n", i))
	if start < 0 {
		return "", 0, false
	}
	rest := console[start:]
	for _, m := range vmExitRe.FindAllStringSubmatchIndex(rest, -1) {
		if rest[m[2]:m[3]] == fmt.Sprint(i) {
			var code int
			fmt.Sscan(rest[m[4]:m[5]], &code)
			return rest[:m[0]], code, true
		}
	}
	return "", 0, false
}

// otherKernels lists the kernels scripts/fetch-kernels.sh fetched (in
// $TPREC_KERNELS, by default /var/cache/tprec/kernels).
func otherKernels(t *testing.T) []string {
	t.Helper()
	dir := os.Getenv("TPREC_KERNELS")
	if dir == "" {
		dir = "/var/cache/tprec/kernels"
	}
	ks, _ := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	if len(ks) >= 2 {
		return ks
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%d kernels in %s, want 2: .ci/run fetches them with scripts/fetch-kernels.sh", len(ks), dir)
	}
	t.Skipf("%d kernels in %s (run: bash scripts/fetch-kernels.sh %s)", len(ks), dir, dir)
	return nil
}

// staticBusybox is a busybox that needs no library (Debian's busybox-static).
func staticBusybox(t *testing.T) string {
	t.Helper()
	p := needTool(t, "busybox")
	f, err := elf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is linked dynamically: .ci/run installs busybox-static", p)
			}
			t.Skipf("%s is linked dynamically (install busybox-static)", p)
		}
	}
	return p
}

// staticTool builds tprec, tpreplay or tpinspect without cgo: a binary
// that runs on a machine with no library at all.
func staticTool(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "../../tools/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build a static %s: %v\n%s", name, err, b)
	}
	return out
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

// hasCPUFlag reports whether this machine's CPU has flag (/proc/cpuinfo).
func hasCPUFlag(t *testing.T, flag string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "flags" {
			return slices.Contains(strings.Fields(v), flag)
		}
	}
	return false
}

// tprec on the kernels production machines run: Debian 12's 6.1 and Debian
// 11's 5.10, booted under qemu as in TestReplayOnOtherKernels, with a
// static tprec and Debian programs with their loader and libraries in the
// initramfs: gzip compressing, python3 reading the clock in a loop (its
// clock reads go through tprec's stubs in the vDSO, which differs from
// kernel to kernel), and redis-server's five threads under redis-benchmark
// (the default backend only). On 6.1 the eBPF backend loads and records (its
// programs once asked more of the verifier than 6.1's gives); on 5.10,
// which lacks bpf_loop, the default backend says so in one line and
// records with ptrace. Each program, attached and crashed from outside,
// leaves a checkpoint whose whole window the trial replay verified, and
// which replays to the crash there. So does a recording with --backend
// ptrace.
func TestRecordOnOtherKernels(t *testing.T) {
	qemu, busybox := vmTools(t)
	kernels := otherKernels(t)
	files := recordingFiles(t)
	for _, name := range []string{"gzip", "redis-server", "redis-benchmark", "redis-cli"} {
		p := needTool(t, name)
		files["/usr/bin/"+name] = p
		for _, lib := range sharedLibs(t, p) {
			files[lib] = lib
		}
	}
	script := vmRecordFn + `/bin/busybox head -c 30000000 /dev/urandom > /tmp/big
for b in auto ptrace; do
	record "gzip $b" --backend $b -- /bin/busybox sh -c 'exec /usr/bin/gzip -c /tmp/big > /dev/null'
	record "python3 $b" --backend $b -- ` + vmPythonLoop + `
done
record "python3 lazy" -- ` + vmPythonLazy + `
# redis-server's five threads under redis-benchmark's ten clients, once
# it answers; the shell becomes the server.
record "redis auto" -- /bin/busybox sh -c '
	(until /usr/bin/redis-cli -p 6400 ping > /dev/null 2>&1; do /bin/busybox sleep 0.2; done
	exec /usr/bin/redis-benchmark -p 6400 -n 100000000 -c 10 -r 100000 -t set,get -q > /dev/null 2>&1) &
	exec /usr/bin/redis-server --port 6400 --save "" --appendonly no --dir /tmp > /dev/null'
# tprec killed four times while it records, each time once it said it
# records and then 0.1-1.9 s later: python3, reading the clock and taking a
# timer's SIGALRM every millisecond, runs on, its clock reads work (the
# guardian puts the vDSO back), and no process of tprec's is left. On 5.10
# tprec records with ptrace: a kill at a clock read's stop let the kernel
# deliver SIGALRM in the vDSO stub, and the guardian used to restore the
# vDSO under the handler (python3 died of SIGSEGV in one CI run).
echo "tprec-vm killed"
timer=0.001
/usr/bin/python3 -S -c 'import time, os, signal, sys
signal.signal(signal.SIGALRM, lambda s, f: None)
signal.setitimer(signal.ITIMER_REAL, float(sys.argv[1]), float(sys.argv[1]))
n = 0
while True:
    t = time.time(); os.getppid(); n += 1
    if n % 20000 == 0:
        print(n, t, flush=True)' $timer > /tmp/ticks &
p=$!
/bin/busybox sleep 0.5
for i in 1 2 3 4; do
	/bin/tprec --pid $p --output /tmp > /tmp/tprec-$i.log 2>&1 &
	r=$!
	until /bin/busybox grep -q "recording process" /tmp/tprec-$i.log 2> /dev/null || ! kill -0 $r 2> /dev/null; do /bin/busybox sleep 0.1; done
	/bin/busybox sleep 0.$((RANDOM % 10 + 1))
	/bin/busybox sleep 0.$((RANDOM % 10))
	kill -KILL $r
	/bin/busybox sleep 2
	/bin/busybox cat /tmp/tprec-$i.log
	echo "tprec-vm kill $i: tprec processes left: $(/bin/busybox ps -o comm | /bin/busybox grep -c tprec)"
	kill -0 $p || { wait $p; echo "tprec-vm python3 ended: status $?"; break; }
done
a=$(/bin/busybox wc -l < /tmp/ticks)
/bin/busybox sleep 2
b=$(/bin/busybox wc -l < /tmp/ticks)
kill -0 $p && echo "tprec-vm python3 alive, $a lines then $b"
kill -KILL $p
echo "tprec-vm killed end"
# python3's checkpoints go out on the second serial port, for a replay on
# the machine that runs the test (the tty's close waits until it is sent).
/bin/busybox stty -F /dev/ttyS1 raw -echo
/bin/busybox tar -cf /dev/ttyS1 /tmp/out-python3-auto /tmp/out-python3-ptrace /tmp/out-python3-lazy
`
	initrd := initramfs(t, busybox, files, script)
	for _, k := range kernels {
		release := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
		t.Run(release, func(t *testing.T) {
			exported := filepath.Join(t.TempDir(), "exported.tar")
			console := bootOnce(t, qemu, k, initrd, "-serial", "file:"+exported)
			if !strings.Contains(console, "tprec-vm kernel "+release) {
				t.Fatalf("the VM did not run kernel %s; its console:\n%s", release, clip([]byte(console)))
			}
			// What the other kernel recorded replays here too. qemu's
			// software CPU has extensions this machine may lack (an Intel
			// host has no sse4a, which qemu's "max" model claims): the
			// replay takes --any-cpu, and must still verify.
			for _, ck := range untar(t, exported, ".tpc") {
				if strings.Contains(filepath.Base(ck), "python3-lazy") {
					replayLazy(t, release, ck)
					continue
				}
				t.Logf("recorded on %s, replayed here: %s", release, strings.TrimSpace(replay(t, ck, "--any-cpu")))
			}
			hasLoop := hasBPFLoop(release)
			killed := console[strings.Index(console, "tprec-vm killed\n")+1:]
			var before, after int
			if _, err := fmt.Sscanf(killed[strings.Index(killed, "tprec-vm python3 alive")+1:], "prec-vm python3 alive, %d lines then %d", &before, &after); err != nil ||
				strings.Count(killed, ": tprec processes left: 0\n") != 4 || after <= before ||
				strings.Count(killed, "tprec guardian: tprec ended without detaching from process") != 4 ||
				strings.Count(killed, "recording process") != 4 {
				t.Errorf("tprec killed on %s, four times while it recorded: want python3 running on (its lines growing), the guardian's word each time, and no process of tprec's left:\n%s", release, killed)
			}
			t.Logf("tprec killed on %s four times: python3 printed %d lines, then %d 2 s later", release, before, after)
			for _, prog := range []string{"gzip", "python3", "redis"} {
				for _, b := range []string{"auto", "ptrace"} {
					if prog == "redis" && b == "ptrace" {
						continue // recorded with the default backend only
					}
					out, tprecExit, replayExit, ok := vmRecorded(console, prog+" "+b)
					if !ok {
						t.Errorf("%s --backend %s: no result on the VM's console:\n%s", prog, b, clip([]byte(console)))
						continue
					}
					if tprecExit != 0 || replayExit != 0 || !verifiedRe.MatchString(out) {
						t.Errorf("%s --backend %s: tprec or tpreplay failed:\n%s", prog, b, out)
					}
					if strings.Contains(out, "trial replay") {
						t.Errorf("%s --backend %s: the trial replay did not verify the whole window:\n%s", prog, b, out)
					}
					ebpf := b == "auto" && hasLoop
					want := "ptrace"
					if ebpf {
						want = "ebpf"
					}
					if !regexp.MustCompile(`backend\s+` + want + `\b`).MatchString(out) {
						t.Errorf("%s --backend %s: want a recording by the %s backend:\n%s", prog, b, want, out)
					}
					if ebpf && strings.Contains(out, "eBPF backend unavailable") {
						t.Errorf("the eBPF backend did not load on %s:\n%s", release, out)
					}
					if b == "auto" && !hasLoop && !strings.Contains(out, "lacks the bpf_loop helper the programs use") {
						t.Errorf("on %s, tprec did not say why the eBPF backend is unavailable:\n%s", release, out)
					}
					if prog == "redis" && !regexp.MustCompile(`threads at the dump\s+\d+ redis-server, \d+ `).MatchString(out) {
						t.Errorf("redis-server on %s: want a recording of its several threads:\n%s", release, out)
					}
					if ebpf && prog != "gzip" && !regexp.MustCompile(`[1-9]\d* clock reads recorded in the process without a syscall`).MatchString(out) {
						t.Errorf("%s's clock reads on %s did not go through the clock log:\n%s", prog, release, out)
					}
					t.Logf("%s --backend %s on %s:\n%s", prog, b, release, out)
				}
			}
		})
	}
}

// recordingFiles are the files a VM that records needs besides busybox:
// static tprec, tpreplay and tpinspect, and Debian's python3 with its
// loader, libraries and standard library (what -S still imports).
func recordingFiles(t *testing.T) map[string]string {
	t.Helper()
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"/usr/bin/python3": py}
	for _, name := range []string{"tprec", "tpreplay", "tpinspect"} {
		files["/bin/"+name] = staticTool(t, name)
	}
	for _, lib := range sharedLibs(t, py) {
		files[lib] = lib
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(py))
	filepath.WalkDir(stdlib, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(path, "/test/") && !strings.Contains(path, "__pycache__") {
			files[path] = path
		}
		return nil
	})
	return files
}

// vmRecordFn defines, for a VM's init, record NAME TPREC-FLAGS... -- CMD...:
// it starts CMD, attaches tprec with the flags after half a second, crashes
// CMD with SIGSEGV 3 s later, and prints tprec's exit, the checkpoint's
// backend and tpreplay's result between markers vmRecorded finds.
const vmRecordFn = `record() {
	name=$1
	shift
	flags=
	while [ "$1" != -- ]; do flags="$flags $1"; shift; done
	shift
	echo "tprec-vm record $name"
	out=/tmp/out-$(echo "$name" | /bin/busybox tr ' ' -)
	/bin/busybox mkdir $out
	"$@" &
	p=$!
	/bin/busybox sleep 0.5
	/bin/tprec $flags --pid $p --output $out 2>&1 &
	r=$!
	/bin/busybox sleep 3
	kill -SEGV $p
	wait $r
	echo "tprec-vm tprec $name exit $?"
	if [ -n "$(/bin/busybox ls $out)" ]; then
		/bin/tpinspect $out/*.tpc | /bin/busybox grep -E "backend|threads at the dump"
		/bin/tpreplay --any-cpu $out/*.tpc 2>&1
		echo "tprec-vm tpreplay $name exit $?"
	else
		echo "tprec-vm tpreplay $name exit none"
	fi
}
`

// vmPythonLoop is python3 reading the clock in a loop, for vmRecordFn. Its
// functions are bound at its start (LD_BIND_NOW): its checkpoints replay on
// this machine too, whose CPU may have more extended state than qemu's
// (AVX-512), and ld.so's lazy binding saves that state with xsave into a
// stack area sized for the recording CPU (README, "Which kernels").
const vmPythonLoop = `/bin/busybox env LD_BIND_NOW=1 /usr/bin/python3 -S -c 'import time, os
while True:
    time.time(); time.monotonic(); os.getppid()'`

// vmPythonLazy is vmPythonLoop with its functions bound on their first
// call: on a machine whose CPU has more extended state than the recording
// one, its replay may diverge, and must then say why (replayLazy).
const vmPythonLazy = `/usr/bin/python3 -S -c 'import time, os
while True:
    time.time(); time.monotonic(); os.getppid()'`

// replayLazy replays here vmPythonLazy's checkpoint from a VM: it verifies,
// or its divergence names the extended state this CPU saves and the
// recording CPU did not (the loader's xsave area on the stack, sized for
// that CPU), with what to do about it.
func replayLazy(t *testing.T, release, ck string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(tools(t), "tpreplay"), "--any-cpu", ck).CombinedOutput()
	switch {
	case err == nil && verifiedRe.Match(out):
		t.Logf("recorded on %s with lazy binding, replayed here: %s", release, bytes.TrimSpace(out))
	case err != nil && bytes.Contains(out, []byte("state, which the recording CPU did not")) && bytes.Contains(out, []byte("LD_BIND_NOW=1")):
		t.Logf("recorded on %s with lazy binding, replayed here: diverged, and says why (this CPU's XSAVE mask %#x):\n%s", release, proc.LocalXSaveMask(), clip(out))
	default:
		t.Errorf("recorded on %s with lazy binding, replayed here (this CPU's XSAVE mask %#x): want verified, or a divergence that names the extended state this CPU has more of: %v\n%s", release, proc.LocalXSaveMask(), err, clip(out))
	}
}

var vmRecordedRe = regexp.MustCompile(`tprec-vm tpreplay (.*) exit (\d+|none)\n`)

// vmRecorded cuts what vmRecordFn printed for run name out of a VM's
// console: the output, tprec's exit code and tpreplay's (-1 when there was
// no checkpoint to replay).
func vmRecorded(console, name string) (out string, tprecExit, replayExit int, ok bool) {
	start := strings.Index(console, "tprec-vm record "+name+"\n")
	if start < 0 {
		return "", 0, 0, false
	}
	rest := console[start:]
	for _, m := range vmRecordedRe.FindAllStringSubmatchIndex(rest, -1) {
		if rest[m[2]:m[3]] != name {
			continue
		}
		out = rest[:m[0]]
		replayExit = -1
		fmt.Sscan(rest[m[4]:m[5]], &replayExit)
		tm := regexp.MustCompile(`tprec-vm tprec ` + regexp.QuoteMeta(name) + ` exit (\d+)`).FindStringSubmatch(out)
		if tm == nil {
			return out, 0, 0, false
		}
		fmt.Sscan(tm[1], &tprecExit)
		return out, tprecExit, replayExit, true
	}
	return "", 0, 0, false
}

// untar unpacks the files named *suffix of the tar archive at path into
// a new directory, and returns their paths: at least two, or the test fails.
func untar(t *testing.T, path, suffix string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	var out []string
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v (after %d files)", path, err, len(out))
		}
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(h.Name, suffix) {
			continue
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, h.Name, err)
		}
		p := filepath.Join(dir, fmt.Sprintf("%d-%s-%s", len(out), filepath.Base(filepath.Dir(h.Name)), filepath.Base(h.Name)))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if len(out) < 2 {
		t.Fatalf("%s holds %d files named *%s, want 2", path, len(out), suffix)
	}
	return out
}

// sharedLibs lists the loader and libraries the dynamically linked program
// prog loads (ldd), by the paths it loads them from.
func sharedLibs(t *testing.T, prog string) []string {
	t.Helper()
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", prog, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the loader
		}
	}
	if len(libs) < 2 {
		t.Fatalf("ldd %s: %q names no loader and library", prog, out)
	}
	return libs
}

// A kernel's lockdown and Yama's ptrace_scope, which hardened machines set,
// on Debian 12's 6.1 under qemu (raised one after the other in one boot:
// neither can be lowered again): python3, recorded with the default
// backend and crashed from outside, replays to the crash under lockdown
// "integrity" (what Secure Boot sets) on the eBPF backend; under
// "confidentiality", which refuses the eBPF programs' memory reads, tprec
// says so in one line and records with ptrace; at ptrace_scope 2 root
// still records; at 3, under which no process may trace another, tprec
// says exactly that and records nothing, and python3 runs on until the
// crash that ends it.
func TestRecordUnderLockdownAndYama(t *testing.T) {
	qemu, busybox := vmTools(t)
	var kernel string
	for _, k := range otherKernels(t) {
		if hasBPFLoop(strings.TrimPrefix(filepath.Base(k), "vmlinuz-")) {
			kernel = k
		}
	}
	if kernel == "" {
		t.Fatal("no kernel of 5.17 or later among the other kernels (scripts/fetch-kernels.sh fetches Debian 12's)")
	}
	script := vmRecordFn + `/bin/busybox mount -t securityfs securityfs /sys/kernel/security
L=/sys/kernel/security/lockdown
Y=/proc/sys/kernel/yama/ptrace_scope
echo "tprec-vm lockdown $(cat $L) ptrace_scope $(cat $Y)"
record none -- ` + vmPythonLoop + `
echo integrity > $L
record integrity -- ` + vmPythonLoop + `
echo confidentiality > $L
record confidentiality -- ` + vmPythonLoop + `
echo 2 > $Y
record yama2 -- ` + vmPythonLoop + `
echo 3 > $Y
record yama3 -- ` + vmPythonLoop + `
echo "tprec-vm lockdown $(cat $L) ptrace_scope $(cat $Y)"
`
	initrd := initramfs(t, busybox, recordingFiles(t), script)
	console := bootOnce(t, qemu, kernel, initrd)
	if !strings.Contains(console, "tprec-vm lockdown none integrity [confidentiality] ptrace_scope 3") {
		t.Fatalf("the VM did not end locked down for confidentiality at ptrace_scope 3; its console:\n%s", clip([]byte(console)))
	}
	for _, c := range []struct {
		name, backend, said string
	}{
		{"none", "ebpf", ""},
		{"integrity", "ebpf", ""},
		{"confidentiality", "ptrace", "the kernel is locked down for confidentiality (/sys/kernel/security/lockdown), which refuses the programs' memory reads"},
		{"yama2", "ptrace", ""},
	} {
		out, tprecExit, replayExit, ok := vmRecorded(console, c.name)
		switch {
		case !ok:
			t.Errorf("%s: no result on the VM's console:\n%s", c.name, clip([]byte(console)))
		case tprecExit != 0 || replayExit != 0 || !verifiedRe.MatchString(out) || strings.Contains(out, "trial replay"):
			t.Errorf("%s: tprec exit %d, tpreplay exit %d, want both 0, the trial and the replay verified:\n%s", c.name, tprecExit, replayExit, out)
		case !regexp.MustCompile(`backend\s+` + c.backend + `\b`).MatchString(out):
			t.Errorf("%s: want a recording by the %s backend:\n%s", c.name, c.backend, out)
		case c.said != "" && !strings.Contains(out, c.said):
			t.Errorf("%s: tprec did not say %q:\n%s", c.name, c.said, out)
		case c.backend == "ebpf" && strings.Contains(out, "eBPF backend unavailable"):
			t.Errorf("%s: the eBPF backend did not load:\n%s", c.name, out)
		}
		t.Logf("%s:\n%s", c.name, out)
	}
	out, tprecExit, replayExit, ok := vmRecorded(console, "yama3")
	if !ok || tprecExit != 1 || replayExit != -1 ||
		!strings.Contains(out, "kernel.yama.ptrace_scope is 3, under which the kernel lets no process trace another, root included") {
		t.Errorf("ptrace_scope 3: want tprec to exit 1 saying why, and no checkpoint:\n%s", out)
	}
	t.Logf("yama3:\n%s", out)
}
