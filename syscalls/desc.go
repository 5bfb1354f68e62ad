package syscalls

// SizeKind says how the size of an output buffer is found.
type SizeKind int

const (
	// SizeFixed: N bytes.
	SizeFixed SizeKind = iota + 1
	// SizeRet: as many bytes as the call returned (read, getdents64, getrandom...).
	SizeRet
	// SizeArg: the value of argument Arg, in bytes.
	SizeArg
	// SizeArgPtr: the int32 (socklen_t) stored at the address in argument Arg,
	// read after the call, when the kernel has replaced the caller's buffer size
	// by the length of the result (getsockname, accept, getsockopt).
	SizeArgPtr
	// SizeRetTimes: the return value times N bytes (epoll_wait, getgroups).
	SizeRetTimes
	// SizeArgTimes: argument Arg times N bytes (poll).
	SizeArgTimes
)

// Size says how large an output buffer is.
type Size struct {
	Kind SizeKind
	N    int
	Arg  int
	// Max, when positive, caps the size: the kernel never writes more than Max
	// bytes there even when the length it reports is larger (a socket address
	// longer than the caller's buffer is truncated, but its full length is
	// stored in the socklen_t).
	Max int
}

// OutKind says how an output argument is laid out.
type OutKind int

const (
	// OutPlain: the argument points at Size bytes the kernel fills.
	OutPlain OutKind = iota
	// OutIovec: the argument is an array of struct iovec whose count is argument
	// Size.Arg; the kernel filled the buffers in order, ret bytes in all.
	OutIovec
	// OutMsghdr: the argument is a struct msghdr (recvmsg). The kernel filled
	// the iovec buffers in order (ret bytes), msg_name (msg_namelen bytes as
	// stored after the call), msg_control (msg_controllen bytes, likewise), and
	// wrote msg_namelen, msg_controllen and msg_flags back into the msghdr.
	OutMsghdr
	// OutMmsghdr: the argument is an array of struct mmsghdr (recvmmsg); the
	// first ret entries were filled as with OutMsghdr, each with msg_len bytes
	// of data, and msg_len itself written.
	OutMmsghdr
)

// Out is one argument through which the kernel writes into the process.
type Out struct {
	Arg  int
	Size Size
	Kind OutKind
	// OnError: the kernel also writes it when the call fails (the remaining
	// time of an interrupted nanosleep, poll's revents on EINTR).
	OnError bool
}

// Desc declares one syscall. Descs returned by Lookup are shared: never
// modify one.
type Desc struct {
	Nr   int
	Name string
	// NArgs is the number of arguments that define the call; replay compares
	// them to detect divergence. It equals len(Args).
	NArgs int
	Kind  Kind
	// Outs lists the arguments the kernel writes through, when that does not
	// depend on the arguments' values. See Dyn.
	Outs []Out
	// Dyn, when set, computes the outputs of one call from its arguments and
	// return value, and is used instead of Outs (ioctl, fcntl, select...).
	Dyn func(args [6]uint64, ret int64) []Out
	// Accept, when set, says whether one particular call is understood
	// (ioctl with an unknown request is not). Use Check rather than calling it.
	Accept func(args [6]uint64) (ok bool, why string)
	// Note says why the call is Unsupported, or a caveat of its replay.
	Note string

	// Args says how Format prints each argument; its length is NArgs.
	Args []Arg
	// Ret says how Format prints a non-error return value.
	Ret Arg
}

// Arg says how Format prints an argument or a return value.
type Arg int

const (
	ArgInt       Arg = iota // signed decimal
	ArgUint                 // unsigned decimal (sizes, counts)
	ArgHex                  // hexadecimal (flags without a decoder, addresses returned)
	ArgPtr                  // an input pointer: NULL or hexadecimal
	ArgFd                   // a file descriptor (int32); AT_FDCWD by name
	ArgStr                  // an input string or buffer (its content is not recorded)
	ArgBuf                  // an output byte buffer: its recorded content, quoted
	ArgOutPtr               // an output struct: recorded or not, printed as a pointer
	ArgTimespec             // an output struct timespec, decoded
	ArgTimeval              // an output struct timeval, decoded
	ArgFdPair               // an output int[2] (pipe, socketpair), decoded
	ArgInt32Out             // an output int32, decoded
	ArgStat                 // an output struct stat, mode and size decoded
	ArgMode                 // file mode, octal
	ArgOpenFlags            // O_* flags
	ArgProt                 // PROT_* flags
	ArgMapFlags             // MAP_* flags
	ArgSignal               // a signal number, by name
)

// Check says whether one particular call can be recorded and replayed: false
// for an Unsupported syscall, and for a call whose arguments the table does
// not understand (an ioctl request it does not know, for instance). why names
// the reason, for the checkpoint's "not replayable" note.
func Check(d *Desc, args [6]uint64) (ok bool, why string) {
	if d == nil {
		return false, "syscall not in the table"
	}
	if d.Kind == Unsupported {
		if d.Note != "" {
			return false, d.Name + ": " + d.Note
		}
		return false, d.Name + " is not supported"
	}
	if d.Accept != nil {
		if ok, why := d.Accept(args); !ok {
			return false, d.Name + ": " + why
		}
	}
	return true, ""
}

// OutsOf returns the output arguments of one call: d.Dyn's answer when set,
// else d.Outs.
func OutsOf(d *Desc, args [6]uint64, ret int64) []Out {
	if d.Dyn != nil {
		return d.Dyn(args, ret)
	}
	return d.Outs
}

// Lookup returns the declaration of syscall nr, or false when the table does
// not declare it (the caller then treats it as Unsupported, naming it with
// Name).
func Lookup(nr int) (*Desc, bool) {
	if nr < 0 || nr >= len(byNr) || byNr[nr] == nil {
		return nil, false
	}
	return byNr[nr], true
}

// All returns every declared syscall, ordered by number.
func All() []*Desc {
	var ds []*Desc
	for _, d := range byNr {
		if d != nil {
			ds = append(ds, d)
		}
	}
	return ds
}

var byNr [maxSysnum + 1]*Desc

func init() {
	for i := range table {
		d := &table[i]
		d.NArgs = len(d.Args)
		if d.Nr < 0 || d.Nr > maxSysnum || byNr[d.Nr] != nil {
			panic("syscalls: bad or duplicate table entry " + d.Name)
		}
		byNr[d.Nr] = d
	}
}
