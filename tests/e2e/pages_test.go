package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An interpreter with a 500 MB heap that, in the recorded window, touches a
// little of it and does I/O: the default checkpoint holds only what the
// window touched (a few MB), --full-pages holds the whole heap, and both
// replay to the recorded crash.
const bigHeapScript = `
import os, sys, time
blob = os.urandom(500 << 20)        # 500 MB that no page deduplication can shrink
d = sys.argv[1]
with open(os.path.join(d, "input.txt"), "w") as f:
    f.write("some input line\n" * 1000)
print("ready", flush=True)
i = 0
total = 0
while True:
    with open(os.path.join(d, "input.txt")) as f:
        total += len(f.read())
    total += blob[(i * 7919) % 1000]
    i += 1
    time.time()
`

func TestPython3LargeHeapCheckpointSize(t *testing.T) {
	requireRoot(t)
	sizes := map[string]int64{}
	for _, mode := range []string{"minimized", "full-pages"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "heap.py")
			if err := os.WriteFile(script, []byte(bigHeapScript), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/usr/bin/python3", "-S", script, dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
				}
				done <- cmd.Wait()
			}()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					cmd.Process.Kill()
					<-done
				}
			})
			// Wait until the heap is built.
			deadline := time.Now().Add(60 * time.Second)
			for {
				if rss := residentMB(cmd.Process.Pid); rss > 500 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("python3 did not build its 500 MB heap")
				}
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			var extra []string
			if mode == "full-pages" {
				extra = []string{"--full-pages"}
			}
			ck := attachAndCrash(t, cmd, done, 1500*time.Millisecond, extra...)
			st, err := os.Stat(ck)
			if err != nil {
				t.Fatal(err)
			}
			sizes[mode] = st.Size()
			t.Logf("%s checkpoint: %.1f MB", mode, float64(st.Size())/1e6)
			replay(t, ck)
		})
	}
	if m := sizes["minimized"]; m == 0 || m >= 5e6 {
		t.Errorf("minimized checkpoint is %d bytes, want under 5 MB", m)
	}
	if f := sizes["full-pages"]; f <= 500e6 {
		t.Errorf("--full-pages checkpoint is %d bytes, want over 500 MB", f)
	}
}

// residentMB reads VmRSS of a process in MB.
func residentMB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}
