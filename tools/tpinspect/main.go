// Command tpinspect shows what a tprec checkpoint file holds: the process and
// how it was recorded, the intervals, where the execution ended, the page store
// and the syscall log.
//
//	tpinspect [--json] [--syscalls] FILE
//
// Exit status: 0 when the file was read, 2 when it cannot be used (missing,
// unreadable, truncated, corrupt or not a checkpoint), 1 for a usage error.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/syscalls"
)

// usageError is a mistake on the command line (exit status 1).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		// A bug here must still end in one line, never a trace.
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "tpinspect: internal error: %v\n", r)
			code = 1
		}
	}()
	app := &cli.App{
		Name:      "tpinspect",
		Usage:     "show what a tprec checkpoint file holds",
		ArgsUsage: "FILE",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "syscalls", Usage: "list every recorded syscall, one line each: seq tid name(args) = ret"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of text"},
		},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Action: func(ctx *cli.Context) error {
			if ctx.NArg() != 1 {
				return usageError{"expected one checkpoint FILE (tpinspect [--json] [--syscalls] FILE)"}
			}
			return inspect(ctx.Args().First(), ctx.Bool("syscalls"), ctx.Bool("json"), stdout)
		},
	}
	err := app.Run(args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "tpinspect: %v\n", err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return 1
	case errors.Is(err, format.ErrFormat), isFileError(err):
		return 2
	}
	if strings.Contains(err.Error(), "flag provided but not defined") {
		return 1
	}
	return 2
}

// isFileError tells an error opening or reading the file itself.
func isFileError(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}

func inspect(path string, listSyscalls, asJSON bool, w io.Writer) error {
	f, err := format.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s := summarize(f)
	if listSyscalls {
		s.Syscalls = syscallLines(f.Checkpoint.Syscalls)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	if listSyscalls {
		return printSyscalls(w, s.Syscalls, s.Signals)
	}
	return printSummary(w, s)
}

// summary is what tpinspect reports, in the shape of its JSON output.
// Addresses are hexadecimal strings: JSON numbers lose precision past 2^53.
type summary struct {
	Process   process      `json:"process"`
	Intervals []interval   `json:"intervals"`
	End       end          `json:"end"`
	Signals   []signalRow  `json:"signals"`
	Pages     pages        `json:"pages"`
	Sections  []section    `json:"sections"`
	Counts    []callCount  `json:"syscall_counts"`
	Syscalls  []syscallRow `json:"syscalls,omitempty"`
}

type process struct {
	Pid         int       `json:"pid"`
	Exe         string    `json:"exe"`
	BuildID     string    `json:"build_id"`
	Cmdline     []string  `json:"cmdline"`
	Host        string    `json:"host"`
	Kernel      string    `json:"kernel"`
	Arch        string    `json:"arch"`
	Backend     string    `json:"backend"`
	Reason      string    `json:"reason"`
	Start       time.Time `json:"start"`
	Dump        time.Time `json:"dump"`
	Interval    string    `json:"interval"`
	FullPages   bool      `json:"full_pages"`
	PageSetNote string    `json:"page_set_note,omitempty"`
	Schedule    string    `json:"schedule"`
	Lost        uint64    `json:"lost_events"`
	CPUFlags    int       `json:"cpu_flags"`
	Modules     []module  `json:"modules,omitempty"`
	Threads     []thread  `json:"threads,omitempty"`
}

// thread is one thread's id and name at the dump (format 4.2).
type thread struct {
	Tid  int    `json:"tid"`
	Name string `json:"name"`
}

// module is one object of the loader's list at the dump (format 4.2).
type module struct {
	Name      string `json:"name"`
	LinkMap   string `json:"link_map"`
	LoadBias  string `json:"load_bias"`
	TLSModID  uint64 `json:"tls_modid,omitempty"`
	TLSOffset int64  `json:"tls_offset,omitempty"`
}

type interval struct {
	Index    int       `json:"index"`
	Start    time.Time `json:"start"`
	FirstSeq uint64    `json:"first_seq"`
	Threads  int       `json:"threads"`
	Regions  int       `json:"regions"`
	Written  int       `json:"written_pages"`
	// StartStored: a replay can begin here (Interval.StartOmitted unset).
	StartStored bool   `json:"start_stored"`
	Digests     int    `json:"boundary_digests"`
	Signals     int    `json:"signals"` // delivered in the interval
	Replayable  bool   `json:"replayable"`
	Reason      string `json:"reason,omitempty"`
}

// signalRow is one signal delivered in the window (not the final one).
type signalRow struct {
	Seq      uint64 `json:"seq"` // delivered after this syscall
	Tid      int    `json:"tid"`
	Interval int    `json:"interval"`
	Signal   string `json:"signal"`
	Where    string `json:"where"`
	Rip      string `json:"rip"`
}

type end struct {
	Kind      string `json:"kind"`
	Tid       int    `json:"tid"`
	Signo     int    `json:"signo,omitempty"`
	Signal    string `json:"signal,omitempty"`
	SiCode    *int32 `json:"si_code,omitempty"`
	FaultAddr string `json:"fault_addr,omitempty"`
	ExitCode  int    `json:"exit_code"`
	Rip       string `json:"rip"`
	LastSeq   uint64 `json:"last_seq"`
	Digests   int    `json:"digests"`
	// Threads: the other threads where the recording ended.
	Threads []endThread `json:"threads,omitempty"`
}

type endThread struct {
	Tid int `json:"tid"`
	// InSyscall: waiting in a call (Nr), else in user code at Rip.
	InSyscall bool   `json:"in_syscall"`
	Nr        string `json:"nr,omitempty"`
	Rip       string `json:"rip"`
}

type pages struct {
	Stored          int   `json:"stored"`
	ZeroRefs        int   `json:"zero_page_refs"`
	Final           int   `json:"final"`
	Written         int   `json:"written"`
	RawBytes        int64 `json:"raw_bytes"`
	CompressedBytes int64 `json:"compressed_bytes"`
	Blocks          int   `json:"blocks"`
}

type section struct {
	Name   string `json:"name"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	Raw    int64  `json:"raw_bytes"`
}

type callCount struct {
	Name  string `json:"name"`
	Nr    int    `json:"nr"`
	Count int    `json:"count"`
}

type syscallRow struct {
	Seq  uint64    `json:"seq"`
	Tid  int       `json:"tid"`
	Nr   int       `json:"nr"`
	Name string    `json:"name"`
	Args [6]string `json:"args"`
	Ret  int64     `json:"ret"`
	Rip  string    `json:"rip"`
	Text string    `json:"text"`
}

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }

func summarize(f *format.File) *summary {
	c := f.Checkpoint
	h := &c.Header
	s := &summary{Process: process{
		Pid: h.Pid, Exe: h.ExePath, BuildID: h.BuildID, Cmdline: h.Cmdline, Host: h.Hostname,
		Kernel: h.KernelRelease, Arch: h.Arch, Backend: h.Backend, Reason: h.Reason,
		Start: h.StartTime, Dump: h.DumpTime, Interval: h.Interval.String(), FullPages: h.FullPages,
		PageSetNote: h.PageSetNote, Schedule: h.Schedule.String(), Lost: h.Lost, CPUFlags: len(h.CPUFlags),
	}}
	for _, t := range h.ThreadNames {
		s.Process.Threads = append(s.Process.Threads, thread{Tid: t.Tid, Name: t.Name})
	}
	for _, m := range h.Modules {
		s.Process.Modules = append(s.Process.Modules, module{Name: m.Name, LinkMap: hex(m.LinkMap), LoadBias: hex(m.LAddr), TLSModID: m.TLSModID, TLSOffset: m.TLSOffset})
	}
	st := f.Stats()
	s.Pages = pages{Stored: st.StoredPages, Final: len(c.Final), RawBytes: st.PagesRaw, CompressedBytes: st.PagesCompressed, Blocks: st.Blocks}
	for _, p := range c.Final {
		if p.Hash == format.ZeroHash {
			s.Pages.ZeroRefs++
		}
	}
	perInterval := map[int]int{}
	for _, sg := range c.Signals {
		where := "after the syscall"
		switch {
		case sg.Interrupted():
			where = "interrupting " + syscalls.Name(int(sg.Regs.OrigRax))
		case !sg.AtSyscallExit():
			where = "in user code"
		}
		if sg.Handler == nil {
			where += " (handler not seen)"
		}
		s.Signals = append(s.Signals, signalRow{Seq: sg.Seq, Tid: sg.Tid, Interval: sg.Interval, Signal: signalName(sg.Signo), Where: where, Rip: hex(sg.Regs.Rip)})
		perInterval[sg.Interval]++
	}
	for _, iv := range c.Intervals {
		s.Intervals = append(s.Intervals, interval{
			Index: iv.Index, Start: iv.Start, FirstSeq: iv.FirstSeq, Threads: len(iv.Threads),
			Regions: len(iv.Maps), Written: len(iv.Written), Replayable: iv.Replayable, Reason: iv.Reason,
			StartStored: !iv.StartOmitted, Digests: len(iv.Digests), Signals: perInterval[iv.Index],
		})
		s.Pages.Written += len(iv.Written)
		for _, p := range iv.Written {
			if p.Hash == format.ZeroHash {
				s.Pages.ZeroRefs++
			}
		}
	}
	e := &c.End
	s.End = end{Kind: e.Kind, Tid: e.Tid, Signo: e.Signo, ExitCode: e.ExitCode, Rip: hex(e.Regs.Rip), LastSeq: e.LastSeq, Digests: len(e.Digests)}
	for _, t := range e.Threads {
		et := endThread{Tid: t.Tid, InSyscall: t.InSyscall, Rip: hex(t.Regs.Rip)}
		if t.InSyscall {
			et.Nr = syscalls.Name(int(t.Regs.Rax))
		}
		s.End.Threads = append(s.End.Threads, et)
	}
	if e.Signo != 0 {
		s.End.Signal = signalName(e.Signo)
	}
	if len(e.Siginfo) >= 12 {
		code := int32(binary.LittleEndian.Uint32(e.Siginfo[8:]))
		s.End.SiCode = &code
	}
	if len(e.Siginfo) >= 24 && faultSignal(e.Signo) {
		s.End.FaultAddr = hex(binary.LittleEndian.Uint64(e.Siginfo[16:]))
	}
	for _, sec := range st.Sections {
		s.Sections = append(s.Sections, section{sec.Name, sec.Offset, sec.Size, sec.Raw})
	}
	counts := map[int]int{}
	for _, sc := range c.Syscalls {
		counts[sc.Nr]++
	}
	for nr, n := range counts {
		s.Counts = append(s.Counts, callCount{syscalls.Name(nr), nr, n})
	}
	sort.Slice(s.Counts, func(i, j int) bool {
		a, b := s.Counts[i], s.Counts[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Name < b.Name
	})
	return s
}

// faultSignal tells the signals whose siginfo carries si_addr, the faulting
// address (see sigaction(2), "The siginfo_t argument").
func faultSignal(signo int) bool {
	switch syscall.Signal(signo) {
	case unix.SIGSEGV, unix.SIGBUS, unix.SIGILL, unix.SIGFPE, unix.SIGTRAP:
		return true
	}
	return false
}

func signalName(signo int) string {
	if n := unix.SignalName(syscall.Signal(signo)); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", signo)
}

func syscallLines(calls []format.Syscall) []syscallRow {
	rows := make([]syscallRow, len(calls))
	for i, sc := range calls {
		r := syscallRow{Seq: sc.Seq, Tid: sc.Tid, Nr: sc.Nr, Name: syscalls.Name(sc.Nr), Ret: sc.Ret, Rip: hex(sc.Rip), Text: syscalls.Format(sc)}
		for k, a := range sc.Args {
			r.Args[k] = hex(a)
		}
		rows[i] = r
	}
	return rows
}

// printSyscalls lists the calls, and each signal delivered in the window
// after the call it followed.
func printSyscalls(w io.Writer, rows []syscallRow, sigs []signalRow) error {
	printSigs := func(upTo uint64) error {
		for len(sigs) > 0 && sigs[0].Seq <= upTo {
			sg := sigs[0]
			sigs = sigs[1:]
			if _, err := fmt.Fprintf(w, "-- %d %s delivered %s, rip %s\n", sg.Tid, sg.Signal, sg.Where, sg.Rip); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range rows {
		if err := printSigs(r.Seq - 1); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "%d %d %s\n", r.Seq, r.Tid, r.Text); err != nil {
			return err
		}
	}
	return printSigs(^uint64(0))
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}

func size(n int64) string {
	switch {
	case n >= 10<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 10<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printSummary(out io.Writer, s *summary) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	p := &s.Process
	fmt.Fprintf(w, "process\n")
	fmt.Fprintf(w, "  pid\t%d\n", p.Pid)
	fmt.Fprintf(w, "  exe\t%s\n", orDash(p.Exe))
	fmt.Fprintf(w, "  build-id\t%s\n", orDash(p.BuildID))
	fmt.Fprintf(w, "  cmdline\t%s\n", orDash(quoteArgs(p.Cmdline)))
	fmt.Fprintf(w, "  host\t%s\n", orDash(p.Host))
	fmt.Fprintf(w, "  kernel\t%s (%s, %d cpu flags)\n", orDash(p.Kernel), orDash(p.Arch), p.CPUFlags)
	fmt.Fprintf(w, "  backend\t%s, interval %s%s\n", orDash(p.Backend), p.Interval, map[bool]string{true: ", full pages"}[p.FullPages])
	fmt.Fprintf(w, "  reason\t%s\n", orDash(p.Reason))
	fmt.Fprintf(w, "  recorded\t%s .. %s\n", when(p.Start), when(p.Dump))
	if p.PageSetNote != "" {
		fmt.Fprintf(w, "  page set\t%s\n", p.PageSetNote)
	}
	if p.Schedule != format.ScheduleEager.String() {
		fmt.Fprintf(w, "  threads replay\t%s schedule\n", p.Schedule)
	}
	if p.Lost != 0 {
		fmt.Fprintf(w, "  lost events\t%d\n", p.Lost)
	}
	if len(p.Threads) > 0 {
		var names []string
		for _, t := range p.Threads {
			names = append(names, fmt.Sprintf("%d %s", t.Tid, t.Name))
		}
		fmt.Fprintf(w, "  threads at the dump\t%s\n", strings.Join(names, ", "))
	}
	if len(p.Modules) > 0 {
		tls := 0
		for _, m := range p.Modules {
			if m.TLSModID != 0 {
				tls++
			}
		}
		fmt.Fprintf(w, "  loaded objects\t%d, %d with thread-local storage\n", len(p.Modules), tls)
	}

	fmt.Fprintf(w, "\nintervals\n  index\tstart\tfirst seq\tthreads\tregions\twritten\tstart stored\tdigests\tsignals\treplayable\n")
	for _, iv := range s.Intervals {
		rep := "yes"
		if !iv.Replayable {
			rep = "no: " + orDash(iv.Reason)
		}
		stored := "yes"
		if !iv.StartStored {
			stored = "no"
		}
		fmt.Fprintf(w, "  %d\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\n", iv.Index, when(iv.Start), iv.FirstSeq, iv.Threads, iv.Regions, iv.Written, stored, iv.Digests, iv.Signals, rep)
	}
	if len(s.Signals) > 0 {
		byName := map[string]int{}
		var names []string
		for _, sg := range s.Signals {
			if byName[sg.Signal] == 0 {
				names = append(names, sg.Signal)
			}
			byName[sg.Signal]++
		}
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %d", n, byName[n]))
		}
		fmt.Fprintf(w, "\nsignals\n  delivered\t%d (%s; tpinspect --syscalls places them)\n", len(s.Signals), strings.Join(parts, ", "))
	}

	e := &s.End
	fmt.Fprintf(w, "\nend\n  kind\t%s\n  tid\t%d\n", orDash(e.Kind), e.Tid)
	if e.Signo != 0 {
		fmt.Fprintf(w, "  signal\t%s (%d)\n", e.Signal, e.Signo)
	}
	if e.SiCode != nil {
		fmt.Fprintf(w, "  si_code\t%d\n", *e.SiCode)
	}
	if e.FaultAddr != "" {
		fmt.Fprintf(w, "  fault address\t%s\n", e.FaultAddr)
	}
	if e.Kind == format.EndExit {
		fmt.Fprintf(w, "  exit code\t%d\n", e.ExitCode)
	}
	fmt.Fprintf(w, "  rip\t%s\n  last seq\t%d\n  page digests\t%d\n", e.Rip, e.LastSeq, e.Digests)
	for _, t := range e.Threads {
		if t.InSyscall {
			fmt.Fprintf(w, "  thread %d\tin %s\n", t.Tid, t.Nr)
		} else {
			fmt.Fprintf(w, "  thread %d\tin user code at %s\n", t.Tid, t.Rip)
		}
	}

	pg := &s.Pages
	fmt.Fprintf(w, "\npages\n")
	fmt.Fprintf(w, "  stored (distinct)\t%d in %d blocks\n", pg.Stored, pg.Blocks)
	fmt.Fprintf(w, "  zero page refs\t%d\n", pg.ZeroRefs)
	fmt.Fprintf(w, "  final pages\t%d\n", pg.Final)
	fmt.Fprintf(w, "  written originals\t%d\n", pg.Written)
	ratio := ""
	if pg.CompressedBytes > 0 {
		ratio = fmt.Sprintf(" (%.1fx)", float64(pg.RawBytes)/float64(pg.CompressedBytes))
	}
	fmt.Fprintf(w, "  bytes\t%s raw, %s compressed%s\n", size(pg.RawBytes), size(pg.CompressedBytes), ratio)

	fmt.Fprintf(w, "\nsections\n  name\toffset\tbytes\traw\n")
	for _, sec := range s.Sections {
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\n", sec.Name, sec.Offset, size(sec.Bytes), size(sec.Raw))
	}

	total := 0
	for _, c := range s.Counts {
		total += c.Count
	}
	fmt.Fprintf(w, "\nsyscalls\t%d\n", total)
	for _, c := range s.Counts {
		fmt.Fprintf(w, "  %s\t%d\n", c.Name, c.Count)
	}
	return w.Flush()
}

// quoteArgs joins a command line, quoting the arguments a shell would split.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") {
			q[i] = fmt.Sprintf("%q", a)
		} else {
			q[i] = a
		}
	}
	return strings.Join(q, " ")
}
