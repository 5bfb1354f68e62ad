package recorder

import (
	"io"
	"os"
	"time"
)

// Options configure a recording.
type Options struct {
	Pid       int      // attach to this process, or
	Cmd       []string // launch this command
	Interval  time.Duration
	Keep      int   // intervals kept in the ring
	MaxMemory int64 // bytes the ring may hold
	OutputDir string
	Backend   string // "auto", "ebpf" or "ptrace"
	// RingbufSize is the eBPF ring buffer size in bytes (0: DefaultRingbufSize).
	RingbufSize int
	OnExit      bool // also dump when the process exits normally
	FullPages   bool // keep every present page instead of the touched ones
	AllStarts   bool // store the memory at every interval start, not only the first replayable one
	// KeepShadow: a boundary may keep the interval's shadow for the next
	// one (kept.go); tprec sets it unless told --keep-shadow=false.
	KeepShadow bool
	// NoClockLog leaves the vDSO's clock reads to the vDSO patch's
	// syscalls instead of recording them in the process (clocklog.go).
	NoClockLog bool
	// StatusEvery is how often a status line is logged (0: never).
	StatusEvery time.Duration
	Log         io.Writer
	// Errors receives what the user must see even when Log is silenced: a
	// checkpoint that could not be written, or was written elsewhere
	// (default os.Stderr).
	Errors io.Writer
	// FallbackDirs are where a checkpoint goes when OutputDir cannot take it
	// (full, read-only, gone): default $TMPDIR, /var/tmp, /tmp.
	FallbackDirs []string
	// Dumped, if set, is called with the path of every checkpoint written.
	Dumped func(path string)
	// Hurry, once closed, stops the trial replay of a checkpoint still
	// being written: it is written at once with every present page
	// (tprec closes it at a second interrupt).
	Hurry <-chan struct{}
	// Guardian is the command line of the guardian (Guard), to which
	// tprec adds --pid and --tprec: the tprec binary's hidden "guardian"
	// command. Empty: no guardian.
	Guardian []string
	// RdfsbaseProbe is the command line of a process that checks whether
	// user code can read its fs base with rdfsbase (proc.CheckRdfsbase),
	// run when the kernel does not announce FSGSBASE: the tprec binary's
	// hidden "rdfsbase-probe" command. Empty: the kernel's word decides.
	RdfsbaseProbe []string
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Keep <= 0 {
		o.Keep = 8
	}
	if o.MaxMemory <= 0 {
		o.MaxMemory = 64 << 20
	}
	if o.OutputDir == "" {
		o.OutputDir = "."
	}
	if o.Backend == "" {
		o.Backend = "auto"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Errors == nil {
		o.Errors = os.Stderr
	}
	if o.FallbackDirs == nil {
		o.FallbackDirs = []string{os.TempDir(), "/var/tmp", "/tmp"}
	}
}
