package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Reverse execution on a server's window goes back from snapshots of the
// replay instead of from the start of the window, and lands exactly where
// going back from the start does. redis-server under load, crashed by DEBUG
// SEGFAULT and recorded with 3 intervals kept: gdb continues through two
// breakpoints to the crash, then goes back by instructions, out of a
// function, and by reverse-continue to earlier breakpoint hits, printing
// where it stands each time. The transcript must be the same with and
// without snapshots, and the snapshot run must have gone back from them.
func TestGDBReverseFromSnapshots(t *testing.T) {
	requireRoot(t)
	cli := needTool(t, "redis-cli")
	needTool(t, "gdb")
	const port = "6443"
	target, done := redisUnderLoad(t, port, "--enable-debug-command", "yes", "--crash-memcheck-enabled", "no")
	ck, _ := crashWith(t, target, done, 1500*time.Millisecond, func(int) error {
		exec.Command(cli, "-p", port, "debug", "segfault").Run()
		return nil
	}, "--backend", "ebpf", "--keep", "3")
	exe, err := filepath.EvalSymlinks(needTool(t, "redis-server"))
	if err != nil {
		t.Fatal(err)
	}
	where := "p $pc\np $rsp\np $rax\n"
	script := "break readQueryFromClient\ncontinue\ncontinue\ndelete\ncontinue\n" + where +
		"echo @@back\\n\n" +
		"reverse-stepi\n" + where + "reverse-stepi\n" + where + "reverse-finish\n" + where +
		"break readQueryFromClient\nreverse-continue\n" + where + "reverse-continue\n" + where +
		"delete\nbreak processCommand\nreverse-continue\n" + where +
		"echo @@stats\\n\nmonitor stats\n"
	run := func(env string) (string, time.Duration) {
		t0 := time.Now()
		out := runGDB(t, exe, fmt.Sprintf("| env %s %s --gdb-stdio %s", env, filepath.Join(tools(t), "tpreplay"), ck), script)
		return out, time.Since(t0)
	}
	with, tWith := run("TPREPLAY_NO_SNAPSHOTS=0")
	without, tWithout := run("TPREPLAY_NO_SNAPSHOTS=1")
	t.Logf("gdb session: %v with snapshots, %v without", tWith.Round(time.Millisecond), tWithout.Round(time.Millisecond))
	a, b := sections(with), sections(without)
	if !strings.Contains(with, "in debugCommand ()") || !strings.Contains(a["back"], "mmap64") || strings.Count(a["back"], "= (void (*)()) 0x") < 6 {
		t.Fatalf("gdb did not go back through the crash as asked:\n%s", with)
	}
	if noHist(a["back"]) != noHist(b["back"]) {
		t.Fatalf("going back from snapshots lands elsewhere than from the start\nwith snapshots:\n%s\nwithout:\n%s", a["back"], b["back"])
	}
	m := regexp.MustCompile(`from a snapshot: (\d+); snapshots kept: (\d+)`).FindStringSubmatch(a["stats"])
	if m == nil || m[1] == "0" || m[2] == "0" {
		t.Fatalf("the session did not go back from snapshots:\n%s", a["stats"])
	}
	if !strings.Contains(b["stats"], "from a snapshot: 0; snapshots kept: 0") {
		t.Fatalf("TPREPLAY_NO_SNAPSHOTS=1 still took snapshots:\n%s", b["stats"])
	}
	t.Logf("with snapshots: %s", strings.TrimSpace(a["stats"]))
	t.Logf("without: %s", strings.TrimSpace(b["stats"]))
}
