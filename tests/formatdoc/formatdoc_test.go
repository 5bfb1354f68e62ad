// Package formatdoc checks FORMAT.md against the files tprec writes: an
// independent reader written from FORMAT.md alone (tpcread.py, Python, no
// code shared with the Go reader) decodes real checkpoints, and its decoding
// is compared field by field with tpinspect's (compare.py); corrupted copies
// must be rejected by it and by tpreplay. check.sh does the work; it can be
// run on its own: `sudo bash tests/formatdoc/check.sh`.
package formatdoc

import (
	"os"
	"os/exec"
	"testing"
)

// unavailable fails the test under CI, which has what it needs, and skips
// it elsewhere, saying why.
func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func TestIndependentReader(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root: tprec attaches to the processes it records")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import zstandard").Run(); err != nil {
		unavailable(t, "Debian's python3 lacks zstandard (apt-get install python3-zstandard): "+err.Error())
	}
	out, err := exec.Command("bash", "check.sh").CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("check.sh: %v", err)
	}
}
