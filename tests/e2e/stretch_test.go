package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// heavyWriterScript rewrites 256 MB over and over for a few seconds (each
// interval of 250 ms writes its 65,536 pages again), then reads a small
// file in a loop: first what a JVM allocating does to its young
// generation, then a quiet server.
const heavyWriterScript = `import sys, time
n = 256 << 20
a = bytearray(n); b = bytearray(b"x" * n)
print("heavy", flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    a[:] = b
del a, b
print("light", flush=True)
while True:
    with open(sys.argv[1]) as f:
        f.read()
    time.sleep(0.001)
`

// A program that writes hundreds of megabytes an interval made boundaries
// that held it for a large part of each interval and left tprec more than
// an interval of saving to do: unrecorded, python3 rewrote 256 MB 234-244
// times in 6 s; recorded, 33-39 times (BENCHMARKS.md, "Programs that
// write hundreds of megabytes an interval"). tprec now stretches the
// intervals to four times what their boundary cost while such writing
// lasts, says so, and comes back to --interval when it stops; the
// checkpoint of the quiet part that follows is as usual.
func TestHeavyWriterStretchesIntervals(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		dir := t.TempDir()
		script := pythonScript(t, "heavy.py", heavyWriterScript)
		input := filepath.Join(dir, "input.txt")
		if err := os.WriteFile(input, []byte(strings.Repeat("a line of input\n", 64)), 0o644); err != nil {
			t.Fatal(err)
		}
		rec := startTprec(t, "--backend", backend, "--status", "1s", "-o", dir, "--", "/usr/bin/python3", "-S", script, input, "4")
		rec.waitRecording(t)
		waitLog := func(what string, d time.Duration) {
			t.Helper()
			for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if strings.Contains(rec.stderr.String(), what) {
					return
				}
			}
			t.Fatalf("tprec did not say %q within %v:\n%s", what, d, rec.quit())
		}
		waitLog("intervals last at least", 20*time.Second)
		waitLog("intervals stretched to", 20*time.Second)
		waitLog("intervals back to 250ms", 60*time.Second)
		// The window is now the quiet part: intervals of 250 ms again.
		time.Sleep(2500 * time.Millisecond)
		ck, log := crashRecorded(t, rec, "", dir)
		t.Logf("tprec:\n%s", log)
		wantMinimized(t, ck, log)
		replay(t, ck)
		ivs := intervalsIn(t, ck)
		if len(ivs) < 4 {
			t.Fatalf("the checkpoint holds %d intervals, want the 8 of the quiet part, or most of them", len(ivs))
		}
		last := ivs[len(ivs)-1].Start.Sub(ivs[len(ivs)-2].Start)
		if last > 400*time.Millisecond {
			t.Errorf("the checkpoint's last whole interval lasted %v, want about 250 ms once the writing stopped", last)
		}
	})
}
