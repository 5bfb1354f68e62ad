package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/replayer"
	"github.com/tprec/tprec/replayer/gdb"

	"github.com/urfave/cli/v2"
)

// gdbAddr makes ":PORT" a loopback address: the replay holds the process's
// memory, so it is not served to the network unless a host is named.
func gdbAddr(a string) string {
	if strings.HasPrefix(a, ":") {
		return "127.0.0.1" + a
	}
	return a
}

// serveGDB replays the checkpoint under a GDB remote-protocol server.
func serveGDB(c *cli.Context, sched *format.Schedule, stdout, stderr io.Writer) error {
	if c.String("gdb") != "" && c.Bool("gdb-stdio") {
		return fmt.Errorf("--gdb and --gdb-stdio exclude each other")
	}
	path := c.Args().First()
	f, err := format.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ck := f.Checkpoint
	cfg := gdb.Config{Notice: stderr}
	if p := c.String("gdb-log"); p != "" {
		lf, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("open gdb log: %w", err)
		}
		defer lf.Close()
		cfg.WireLog = lf
	}
	anyCPU := c.Bool("any-cpu")
	if anyCPU {
		cpuWarning(stderr, ck)
	}
	s, err := replayer.NewSession(ck, f, replayer.Options{From: c.Int("from"), Log: stderr, Verbose: c.Bool("verbose"), Schedule: sched, AnyCPU: anyCPU})
	if err != nil {
		return err
	}
	defer s.Close()
	if from := c.Int("from"); from >= 0 && s.From() != from {
		fromNote(stderr, from, s.From())
	}
	// Ctrl-C belongs to GDB (it sends an interrupt packet); SIGTERM ends us.
	signal.Ignore(os.Interrupt)
	exe := ck.Header.ExePath
	if exe == "" {
		exe = "PROGRAM"
	}
	abs, _ := filepath.Abs(path)
	if c.Bool("gdb-stdio") {
		fmt.Fprintf(stderr, "tpreplay: serving %s to gdb on stdin/stdout (thread %d, end: %s)\n", filepath.Base(path), s.Tid(), endText(ck))
		return gdb.Serve(stdio{}, s, cfg)
	}
	ln, err := net.Listen("tcp", gdbAddr(c.String("gdb")))
	if err != nil {
		return fmt.Errorf("listen for gdb: %w", err)
	}
	defer ln.Close()
	var serving atomic.Bool
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		ln.Close()
		if serving.Load() {
			// The session may be in a long re-execution that reads no
			// packet: end now. The replayed processes die with us
			// (PTRACE_O_EXITKILL).
			fmt.Fprintln(stderr, "tpreplay: terminated")
			os.Exit(143)
		}
	}()
	fmt.Fprintf(stderr, "tpreplay: replay of %s ready (thread %d, end: %s)\n", filepath.Base(path), s.Tid(), endText(ck))
	fmt.Fprintf(stderr, "tpreplay: connect with:\n  gdb %s -ex 'target remote %s'\n", shellQuote(exe), ln.Addr())
	fmt.Fprintf(stderr, "tpreplay: or without a server:\n  gdb %s -ex 'target remote | tpreplay --gdb-stdio %s'\n", shellQuote(exe), shellQuote(abs))
	conn, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept gdb: %w", err)
	}
	defer conn.Close()
	serving.Store(true)
	fmt.Fprintf(stderr, "tpreplay: gdb connected from %s\n", conn.RemoteAddr())
	return gdb.Serve(conn, s, cfg)
}

func endText(c *format.Checkpoint) string {
	switch c.End.Kind {
	case format.EndExit:
		return fmt.Sprintf("exit %d", c.End.ExitCode)
	case format.EndSignal:
		return fmt.Sprintf("signal %d at rip %#x", c.End.Signo, c.End.Regs.Rip)
	}
	return c.End.Kind
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '+' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// stdio is stdin and stdout as one connection.
type stdio struct{}

func (stdio) Read(b []byte) (int, error)  { return os.Stdin.Read(b) }
func (stdio) Write(b []byte) (int, error) { return os.Stdout.Write(b) }
