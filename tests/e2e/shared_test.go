package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A program counting in MAP_SHARED memory (an anonymous page and a file
// page) replays from the content those pages had at the window start, which
// a fork's copy-on-write does not keep: without the copies tprec takes at
// each boundary, the replay starts from their final content and makes
// different calls.
func TestSharedMemoryWindow(t *testing.T) {
	requireRoot(t)
	prog := cc(t, "testdata/sharedcount.c", t.TempDir())
	forBackends(t, func(t *testing.T, backend string) {
		target, _, done := startTarget(t, prog, "30")
		ck := crashThread(t, target, done, target.Process.Pid, 2*time.Second, "--backend", backend)
		replay(t, ck)
	})
}

// nginx as Debian ships it, one worker under HTTP load (keep-alive and new
// connections, files found and not found), its worker crashed: the worker
// counts its connections in memory it shares with the master
// (ngx_connection_counter) and writes that number into its error log, so the
// replay needs that page's content at the window start.
func TestNginxWorker(t *testing.T) {
	requireRoot(t)
	worker, base := startNginx(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			// Client 0 opens a connection per request.
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: c == 0}, Timeout: 5 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := []string{"/", "/big.txt", "/missing" + strconv.Itoa(i%7)}[i%3]
				if r, err := cl.Get(base + path); err == nil {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
		}(c)
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	dirOut := t.TempDir()
	rec := startTprec(t, "--pid", strconv.Itoa(worker), "--output", dirOut)
	rec.waitRecording(t)
	time.Sleep(2 * time.Second)
	ck := crashNginxWorker(t, worker, rec, dirOut)
	t.Logf("tprec:\n%s", rec.stderr)
	log := rec.stderr.String()
	if !strings.Contains(log, "killed by SIGSEGV") || strings.Contains(log, "trial replay failed") {
		t.Errorf("want the worker's crash checkpointed after a successful trial replay:\n%s", log)
	}
	if ivs := intervalsIn(t, ck); len(ivs) < 4 {
		t.Errorf("%d intervals, want the whole window", len(ivs))
	}
	replay(t, ck)
}

// crashNginxWorker sends SIGSEGV to the nginx worker rec records (nginx's
// child, not the test's), waits for it to die, and returns the one
// checkpoint tprec wrote into dir.
func crashNginxWorker(t *testing.T, worker int, rec *recording, dir string) string {
	t.Helper()
	if err := unix.Tgkill(worker, worker, unix.SIGSEGV); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); unix.Kill(worker, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not die; tprec:\n%s", rec.stderr)
		}
	}
	return oneCheckpoint(t, rec, dir, 60*time.Second)
}

// startNginx starts Debian's nginx with one worker serving a directory of
// two files on a free loopback port, waits until it answers, and returns
// the worker's pid and the server's base URL.
func startNginx(t *testing.T) (int, string) {
	t.Helper()
	nginx := needTool(t, "nginx")
	dir := t.TempDir()
	// The worker runs as www-data: it must reach the document root.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	html := filepath.Join(dir, "html")
	os.Mkdir(html, 0o755)
	os.WriteFile(filepath.Join(html, "index.html"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(html, "big.txt"), []byte(strings.Repeat("0123456789abcdef\n", 2000)), 0o644)
	port := freePort(t)
	conf := filepath.Join(dir, "nginx.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`daemon off;
master_process on;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server { listen 127.0.0.1:%[2]d; root %[3]s; }
}
`, dir, port, html)), 0o644)
	master, _, exited := startTarget(t, nginx, "-p", dir, "-c", conf)
	t.Cleanup(func() {
		// SIGTERM, so that the master takes the worker it started after the
		// crash down with it.
		master.Process.Signal(unix.SIGTERM)
		select {
		case err := <-exited:
			exited <- err
		case <-time.After(10 * time.Second):
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if r, err := http.Get(base + "/"); err == nil {
			r.Body.Close()
			break
		}
		if i == 100 {
			t.Fatal("nginx did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	workers := childrenOf(master.Process.Pid)
	if len(workers) != 1 {
		t.Fatalf("nginx workers: %v, want one", workers)
	}
	return workers[0], base
}

// freePort returns a loopback TCP port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sharedAnonScript maps shared anonymous memory (python3's mmap.mmap(-1,
// n), whose default is MAP_SHARED, as multiprocessing's shared values are)
// in the middle of its run, uses it, and crashes right after, in the same
// interval.
const sharedAnonScript = `import ctypes, mmap, time, zlib
acc = 0
end = time.time() + 1.2
while time.time() < end:
    acc = zlib.crc32(b"some work" * 50, acc)
m = mmap.mmap(-1, 4 * 4096)
for i in range(4):
    m[i * 4096:i * 4096 + 8] = acc.to_bytes(8, "little")
print(sum(m[0:8]), flush=True)
ctypes.string_at(0)
`

// A MAP_SHARED|MAP_ANONYMOUS mapping made in the window has no start
// content to miss: it began as zeros. Such a page present at the end and
// absent from the interval's start copy made the interval not replayable
// ("its content at the start is unknown"), so a crash soon after python3
// mapped one had no replayable interval. Only a page of a mapping that
// existed at the start (another process may have written it) is unknown.
func TestSharedAnonymousMappedInWindow(t *testing.T) {
	requireRoot(t)
	forBackends(t, func(t *testing.T, backend string) {
		script := pythonScript(t, "sharedanon.py", sharedAnonScript)
		ck, log := recordMinimized(t, backend, "/usr/bin/python3", "-S", script)
		replayableToCrash(t, ck, log, "content at the start is unknown")
	})
}
