package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLinkMap reads the loader's list of objects of a dynamically linked
// Debian program (sleep) and checks it names the program first, then the C
// library with its thread-local storage placed in the static area.
func TestLinkMap(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	// Read it once sleep sleeps: the loader is done by then (while it
	// loads, libc is in the list before its thread-local storage is placed).
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if f := strings.Fields(string(b)); len(f) > 0 && (f[0] == "230" || f[0] == "35") { // clock_nanosleep, nanosleep
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleep did not reach its sleep: %q", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := LinkMap(pid, maps)
	if err != nil {
		t.Fatal(err)
	}
	libc := -1
	for i, m := range mods {
		if strings.HasPrefix(filepath.Base(m.Name), "libc.so") {
			libc = i
		}
	}
	if libc < 0 {
		t.Fatalf("no libc in the link map of sleep: %+v", mods)
	}
	if mods[0].Name != "" || mods[0].LD == 0 {
		t.Errorf("first object is not the program: %+v", mods[0])
	}
	c := mods[libc]
	if c.LAddr == 0 || c.LD <= c.LAddr || c.LinkMap == 0 {
		t.Errorf("libc entry: %+v", c)
	}
	t.Logf("libc: %+v", c)
	if c.TLSModID == 0 || !c.StaticTLS() {
		t.Errorf("libc has no static thread-local block: %+v", c)
	}
}
