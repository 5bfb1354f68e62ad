// Command tprec records a running process (or one it launches) continuously and
// writes a partial checkpoint when the process crashes, exits or is asked to.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/recorder"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func main() {
	app := &cli.App{
		Name:      "tprec",
		Usage:     "record a process so its last moments can be replayed",
		UsageText: "tprec [options] --pid PID\n   tprec [options] -- COMMAND [ARGS...]\n   tprec dump --pid PID",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Usage: "attach to this running process"},
			&cli.DurationFlag{Name: "interval", Value: 250 * time.Millisecond, Usage: "length of one recording interval"},
			&cli.IntFlag{Name: "keep", Value: 8, Usage: "intervals kept in memory"},
			&cli.StringFlag{Name: "max-memory", Value: "64M", Usage: "memory the interval ring may use (K, M, G suffixes)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: ".", Usage: "directory for checkpoint files"},
			&cli.StringFlag{Name: "backend", Value: "auto", Usage: "recording backend: auto (eBPF if it loads, else ptrace), ebpf or ptrace"},
			&cli.StringFlag{Name: "ringbuf-size", Value: "64M", Usage: "eBPF ring buffer size (K, M, G suffixes; rounded up to a power of two)"},
			&cli.BoolFlag{Name: "on-exit", Usage: "also write a checkpoint when the process exits normally"},
			&cli.BoolFlag{Name: "full-pages", Usage: "keep every present page (large) instead of only the pages the window touches"},
			&cli.BoolFlag{Name: "all-starts", Usage: "store the memory at every interval start, so that tpreplay --from K starts at K itself (larger: a busy server rewrites the same pages every interval)"},
			&cli.BoolFlag{Name: "keep-shadow", Value: true, Usage: "keep an interval's shadow for the next while the pages written since its fork are few and no file was mapped since, copying them in the boundary's stop, so that a program rewriting its working set pays no copy-on-write faults (false: a shadow forked at every boundary)"},
			&cli.BoolFlag{Name: "clock-log", Value: true, Usage: "record the vDSO's clock reads in the process, not as syscalls (eBPF backend; false: each read is a syscall)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print nothing but errors"},
			&cli.DurationFlag{Name: "status", Value: 10 * time.Second, Usage: "print a status line this often (0: never)"},
		},
		Action:       record,
		OnUsageError: usageError,
		Commands: []*cli.Command{{
			Name:         "dump",
			Usage:        "ask the tprec recording PID to write a checkpoint now",
			UsageText:    "tprec dump --pid PID",
			Flags:        []cli.Flag{&cli.IntFlag{Name: "pid", Usage: "the recorded process"}},
			Action:       requestDump,
			OnUsageError: usageError,
		}, {
			// Started by tprec itself next to every recording
			// (recorder.Guard): not for users.
			Name:   "guardian",
			Hidden: true,
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "pid", Required: true},
				&cli.IntFlag{Name: "tprec", Required: true},
			},
			Action: guard,
		}, {
			// Started by tprec when the kernel does not announce
			// FSGSBASE (proc.ProbeRdfsbase): not for users.
			Name:   "rdfsbase-probe",
			Hidden: true,
			Action: func(*cli.Context) error { return proc.CheckRdfsbase() },
		}},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "tprec: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// usageError makes a flag that does not parse, or one tprec does not know,
// exit 2 as every usage error does (the library's own status is 1, the
// status of a recording that failed).
func usageError(c *cli.Context, err error, _ bool) error {
	return cli.Exit(fmt.Sprintf("tprec: %v (tprec --help lists the options)", err), 2)
}

func exitCode(err error) int {
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func record(c *cli.Context) error {
	o := recorder.Options{
		Pid:         c.Int("pid"),
		Cmd:         c.Args().Slice(),
		Interval:    c.Duration("interval"),
		Keep:        c.Int("keep"),
		OutputDir:   c.String("output"),
		Backend:     c.String("backend"),
		OnExit:      c.Bool("on-exit"),
		FullPages:   c.Bool("full-pages"),
		AllStarts:   c.Bool("all-starts"),
		KeepShadow:  c.Bool("keep-shadow"),
		NoClockLog:  !c.Bool("clock-log"),
		StatusEvery: c.Duration("status"),
		Log:         os.Stderr,
	}
	if c.Bool("quiet") {
		o.Log = nil
	}
	// Checked before anything is launched: a command given with a bad
	// value ran on unrecorded while tprec said it could not record it.
	switch o.Backend {
	case "auto", "ebpf", "ptrace":
	default:
		return cli.Exit(fmt.Sprintf("tprec: --backend %q: want auto, ebpf or ptrace", o.Backend), 2)
	}
	if o.Keep < 1 {
		return cli.Exit(fmt.Sprintf("tprec: --keep %d: at least one interval", o.Keep), 2)
	}
	if o.Interval <= 0 {
		return cli.Exit(fmt.Sprintf("tprec: --interval %v: want a positive duration (250ms, 1s)", o.Interval), 2)
	}
	if o.StatusEvery < 0 {
		return cli.Exit(fmt.Sprintf("tprec: --status %v: want 0 (never) or a positive duration", o.StatusEvery), 2)
	}
	var err error
	if o.MaxMemory, err = parseSize(c.String("max-memory")); err != nil {
		return cli.Exit(fmt.Sprintf("tprec: --max-memory: %v", err), 2)
	}
	// The ring holds up to --max-memory; the interval being recorded, the
	// reader's blocks and a dump in progress come on top. Without a limit
	// the Go collector lets the heap grow to twice what is live (a recorder
	// of redis-server: 230 MB of heap for a 64 MiB ring). GOMEMLIMIT, when
	// set, wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2*o.MaxMemory + 32<<20)
	}
	rb, err := parseSize(c.String("ringbuf-size"))
	if err != nil {
		return cli.Exit(fmt.Sprintf("tprec: --ringbuf-size: %v", err), 2)
	}
	o.RingbufSize = int(rb)
	if (o.Pid == 0) == (len(o.Cmd) == 0) {
		return cli.Exit("tprec: give either --pid PID or -- COMMAND [ARGS...]", 2)
	}
	// The first interrupt ends the recording (tprec detaches, or finishes
	// the checkpoints it is writing); a second one stops the trial replay
	// of those checkpoints, which are then written with every page.
	ctx, interrupted := context.WithCancel(context.Background())
	defer interrupted()
	hurry := make(chan struct{})
	o.Hurry = hurry
	intr := make(chan os.Signal, 4)
	// SIGHUP (the terminal or the SSH session tprec ran in went away)
	// ends the recording as an interrupt does: by its default action tprec
	// died on the spot and left the process with its vDSO patch and zombie
	// shadows (found by a sweep). To record past the session, run tprec
	// under nohup, tmux or a service manager.
	signal.Notify(intr, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(intr)
	go func() {
		n := 0
		for range intr {
			switch n++; n {
			case 1:
				interrupted()
			case 2:
				close(hurry)
			}
		}
	}()
	// A launched program is in tprec's process group, and a signal it
	// sends to its group (ruby's Process.kill(:SEGV, 0), perl's
	// kill "SEGV", 0, a shell's kill -SEGV 0) reaches tprec too. tprec
	// died of it with a goroutine dump, killing the program with it
	// (PTRACE_O_EXITKILL) in the middle of its crash handler, and wrote no
	// checkpoint. Sent by kill, these signals are never tprec's own
	// faults, which still end it: it says so once and records on.
	stray := make(chan os.Signal, 8)
	signal.Notify(stray, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL, syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGSYS)
	go func() {
		seen := map[os.Signal]bool{}
		for sig := range stray {
			if !seen[sig] {
				seen[sig] = true
				fmt.Fprintf(os.Stderr, "tprec: ignored the %v sent to tprec (a program that signals its process group signals tprec too); recording goes on\n", unix.SignalName(sig.(syscall.Signal)))
			}
		}
	}()
	// Ctrl-Z on tprec (SIGTSTP): suspended, tprec would leave every
	// thread of the process that stops for it (a boundary, a signal, the
	// eBPF reader falling behind) waiting: a redis-server under load froze
	// within a second (found by a sweep). tprec is not suspended; it says
	// so once. Writing to the terminal from the background goes on too.
	signal.Ignore(syscall.SIGTTIN, syscall.SIGTTOU)
	tstp := make(chan os.Signal, 4)
	signal.Notify(tstp, syscall.SIGTSTP)
	go func() {
		said := false
		for range tstp {
			if !said {
				said = true
				fmt.Fprintln(os.Stderr, "tprec: not suspended (Ctrl-Z): the recorded process would wait for tprec at its next stop; Ctrl-C detaches")
			}
		}
	}()
	usr2 := make(chan os.Signal, 4)
	signal.Notify(usr2, syscall.SIGUSR2)
	requests := make(chan struct{}, 4)
	go func() {
		for range usr2 {
			requests <- struct{}{}
		}
	}()
	// tprec learns of its tracees' stops from wait4; a SIGCHLD for each
	// (two per call under the ptrace backend, one per replayed call in a
	// dump's trial) would only cost time.
	if err := proc.QuietStops(); err != nil {
		return err
	}
	// The guardian is this very binary (/proc/self/exe: still there if the
	// file was replaced or removed since tprec started).
	o.Guardian = []string{"/proc/self/exe", "guardian"}
	o.RdfsbaseProbe = []string{"/proc/self/exe", "rdfsbase-probe"}
	return recorder.Record(ctx, o, requests)
}

// guard runs the guardian of a recording: it outlives tprec only to undo
// what a tprec that did not detach left in the process. It ignores the
// signals that end a session or a terminal's jobs; tprec's "done", or the
// repair, ends it.
func guard(c *cli.Context) error {
	signal.Ignore(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&[]byte("tprec-guardian\x00")[0])), 0, 0, 0)
	return recorder.Guard(c.Int("pid"), c.Int("tprec"), os.Stdin, os.Stderr)
}

// requestDump finds the tprec tracing pid and sends it SIGUSR2.
func requestDump(c *cli.Context) error {
	pid := c.Int("pid")
	if pid <= 0 {
		return cli.Exit("tprec dump: give --pid PID, the recorded process", 2)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return cli.Exit(fmt.Sprintf("tprec: process %d: no such process", pid), 1)
	}
	tracer := 0
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
			tracer, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if tracer == 0 {
		return cli.Exit(fmt.Sprintf("tprec: process %d is not being recorded", pid), 1)
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", tracer))
	if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "tprec" {
		return cli.Exit(fmt.Sprintf("tprec: process %d is traced by %d (%s), not by tprec", pid, tracer, exe), 1)
	}
	if err := syscall.Kill(tracer, syscall.SIGUSR2); err != nil {
		return cli.Exit(fmt.Sprintf("tprec: signal tprec %d: %v", tracer, err), 1)
	}
	fmt.Printf("asked tprec (pid %d) to write a checkpoint of process %d\n", tracer, pid)
	return nil
}

// parseSize parses "64M", "1G", "512K" or a byte count.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	u := strings.ToUpper(strings.TrimSuffix(strings.ToUpper(s), "B"))
	switch {
	case strings.HasSuffix(u, "K"):
		mult, u = 1<<10, strings.TrimSuffix(u, "K")
	case strings.HasSuffix(u, "M"):
		mult, u = 1<<20, strings.TrimSuffix(u, "M")
	case strings.HasSuffix(u, "G"):
		mult, u = 1<<30, strings.TrimSuffix(u, "G")
	}
	n, err := strconv.ParseInt(u, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return n * mult, nil
}
