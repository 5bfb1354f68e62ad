// Command tpreplay re-executes the recorded window of a tprec checkpoint and
// verifies that it reaches the recorded end state.
//
//	tpreplay [--from K] [--output-dir DIR] [-v] [--time] FILE
//	tpreplay --gdb ADDR [--from K] [--gdb-log FILE] FILE   (serve GDB on ADDR, ":2345" = 127.0.0.1:2345)
//	tpreplay --gdb-stdio [--from K] FILE                   (serve GDB on stdin/stdout)
//
// Exit status: 0 verified, 1 the replay diverged (the report says where), 2 the
// checkpoint cannot be replayed here (damaged file, another architecture, a
// missing CPU feature, something replay does not support yet).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/proc"
	"github.com/tprec/tprec/replayer"

	"github.com/urfave/cli/v2"
)

func main() {
	// TPREPLAY_CPUPROFILE=file writes a Go CPU profile of the replay (for
	// the figures in BENCHMARKS.md).
	if path := os.Getenv("TPREPLAY_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			code := run(os.Args, os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without the process exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	code := 0
	app := &cli.App{
		Name:      "tpreplay",
		Usage:     "replay the last moments of a recorded process and verify its end state",
		ArgsUsage: "FILE",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "from", Value: -1, Usage: "interval index to start at (default: the oldest replayable one); when the checkpoint does not store that start, the nearest earlier one it stores"},
			&cli.IntFlag{Name: "until", Usage: "stop where interval `K` began and verify the state recorded there, instead of running to the end"},
			&cli.StringFlag{Name: "output-dir", Usage: "write what the program wrote to its descriptors to `DIR`/fd-N.out"},
			&cli.StringFlag{Name: "schedule", Usage: "run several threads' code between their calls `eager` (as soon as a call returns) or `late` (just before the next call), instead of the order the checkpoint says verified"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log every replayed syscall, and the timing line"},
			&cli.BoolFlag{Name: "time", Usage: "print how long loading and replaying took, against the recorded time (stderr)"},
			&cli.StringFlag{Name: "gdb", Usage: "serve the replay to GDB on `ADDR` (\":2345\" listens on 127.0.0.1:2345)"},
			&cli.BoolFlag{Name: "gdb-stdio", Usage: "serve the replay to GDB on stdin/stdout (target remote | tpreplay --gdb-stdio FILE)"},
			&cli.StringFlag{Name: "gdb-log", Usage: "log the GDB protocol traffic to `FILE`"},
			&cli.BoolFlag{Name: "any-cpu", Usage: "replay even on a CPU that lacks instruction-set extensions the recording CPU had (an instruction it lacks then ends the replay as a divergence)"},
		},
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("expected one checkpoint file, got %d arguments", c.NArg())
			}
			sched, err := scheduleFlag(c)
			if err != nil {
				return err
			}
			if err := proc.QuietStops(); err != nil {
				return err
			}
			if c.String("gdb") != "" || c.Bool("gdb-stdio") {
				return serveGDB(c, sched, stdout, stderr)
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := replay(ctx, c.Args().First(), replayer.Options{
				From:      c.Int("from"),
				Until:     c.Int("until"),
				OutputDir: c.String("output-dir"),
				Verbose:   c.Bool("verbose"),
				Log:       stderr,
				Schedule:  sched,
				AnyCPU:    c.Bool("any-cpu"),
			}, c.Bool("time") || c.Bool("verbose"), stderr)
			var d *replayer.Divergence
			switch {
			case errors.As(err, &d):
				fmt.Fprint(stdout, d.Report())
				code = 1
				return nil
			case err != nil:
				return err
			}
			fmt.Fprintln(stdout, res.Summary())
			return nil
		},
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintf(stderr, "tpreplay: %v\n", err)
		return 2
	}
	return code
}

// replay opens the checkpoint at path and replays it. With timing, it prints
// one line to w: the time to open and check the file (every CRC, the model
// decoded), the time replayer.Run took (rebuilding the process and
// re-executing the window), and the recorded wall time of the replayed part
// (from the start interval to the dump) for comparison.
func replay(ctx context.Context, path string, opts replayer.Options, timing bool, w io.Writer) (*replayer.Result, error) {
	t0 := time.Now()
	f, err := format.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	load := time.Since(t0)
	if opts.AnyCPU {
		cpuWarning(w, f.Checkpoint)
	}
	res, err := replayer.Run(ctx, f.Checkpoint, f, opts)
	if err == nil && opts.From >= 0 && res.From != opts.From {
		fromNote(w, opts.From, res.From)
	}
	if err == nil && res.XTests > 0 {
		fmt.Fprintf(w, "tpreplay: this CPU has no TSX: %d xtest instructions of the recorded code ran as cmp eax, eax (not in a transaction, as when recorded)\n", res.XTests)
	}
	if timing && err == nil {
		c := f.Checkpoint
		var recorded time.Duration
		for _, iv := range c.Intervals {
			if iv.Index == res.From && !c.Header.DumpTime.IsZero() {
				recorded = c.Header.DumpTime.Sub(iv.Start)
			}
		}
		ratio := "?"
		if recorded > 0 {
			ratio = fmt.Sprintf("%.2fx", res.Duration.Seconds()/recorded.Seconds())
		}
		inProcess := ""
		if res.InProcess > 0 {
			inProcess = fmt.Sprintf(", %d of them completed by the replayed process itself", res.InProcess)
		}
		endSearch := ""
		if res.EndPasses > 0 {
			endSearch = fmt.Sprintf("; the end found at pass %d over its rip, compared in the process", res.EndPasses)
		}
		fmt.Fprintf(w, "tpreplay: timing: load %v, replay %v (ready to run after %v: plan and rebuild; then re-execution of %d syscalls from interval %d%s%s), recorded %v (%s)\n",
			load.Round(time.Microsecond), res.Duration.Round(time.Microsecond), res.Ready.Round(time.Microsecond), res.Syscalls, res.From, inProcess, endSearch, recorded.Round(time.Millisecond), ratio)
	}
	return res, err
}

// fromNote says that the replay asked to start at interval asked began at
// interval from, whose start the checkpoint stores, and ran through asked.
func fromNote(w io.Writer, asked, from int) {
	fmt.Fprintf(w, "tpreplay: the checkpoint does not store the start of interval %d; replayed from interval %d, the nearest earlier one it stores, through it\n", asked, from)
}

// scheduleFlag is the schedule --schedule names, nil when it is not given.
func scheduleFlag(c *cli.Context) (*format.Schedule, error) {
	if c.String("schedule") == "" {
		return nil, nil
	}
	s, err := format.ParseSchedule(c.String("schedule"))
	return &s, err
}

// cpuWarning says, under --any-cpu, which instruction-set extensions of the
// recording CPU this one lacks.
func cpuWarning(w io.Writer, c *format.Checkpoint) {
	var e *replayer.CPUError
	if err := replayer.CheckCPU(c.Header.CPUFlags); errors.As(err, &e) {
		fmt.Fprintf(w, "tpreplay: this CPU lacks %s, which the recording CPU had: replaying anyway (--any-cpu); an instruction it lacks ends the replay as a divergence\n", strings.Join(e.Missing, ", "))
	}
}
