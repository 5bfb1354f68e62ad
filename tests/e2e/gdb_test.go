package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"golang.org/x/sys/unix"
)

// needTool returns the path of a program the test drives; a missing one fails
// under CI (.ci/run installs it) and skips elsewhere.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed: .ci/run installs it", name)
	}
	t.Skipf("%s is not installed", name)
	return ""
}

// runGDB runs gdb in batch mode on prog with the commands of script (one per
// line). target, when set, is the `target remote` argument.
func runGDB(t *testing.T, prog, target, script string) string {
	t.Helper()
	gdb := needTool(t, "gdb")
	sf := filepath.Join(t.TempDir(), "script.gdb")
	if err := os.WriteFile(sf, []byte("set pagination off\nset confirm off\nset width 0\n"+script), 0o600); err != nil {
		t.Fatal(err)
	}
	// A loaded machine can take longer than gdb's default 2 s to answer the
	// first packets while tpreplay rebuilds the process.
	args := []string{"-batch", "-nx", "-ex", "set remotetimeout 30"}
	if target != "" {
		args = append(args, "-ex", "target remote "+target)
	}
	args = append(args, "-x", sf, prog)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gdb, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("gdb timed out:\n%s", out)
	}
	if err != nil {
		t.Logf("gdb: %v", err)
	}
	return string(out)
}

// sections splits gdb output at lines "@@name" (printed by `echo @@name\n`).
func sections(out string) map[string]string {
	m := map[string]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "@@") {
			cur = strings.TrimSpace(line[2:])
			continue
		}
		m[cur] += line + "\n"
	}
	return m
}

var frameAddr = regexp.MustCompile(`^#(\d+)\s+(0x[0-9a-f]+ in )?`)

// frames returns the backtrace lines without their addresses: what must be
// the same natively and in the replay (function, arguments, file:line).
func frames(bt string) []string {
	var out []string
	for _, l := range strings.Split(bt, "\n") {
		if m := frameAddr.FindStringSubmatch(l); m != nil {
			out = append(out, "#"+m[1]+" "+strings.TrimSpace(l[len(m[0]):]))
		}
	}
	return out
}

var histNum = regexp.MustCompile(`(?m)^\$\d+ = `)

// noHist drops gdb's value history numbers ($1 = ...).
func noHist(s string) string { return histNum.ReplaceAllString(s, "= ") }

// lineOf returns the 1-based line of the first line of file holding s.
func lineOf(t *testing.T, file, s string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in %s", s, file)
	return 0
}

// gdbTarget is the `target remote` argument that runs tpreplay on stdio.
func gdbTarget(t *testing.T, ckpt string) (string, string) {
	log := filepath.Join(t.TempDir(), "wire.log")
	return fmt.Sprintf("| %s --gdb-stdio --gdb-log %s %s", filepath.Join(tools(t), "tpreplay"), log, ckpt), log
}

// A C program built with -g, launched under tprec, crashes by itself. GDB on
// the replay: a breakpoint in the recorded window, backtrace, registers,
// locals and heap values, next/step, reverse-step, reverse-continue back to
// the breakpoint with the same registers, and on to the recorded SIGSEGV. The
// crash then looks the same as in a native run of the program under gdb.
func TestGDBOnCrashReplay(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	dir := t.TempDir()
	src := "testdata/gdbcrash.c"
	prog := cc(t, src, dir)
	ck := recordOne(t, dir, "--output", dir, "--", prog, "1500")
	target, wire := gdbTarget(t, ck)
	crashLine := lineOf(t, src, "r->next is NULL")
	script := `break step_once
continue
echo @@bt1\n
bt
echo @@regs1\n
info registers
echo @@vals1\n
print r->rounds
print *r
print table[3]
info registers fs_base orig_rax
info registers xmm0 mxcsr
echo @@next\n
next
next
info line *$pc
print h
echo @@step\n
step
info line *$pc
echo @@rstep\n
reverse-step
info line *$pc
echo @@rcont\n
reverse-continue
echo @@regs2\n
info registers
echo @@vals2\n
print r->rounds
print *r
print table[3]
info registers fs_base orig_rax
info registers xmm0 mxcsr
echo @@cont\n
delete
continue
echo @@crash\n
bt
print *r
print r->next
print table[3]
info registers rip
echo @@end\n
continue
monitor stats
`
	start := time.Now()
	out := runGDB(t, prog, target, script)
	t.Logf("gdb on the replay (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	s := sections(out)
	if !strings.Contains(s["bt1"], "step_once (") || !strings.Contains(s["bt1"], "main (") || !strings.Contains(s["bt1"], "gdbcrash.c:") {
		t.Errorf("backtrace at the breakpoint:\n%s", s["bt1"])
	}
	if !strings.Contains(s["regs1"], "rip ") || !strings.Contains(s["regs1"], "eflags") {
		t.Errorf("info registers:\n%s", s["regs1"])
	}
	if !regexp.MustCompile(`fs_base\s+0x[1-9a-f]`).MatchString(s["vals1"]) || !strings.Contains(s["vals1"], "xmm0") {
		t.Errorf("fs_base and SSE registers:\n%s", s["vals1"])
	}
	if s["regs1"] != s["regs2"] || noHist(s["vals1"]) != noHist(s["vals2"]) {
		t.Errorf("reverse-continue did not come back to the same state:\nbefore:\n%s%s\nafter:\n%s%s", s["regs1"], s["vals1"], s["regs2"], s["vals2"])
	}
	if !strings.Contains(s["rcont"], "Breakpoint 1, step_once") {
		t.Errorf("reverse-continue did not stop at the breakpoint:\n%s", s["rcont"])
	}
	if !strings.Contains(s["vals1"], "rounds = ") || strings.Contains(s["vals1"], "Cannot access") {
		t.Errorf("values:\n%s", s["vals1"])
	}
	for _, k := range []string{"next", "step", "rstep"} {
		if !strings.Contains(s[k], "gdbcrash.c") && !strings.Contains(s[k], "Line ") {
			t.Errorf("%s:\n%s", k, s[k])
		}
	}
	if s["next"] == s["rstep"] {
		t.Errorf("reverse-step did not move:\n%s", s["rstep"])
	}
	if !strings.Contains(s["cont"], "SIGSEGV") || !strings.Contains(s["cont"], fmt.Sprintf("gdbcrash.c:%d", crashLine)) {
		t.Errorf("continue did not reach the recorded SIGSEGV at line %d:\n%s", crashLine, s["cont"])
	}
	if !strings.Contains(s["end"], "recording ends here") && !strings.Contains(s["end"], "No more reverse-execution history") {
		t.Errorf("continuing past the end:\n%s", s["end"])
	}
	if b, err := os.ReadFile(wire); err != nil || !strings.Contains(string(b), "qSupported") {
		t.Errorf("wire log: %v", err)
	}

	// The same program natively under gdb.
	native := runGDB(t, prog, "", "run 1500\necho @@crash\\n\nbt\nprint *r\nprint r->next\nprint table[3]\ninfo registers rip\n")
	n := sections(native)
	if !strings.Contains(native, "SIGSEGV") {
		t.Fatalf("native run did not crash:\n%s", native)
	}
	// Heap and stack addresses differ between the runs (gdb disables
	// address randomization, the recorded run had it): compare the rest.
	hexNum := regexp.MustCompile(`0x[0-9a-f]+`)
	mask := func(l []string) string { return hexNum.ReplaceAllString(strings.Join(l, "\n"), "0x?") }
	rf, nf := frames(s["crash"]), frames(n["crash"])
	if len(rf) == 0 || mask(rf) != mask(nf) {
		t.Errorf("backtrace at the crash differs:\nreplay:\n%s\nnative:\n%s", strings.Join(rf, "\n"), strings.Join(nf, "\n"))
	}
	values := func(sec string) string {
		var v []string
		for _, l := range strings.Split(sec, "\n") {
			if strings.HasPrefix(l, "$") {
				v = append(v, l[strings.Index(l, "="):])
			}
		}
		return strings.Join(v, "\n")
	}
	if rv, nv := values(s["crash"]), values(n["crash"]); rv == "" || hexNum.ReplaceAllString(rv, "0x?") != hexNum.ReplaceAllString(nv, "0x?") {
		t.Errorf("values at the crash differ:\nreplay:\n%s\nnative:\n%s", rv, nv)
	}
}

// GDB's remote protocol over TCP: tpreplay prints the command line to use,
// and serves on the loopback address.
func TestGDBListens(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	dir := t.TempDir()
	prog := cc(t, "testdata/gdbcrash.c", dir)
	rec := startTprec(t, "--output", dir, "--", prog, "1200")
	if err := rec.wait(t, 90*time.Second); err != nil {
		t.Fatalf("tprec: %v\n%s", err, rec.stderr)
	}
	cks := checkpoints(t, dir)
	cmd := exec.Command(filepath.Join(tools(t), "tpreplay"), "--gdb", ":0", cks[0])
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	buf := make([]byte, 4096)
	var got string
	re := regexp.MustCompile(`gdb (\S+) -ex 'target remote (127\.0\.0\.1:\d+)'`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !re.MatchString(got) {
		n, err := stderr.Read(buf)
		got += string(buf[:n])
		if err != nil {
			break
		}
	}
	m := re.FindStringSubmatch(got)
	if m == nil || m[1] != prog {
		t.Fatalf("tpreplay did not print the gdb command line with %s:\n%s", prog, got)
	}
	out := runGDB(t, prog, m[2], "break crash_here\ncontinue\nbt\nset var r->rounds = 1\ndetach\n")
	if !strings.Contains(out, "crash_here (") || !strings.Contains(out, "main (") {
		t.Errorf("gdb over TCP:\n%s", out)
	}
	if !strings.Contains(out, "Cannot access memory") && !strings.Contains(out, "read-only") {
		t.Errorf("writing memory was not refused:\n%s", out)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Errorf("tpreplay did not end after gdb detached")
	}
}

// srcCache is where .ci/run puts Debian source packages (apt-get source
// --download-only), so that tests build real programs with debug information
// without network access.
func srcCache() string {
	if d := os.Getenv("TPREC_SRC_CACHE"); d != "" {
		return d
	}
	return "/var/cache/tprec/src"
}

// buildLua builds the Lua 5.4 interpreter of Debian's lua5.4 source package
// with -g -O0: a real interpreter, debugged at the level of its C sources.
func buildLua(t *testing.T) string {
	t.Helper()
	needTool(t, "make")
	tarballs, _ := filepath.Glob(filepath.Join(srcCache(), "lua5.4_*.orig.tar.gz"))
	if len(tarballs) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no lua5.4 source package in %s: .ci/run downloads it", srcCache())
		}
		t.Skipf("no lua5.4 source package in %s (run: apt-get source --download-only lua5.4 there)", srcCache())
	}
	dir := t.TempDir()
	if out, err := exec.Command("tar", "xzf", tarballs[0], "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("unpack %s: %v\n%s", tarballs[0], err, out)
	}
	srcs, _ := filepath.Glob(filepath.Join(dir, "lua-5.4*", "src"))
	if len(srcs) != 1 {
		t.Fatalf("unexpected layout of %s", tarballs[0])
	}
	if out, err := exec.Command("make", "-j2", "-C", srcs[0], "linux", "MYCFLAGS=-g -O0").CombinedOutput(); err != nil {
		t.Fatalf("build lua: %v\n%s", err, out)
	}
	return filepath.Join(srcs[0], "lua")
}

// Lua 5.4, built from Debian's source package, attached while it runs a
// script and killed with SIGSEGV from outside. GDB on the replay: a
// breakpoint in the interpreter's C code that runs in the window, a deep
// backtrace with functions and source lines, locals and heap values,
// next/step, reverse-step, reverse-continue to the same registers, and on to
// the recorded signal at the recorded instruction.
func TestGDBOnLuaReplay(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	lua := buildLua(t)
	script, err := filepath.Abs("testdata/work.lua")
	if err != nil {
		t.Fatal(err)
	}
	target, _, done := startTarget(t, lua, script)
	time.Sleep(300 * time.Millisecond)
	ckpt := attachAndCrash(t, target, done, 2*time.Second)
	tgt, _ := gdbTarget(t, ckpt)
	out := runGDB(t, lua, tgt, `break os_clock
continue
echo @@bt1\n
bt
echo @@regs1\n
info registers
echo @@vals1\n
print L
print L->nci
print *L->ci
echo @@walk\n
next
step
reverse-step
reverse-continue
echo @@regs2\n
info registers
echo @@vals2\n
print L
print L->nci
print *L->ci
echo @@cont\n
delete
continue
echo @@crash\n
p/x $pc
bt 2
monitor stats
`)
	t.Logf("gdb on the lua replay:\n%s", out)
	s := sections(out)
	for _, want := range []string{"os_clock (L=", "loslib.c:", "luaV_execute (", "lvm.c:", "main (", "lua.c:"} {
		if !strings.Contains(s["bt1"], want) {
			t.Errorf("backtrace lacks %q:\n%s", want, s["bt1"])
		}
	}
	if !strings.Contains(s["vals1"], "callstatus") || strings.Contains(s["vals1"], "Cannot access") {
		t.Errorf("values:\n%s", s["vals1"])
	}
	if s["regs1"] == "" || s["regs1"] != s["regs2"] || noHist(s["vals1"]) != noHist(s["vals2"]) {
		t.Errorf("reverse-continue did not come back to the same state:\n%s%s\n---\n%s%s", s["regs1"], s["vals1"], s["regs2"], s["vals2"])
	}
	m := regexp.MustCompile(`end: signal 11 at rip (0x[0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("tpreplay did not print the recorded end")
	}
	if !strings.Contains(s["cont"], "SIGSEGV") || !strings.Contains(s["crash"], "= "+m[1]) {
		t.Errorf("continue did not reach the recorded SIGSEGV at %s:\n%s%s", m[1], s["cont"], s["crash"])
	}
}

var watchValues = regexp.MustCompile(`Old value = (\S+)\s+New value = (\S+)`)

// oldNew returns the values of the watchpoint report in a section.
func oldNew(t *testing.T, name, sec string) (string, string) {
	t.Helper()
	m := watchValues.FindStringSubmatch(sec)
	if m == nil {
		t.Errorf("%s: no watchpoint report:\n%s", name, sec)
		return "", ""
	}
	return m[1], m[2]
}

// A watchpoint going backwards stops where gdb's own reverse execution
// (`record full`) stops: at the instruction that made the change, before it
// ran, with the old and new values swapped; a further reverse-continue finds
// the change before, across the syscalls between them, and stepping forward
// from there shows the change again as a forward continue did.
func TestGDBReverseWatch(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	dir := t.TempDir()
	src := "testdata/gdbcrash.c"
	prog := cc(t, src, dir)
	ck := recordOne(t, dir, "--output", dir, "--", prog, "1200")
	target, _ := gdbTarget(t, ck)
	const walk = `delete
watch table[3]
echo @@fwd1\n
continue
info symbol $pc
echo @@fwd2\n
continue
info symbol $pc
echo @@rc1\n
reverse-continue
info symbol $pc
echo @@rc2\n
reverse-continue
info symbol $pc
echo @@stepi\n
stepi
info symbol $pc
echo @@end\n
`
	out := runGDB(t, prog, target, "break step_once\ncontinue\n"+walk+"monitor stats\n")
	t.Logf("gdb on the replay:\n%s", out)
	s := sections(out)
	o1, n1 := oldNew(t, "forward 1", s["fwd1"])
	o2, n2 := oldNew(t, "forward 2", s["fwd2"])
	if n1 != o2 {
		t.Errorf("forward changes do not follow each other: %s->%s then %s->%s", o1, n1, o2, n2)
	}
	if o, n := oldNew(t, "reverse 1", s["rc1"]); o != n2 || n != o2 {
		t.Errorf("reverse-continue from the second change shows %s->%s, want %s->%s:\n%s", o, n, n2, o2, s["rc1"])
	}
	if o, n := oldNew(t, "reverse 2", s["rc2"]); o != n1 || n != o1 {
		t.Errorf("the second reverse-continue shows %s->%s, want %s->%s:\n%s", o, n, n1, o1, s["rc2"])
	}
	if o, n := oldNew(t, "stepi", s["stepi"]); o != o1 || n != n1 {
		t.Errorf("stepi over the change shows %s->%s, want %s->%s:\n%s", o, n, o1, n1, s["stepi"])
	}
	storeLine := fmt.Sprintf("gdbcrash.c:%d", lineOf(t, src, "table[i] += h >> 7"))
	for _, k := range []string{"rc1", "rc2"} {
		if !strings.Contains(s[k], storeLine) {
			t.Errorf("%s: not at the store, %s:\n%s", k, storeLine, s[k])
		}
	}
	sym := func(sec string) string {
		m := regexp.MustCompile(`(?m)^step_once \+ \d+ in section`).FindString(sec)
		return m
	}
	if sym(s["fwd1"]) == "" || sym(s["fwd1"]) != sym(s["stepi"]) || sym(s["rc1"]) != sym(s["rc2"]) || sym(s["rc1"]) == sym(s["fwd1"]) {
		t.Errorf("stop addresses: forward %q %q, reverse %q %q, stepi %q", sym(s["fwd1"]), sym(s["fwd2"]), sym(s["rc1"]), sym(s["rc2"]), sym(s["stepi"]))
	}

	// gdb's own reverse execution of the same code is the reference.
	native := runGDB(t, prog, "", "set can-use-hw-watchpoints 0\nbreak step_once if round == 5\nrun 10\nrecord full\n"+walk)
	ns := sections(native)
	for _, k := range []string{"fwd1", "rc1", "rc2", "stepi"} {
		if sym(ns[k]) == "" || sym(ns[k]) != sym(s[k]) {
			t.Errorf("%s: the replay stops at %q, gdb's record full at %q:\n%s", k, sym(s[k]), sym(ns[k]), native)
		}
	}
}

// A program linked with -z now resolves its library calls at start, so a
// minimized checkpoint of a later window lacks the dynamic loader's library
// list (r_debug, link_map): tpreplay gives gdb the list made from the
// recorded memory map, and gdb finds libc's functions (Debian's libc6 has
// symbols for them) at a breakpoint and in the backtrace.
func TestGDBLibrariesOfMinimizedCheckpoint(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	dir := t.TempDir()
	prog := filepath.Join(dir, "gdbnow")
	if b, err := exec.Command("gcc", "-g", "-O1", "-Wl,-z,now", "-o", prog, "testdata/gdbcrash.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	ck := recordOne(t, dir, "--output", dir, "--", prog, "1500")
	target, _ := gdbTarget(t, ck)
	out := runGDB(t, prog, target, `break clock_nanosleep
echo @@stop\n
continue
echo @@bt\n
bt
echo @@libs\n
info sharedlibrary
echo @@rdebug\n
x/gx &_r_debug
`)
	t.Logf("gdb on the replay:\n%s", out)
	s := sections(out)
	if !strings.Contains(s["stop"], "clock_nanosleep (") {
		t.Errorf("no stop at the breakpoint in libc:\n%s", s["stop"])
	}
	bt := frames(s["bt"])
	if len(bt) < 2 || !strings.Contains(bt[0], "clock_nanosleep") || !strings.Contains(s["bt"], "usleep") ||
		!strings.Contains(bt[len(bt)-1], "main (") || strings.Contains(s["bt"], "??") {
		t.Errorf("backtrace in libc:\n%s", s["bt"])
	}
	if !strings.Contains(s["libs"], "libc.so.6") {
		t.Errorf("libc not among the libraries:\n%s", s["libs"])
	}
	if !strings.Contains(s["rdebug"], "Cannot access memory") {
		t.Logf("the checkpoint holds r_debug: gdb could have read the library list itself")
	}
}

// lldb speaks the same remote protocol: `gdb-remote` to tpreplay's server, a
// breakpoint in libc, the backtrace with libc's and the program's functions.
// .ci/run installs lldb.
func TestLLDBOnReplay(t *testing.T) {
	requireRoot(t)
	lldb := needTool(t, "lldb")
	dir := t.TempDir()
	prog := filepath.Join(dir, "gdbnow")
	if b, err := exec.Command("gcc", "-g", "-O1", "-Wl,-z,now", "-o", prog, "testdata/gdbcrash.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	rec := startTprec(t, "--output", dir, "--", prog, "1200")
	if err := rec.wait(t, 90*time.Second); err != nil {
		t.Fatalf("tprec: %v\n%s", err, rec.stderr)
	}
	cks := checkpoints(t, dir)
	cmd := exec.Command(filepath.Join(tools(t), "tpreplay"), "--gdb", ":0", cks[0])
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	re := regexp.MustCompile(`target remote (127\.0\.0\.1:\d+)`)
	var got string
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !re.MatchString(got); {
		n, err := stderr.Read(buf)
		got += string(buf[:n])
		if err != nil {
			break
		}
	}
	m := re.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("tpreplay did not print its address:\n%s", got)
	}
	// The rest of tpreplay's stderr, for a failure: a CI run once saw lldb
	// lose the connection at its first packet.
	rest := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(stderr)
		rest <- got + string(b)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, lldb, "-b", "-x",
		"-o", "gdb-remote "+m[1], "-o", "b clock_nanosleep", "-o", "c", "-o", "bt", "-o", "detach", prog).CombinedOutput()
	t.Logf("lldb (%v):\n%s", err, out)
	bt := string(out)
	if i := strings.LastIndex(bt, "(lldb) bt"); i >= 0 {
		bt = bt[i:]
	}
	for _, want := range []string{"stop reason = breakpoint", "libc.so.6`", "clock_nanosleep", "usleep", "gdbnow`main"} {
		if !strings.Contains(bt, want) {
			t.Errorf("lldb's backtrace lacks %q", want)
		}
	}
	if t.Failed() {
		cmd.Process.Kill()
		select {
		case s := <-rest:
			t.Logf("tpreplay's stderr:\n%s", s)
		case <-time.After(5 * time.Second):
		}
	}
}

// gdb on a replay whose window delivers signals (testdata/sigtimer.c): a
// breakpoint at a handler's first instruction stops at each delivery,
// forward and backward; the backtrace goes through the signal frame into
// the call the signal interrupted; the handler's count moves one by one.
func TestGDBOnSignalDeliveries(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	dir := t.TempDir()
	prog := cc(t, "testdata/sigtimer.c", dir)
	target, _, done := startTarget(t, prog, "30")
	ck := crashThread(t, target, done, target.Process.Pid, 1500*time.Millisecond)
	gt, _ := gdbTarget(t, ck)
	out := runGDB(t, prog, gt, `break on_alarm
continue
echo @@a1\n
print alarms
continue
echo @@a2\n
print alarms
bt
reverse-continue
echo @@a3\n
print alarms
delete
continue
`)
	t.Logf("gdb on the replay:\n%s", out)
	s := sections(out)
	val := func(sec string) int {
		m := regexp.MustCompile(`(?m)^\$\d+ = (\d+)`).FindStringSubmatch(s[sec])
		if m == nil {
			t.Fatalf("%s: no value printed:\n%s", sec, s[sec])
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	a1, a2, a3 := val("a1"), val("a2"), val("a3")
	if a2 != a1+1 || a3 != a1 {
		t.Errorf("alarms at the stops: %d, %d, then back %d; want n, n+1, n", a1, a2, a3)
	}
	// A section holds what follows its marker: the stop of the next
	// command.
	for _, k := range []string{"a1", "a2"} {
		if !strings.Contains(s[k], "Breakpoint 1, on_alarm") {
			t.Errorf("after %s: not stopped in on_alarm:\n%s", k, s[k])
		}
	}
	if !strings.Contains(s["a2"], "<signal handler called>") {
		t.Errorf("the backtrace does not go through the signal frame:\n%s", s["a2"])
	}
	if !strings.Contains(s["a3"], "SIGSEGV") {
		t.Errorf("continue did not end at the recorded crash:\n%s", s["a3"])
	}
}

// gdb reads errno, a thread-local variable of the C library, in a replay of
// Debian's python3: a loop stats a file that does not exist. gdb stops
// where the call returns ENOENT, finishes the C library's wrapper, which
// sets errno, and prints it: 2, found through qGetTLSAddr at libc's static
// offset below the thread pointer. It needs libc's symbol table (Debian's
// libc6-dbg, which .ci/run installs): errno is not among libc's dynamic
// symbols.
func TestGDBErrno(t *testing.T) {
	requireRoot(t)
	id := proc.FileBuildID("/lib/x86_64-linux-gnu/libc.so.6")
	if len(id) < 3 {
		t.Fatalf("libc has no build-id")
	}
	if _, err := os.Stat("/usr/lib/debug/.build-id/" + id[:2] + "/" + id[2:] + ".debug"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libc6-dbg is not installed: .ci/run installs it")
		}
		t.Skip("libc6-dbg is not installed: gdb cannot name errno")
	}
	py := "/usr/bin/python3"
	src := "import os, time\n" +
		"while True:\n" +
		"    try:\n" +
		"        os.stat('/nonexistent/tprec-errno')\n" +
		"    except FileNotFoundError:\n" +
		"        pass\n" +
		"    time.sleep(0.002)\n"
	target, _, done := startTarget(t, py, "-c", src)
	ck, _ := crashWith(t, target, done, time.Second, func(pid int) error { return unix.Kill(pid, unix.SIGSEGV) })
	// At the end of the recording a continue stops again at once: $n
	// bounds the loop when no call failed.
	script := "catch syscall newfstatat\nset $n = 0\ncontinue\n" +
		"while $rax != -2 && $n < 200\nset $n = $n + 1\ncontinue\nend\n" +
		"echo @@enoent\\n\np $rax\nfinish\n" +
		"echo @@errno\\n\np (int)errno\n"
	out := runGDB(t, py, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, script)
	sec := sections(out)
	if !strings.Contains(sec["enoent"], "= -2") || !strings.Contains(sec[""], "returned from syscall newfstatat") {
		t.Fatalf("gdb found no newfstatat that returned ENOENT:\n%s", out)
	}
	t.Logf("gdb:\n%s%s", sec["enoent"], sec["errno"])
	if !regexp.MustCompile(`\$\d+ = 2\n`).MatchString(sec["errno"]) {
		t.Errorf("errno after the failed stat is not ENOENT (2):\n%s", out)
	}
}

// gdb reads a thread-local variable of a shared object loaded with dlopen
// (testdata/dyntls.c loads testdata/dyntlslib.c), whose block glibc
// allocated on first use: not in the static area, so qGetTLSAddr follows
// the thread's DTV, which the window touched (every access goes through
// __tls_get_addr). The count before and after one more call differs by one.
func TestGDBDynamicTLS(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	lib := filepath.Join(dir, "libdyntls.so")
	prog := filepath.Join(dir, "dyntls")
	for _, args := range [][]string{
		{"-g", "-O1", "-shared", "-fPIC", "-o", lib, "testdata/dyntlslib.c"},
		{"-g", "-O1", "-o", prog, "testdata/dyntls.c"},
	} {
		if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, b)
		}
	}
	target, _, done := startTarget(t, prog, lib)
	ck, _ := crashWith(t, target, done, time.Second, func(pid int) error { return unix.Kill(pid, unix.SIGSEGV) })
	f, err := format.Open(ck)
	if err != nil {
		t.Fatal(err)
	}
	var mod *format.Module
	for i, m := range f.Checkpoint.Header.Modules {
		if m.Name == lib {
			mod = &f.Checkpoint.Header.Modules[i]
		}
	}
	f.Close()
	if mod == nil || mod.TLSModID == 0 || mod.StaticTLS() {
		t.Fatalf("the checkpoint does not list %s with a dynamic thread-local block: %+v", lib, mod)
	}
	script := "break count\ncontinue\n" +
		"echo @@before\\n\np counted\nfinish\n" +
		"echo @@after\\n\np counted\n"
	out := runGDB(t, prog, "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio "+ck, script)
	sec := sections(out)
	v := regexp.MustCompile(`\$\d+ = (\d+)\n`)
	b, a := v.FindStringSubmatch(sec["before"]), v.FindStringSubmatch(sec["after"])
	if b == nil || a == nil {
		t.Fatalf("gdb did not print the thread-local count before and after a call:\n%s", out)
	}
	before, _ := strconv.Atoi(b[1])
	after, _ := strconv.Atoi(a[1])
	if before < 1 || after != before+1 {
		t.Errorf("thread-local count %d, then %d after one more call; want one more:\n%s", before, after, out)
	}
	t.Logf("dynamic thread-local count %d -> %d (module id %d)", before, after, mod.TLSModID)
}

// A memcached checkpoint whose end (SIGSEGV to the main thread, at the exit
// of its epoll_wait) comes after other threads' calls: the workers' calls
// that the dump's hold interrupted follow the main thread's last one in the
// log, and the last worker to run was held where the recording ended with
// it running (replayer/testdata/memcached-end-after-exit.txt). gdb's
// reverse-continue from the end used to fail ("name the current position:
// ... not counted") and reverse-stepi too; both must work, and a forward
// continue must reach the crash again. Addresses are the checkpoint's own,
// so the test needs neither memcached nor the libraries it was recorded
// with, nor the recording CPU (--any-cpu).
func TestGDBEndAfterOtherThreadsCalls(t *testing.T) {
	requireRoot(t)
	ck, err := filepath.Abs("../../replayer/testdata/memcached-end-after-exit.tpc")
	if err != nil {
		t.Fatal(err)
	}
	const (
		readEntry = "0x7fbcd75162a0" // libc's read, where gdb's `break read` goes
		heldAt    = "0x7fbcd74ab2dd" // where worker 26665 stood when the recording ended
	)
	script := "continue\n" +
		"echo @@back\\n\nbreak *" + readEntry + "\nreverse-continue\np $_thread\np/x $pc\n" +
		"echo @@end\\n\ndelete\ncontinue\n" +
		"echo @@stepi\\n\nreverse-stepi\np $_thread\np/x $pc\n" +
		"echo @@again\\n\ncontinue\n"
	// The file was recorded on an Intel CPU with extensions (AVX512-FP16,
	// MOVDIRI...) that a CI machine may lack (an AMD EPYC): what this test
	// is about does not depend on them.
	out := runGDB(t, "", "| "+filepath.Join(tools(t), "tpreplay")+" --gdb-stdio --any-cpu "+ck, script)
	sec := sections(out)
	if strings.Contains(out, "not counted") {
		t.Errorf("tpreplay could not name a position:\n%s", out)
	}
	// Thread 2 is worker 26665, the one that served the last requests.
	if b := noHist(sec["back"]); !strings.Contains(b, "hit Breakpoint 1,") || !strings.Contains(b, "= 2\n") || !strings.Contains(b, "= "+readEntry+"\n") {
		t.Errorf("reverse-continue from the end did not stop at the last read, in worker 26665:\n%s", out)
	}
	if e := sec["end"]; !strings.Contains(e, "received signal SIGSEGV") || !strings.Contains(e, "Thread 26663") {
		t.Errorf("continue did not reach the crash in the main thread again:\n%s", out)
	}
	if s := noHist(sec["stepi"]); !strings.Contains(s, "= 2\n") || !strings.Contains(s, "= "+heldAt+"\n") {
		t.Errorf("reverse-stepi from the end did not go to worker 26665 where it was held:\n%s", out)
	}
	if a := sec["again"]; !strings.Contains(a, "received signal SIGSEGV") {
		t.Errorf("continue after reverse-stepi did not reach the crash:\n%s", out)
	}
}

// longLoopLua loops without a call after one write: crashed from outside,
// its end is found at the millionth pass or so over the end's address since
// the last syscall.
const longLoopLua = `io.write("start\n"); io.flush()
local t = {}
for i = 1, 1e10 do
  t[i % 1000 + 1] = (t[i % 1000 + 1] or 0) + i
end
`

// Going back from the end of such a window counted every pass over the
// end's address again, a stop each, twice: reverse-stepi did not answer
// for minutes (found by a sweep: gdb gave up after 60 to 400 s). The end
// search's code in the process now counts those passes and stops at the
// one asked for, so going back from the end, and forward again, takes a
// few re-executions, not hundreds of thousands of stops.
func TestGDBReverseFromLongLoopEnd(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	script := filepath.Join(t.TempDir(), "loop.lua")
	if err := os.WriteFile(script, []byte(longLoopLua), 0o644); err != nil {
		t.Fatal(err)
	}
	target, out, done := startTarget(t, "/usr/bin/lua5.4", script)
	for i := 0; i < 200 && !strings.Contains(out.String(), "start"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	ckpt := attachAndCrash(t, target, done, 1500*time.Millisecond)
	tgt, _ := gdbTarget(t, ckpt)
	_, s, end := timedGDB(t, "/usr/bin/lua5.4", tgt, `continue
echo @@back\n
reverse-stepi
p/x $pc
echo @@again\n
reverse-stepi
p/x $pc
echo @@forward\n
stepi
p/x $pc
echo @@end\n
stepi
p/x $pc
set $end = $pc
break *$end
echo @@bp\n
reverse-continue
p/x $pc
`)
	pc := func(name string) string {
		p := regexp.MustCompile(`= (0x[0-9a-f]+)`).FindStringSubmatch(s[name])
		if p == nil {
			t.Fatalf("no $pc after %s:\n%s", name, s[name])
		}
		return p[1]
	}
	back, again, forward := pc("back"), pc("again"), pc("forward")
	if back == end || again == back {
		t.Errorf("reverse-stepi from the end %s went to %s, then %s", end, back, again)
	}
	if forward != back {
		t.Errorf("stepi after two reverse-stepi went to %s, want %s", forward, back)
	}
	if !strings.Contains(s["end"], "= "+end) {
		t.Errorf("two stepi did not come back to the end %s:\n%s", end, s["end"])
	}
	// A breakpoint of the user's at that address counts by int3 again: a
	// reverse-continue to its previous arrival would be 764,244 stops. It
	// is refused with the reason, the session stays at the end, and GDB is
	// told the program stopped, not that it received a SIGTRAP.
	if !strings.Contains(s["bp"], "a stop at each of more than") || !strings.Contains(s["bp"], "Program stopped.") ||
		strings.Contains(s["bp"], "SIGTRAP") || !strings.Contains(s["bp"], "= "+end) {
		t.Errorf("reverse-continue to a breakpoint at the end:\n%s", s["bp"])
	}
}

// python3 crashing in strlen (ctypes.string_at(0)) hundreds of thousands of
// instructions after its last syscall: going back one instruction from the
// crash single-steps from that syscall, 5 to 35 us a step here, and
// reverse-stepi did not answer for minutes (found by a sweep). It now
// stops after MaxReverseStepTime and says what to do instead; the session
// stays at the crash and answers.
func TestGDBReverseStepFarFromLastCall(t *testing.T) {
	requireRoot(t)
	needTool(t, "gdb")
	ck, _ := ctypesCrash(t)
	tgt, _ := gdbTarget(t, ck)
	start := time.Now()
	_, s, end := timedGDB(t, "/usr/bin/python3", tgt, `continue
p/x $pc
echo @@back\n
reverse-stepi
p/x $pc
`)
	took := time.Since(start)
	// Either the instruction before was found in time, or the refusal says
	// why; either way gdb got its answer.
	refused := strings.Contains(s["back"], "each is a single step")
	moved := regexp.MustCompile(`= (0x[0-9a-f]+)`).FindStringSubmatch(s["back"])
	if !refused && (moved == nil || moved[1] == end) {
		t.Errorf("reverse-stepi from the crash neither went back nor said why:\n%s", s["back"])
	}
	if took > 2*time.Minute {
		t.Errorf("the session took %v", took)
	}
}

// timedGDB runs a gdb script on a replay that ends with a SIGSEGV, logs
// its output with the time it took, and returns the output, its sections
// and the end's rip as tpreplay printed it.
func timedGDB(t *testing.T, prog, tgt, script string) (string, map[string]string, string) {
	t.Helper()
	start := time.Now()
	g := runGDB(t, prog, tgt, script)
	t.Logf("gdb (%v):\n%s", time.Since(start), g)
	m := regexp.MustCompile(`end: signal 11 at rip (0x[0-9a-f]+)`).FindStringSubmatch(g)
	if m == nil {
		t.Fatalf("tpreplay did not print the recorded end")
	}
	return g, sections(g), m[1]
}
