package gdb

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tprec/tprec/format"
	"github.com/tprec/tprec/replayer"

	"golang.org/x/sys/unix"
)

// Config tunes a server.
type Config struct {
	// WireLog, when set, receives every packet in both directions.
	WireLog io.Writer
	// Notice receives messages for the user (also sent to GDB's console when
	// the protocol allows it).
	Notice io.Writer
}

// readOnlyMsg is what a write request gets.
const readOnlyMsg = "tpreplay is read-only: writing registers or memory would leave the recorded execution"

// Server answers one GDB connection.
type Server struct {
	s    *replayer.Session
	w    io.Writer
	cfg  Config
	avx  bool
	toks chan token

	noAck    bool
	lastSent []byte
	last     replayer.Stop
	started  bool
	console  []string // messages waiting for the next resume
	logMu    sync.Mutex
	// ReverseTimes records how long each reverse command took.
	ReverseTimes []time.Duration
}

type token struct {
	Token
	err error
}

// Serve answers GDB on rw until it detaches, kills the target, or the
// connection closes.
func Serve(rw io.ReadWriter, s *replayer.Session, cfg Config) error {
	srv := NewServer(rw, s, cfg)
	go srv.read(rw)
	return srv.loop()
}

// NewServer makes a server; Serve is the usual entry point.
func NewServer(w io.Writer, s *replayer.Session, cfg Config) *Server {
	srv := &Server{s: s, w: w, cfg: cfg, toks: make(chan token, 16)}
	if x, err := s.XState(); err == nil {
		srv.avx = hasAVX(x)
	}
	return srv
}

// read turns the byte stream into tokens.
func (sv *Server) read(r io.Reader) {
	defer close(sv.toks)
	buf := make([]byte, 0, 2*MaxPacket)
	chunk := make([]byte, 4096)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		for {
			tok, used, terr := NextToken(buf)
			if used == 0 {
				break
			}
			buf = buf[used:]
			if terr != nil || tok.Kind != 0 {
				sv.toks <- token{tok, terr}
			}
		}
		if err != nil {
			return
		}
	}
}

func (sv *Server) wirelog(dir string, b []byte) {
	if sv.cfg.WireLog == nil {
		return
	}
	sv.logMu.Lock()
	defer sv.logMu.Unlock()
	fmt.Fprintf(sv.cfg.WireLog, "%s %s %s\n", time.Now().Format("15:04:05.000000"), dir, truncateLog(b))
}

func truncateLog(b []byte) string {
	if len(b) > 512 {
		return fmt.Sprintf("%q... (%d bytes)", b[:512], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func (sv *Server) notice(msg string) {
	if sv.cfg.Notice != nil {
		fmt.Fprintf(sv.cfg.Notice, "tpreplay: %s\n", msg)
	}
}

// send writes one reply packet.
func (sv *Server) send(data string) error {
	f := Frame([]byte(data))
	sv.lastSent = f
	sv.wirelog("->", f)
	_, err := sv.w.Write(f)
	return err
}

func (sv *Server) sendRaw(b []byte) error {
	sv.wirelog("->", b)
	_, err := sv.w.Write(b)
	return err
}

// consoleOut sends text to GDB's console (an O packet: valid while the
// target runs, before the stop reply).
func (sv *Server) consoleOut(msg string) error {
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	return sv.send("O" + HexString(msg))
}

func (sv *Server) loop() error {
	for tok := range sv.toks {
		if tok.err != nil {
			sv.wirelog("<-", []byte(tok.err.Error()))
			if errors.Is(tok.err, ErrChecksum) && !sv.noAck {
				if err := sv.sendRaw([]byte{Nack}); err != nil {
					return err
				}
			}
			continue
		}
		switch tok.Kind {
		case Ack:
			continue
		case Nack:
			if !sv.noAck && sv.lastSent != nil {
				if err := sv.sendRaw(sv.lastSent); err != nil {
					return err
				}
			}
			continue
		case Interrupt:
			continue // the target is stopped already
		}
		sv.wirelog("<-", tok.Payload)
		if !sv.noAck {
			if err := sv.sendRaw([]byte{Ack}); err != nil {
				return err
			}
		}
		done, err := sv.handle(tok.Payload)
		if err != nil || done {
			return err
		}
	}
	return nil
}

// handle answers one request; done reports the end of the session.
func (sv *Server) handle(p []byte) (bool, error) {
	req, err := ParseRequest(p)
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return false, sv.send("")
		}
		sv.notice(err.Error())
		return false, sv.send("E01")
	}
	switch req.Op {
	case OpSupported:
		return false, sv.send(fmt.Sprintf("PacketSize=%x;qXfer:features:read+;qXfer:auxv:read+;qXfer:exec-file:read+;qXfer:libraries-svr4:read+;qXfer:threads:read+;"+
			"qXfer:siginfo:read+;ReverseStep+;ReverseContinue+;QStartNoAckMode+;vContSupported+;QCatchSyscalls+;swbreak+", MaxPacket))
	case OpNoAck:
		err := sv.send("OK")
		sv.noAck = true
		return false, err
	case OpHaltReason:
		return false, sv.send(sv.stopReply(sv.last))
	case OpReadRegs:
		regs, err := sv.s.Regs()
		if err != nil {
			return false, sv.send("E01")
		}
		x, _ := sv.s.XState()
		var b strings.Builder
		for i := range registers(sv.avx) {
			b.WriteString(hex.EncodeToString(regBytes(i, regs, x)))
		}
		return false, sv.send(b.String())
	case OpReadReg:
		if req.N >= len(registers(sv.avx)) {
			return false, sv.send("E00")
		}
		regs, err := sv.s.Regs()
		if err != nil {
			return false, sv.send("E01")
		}
		x, _ := sv.s.XState()
		return false, sv.send(hex.EncodeToString(regBytes(req.N, regs, x)))
	case OpWrite:
		sv.notice(readOnlyMsg)
		sv.console = append(sv.console, readOnlyMsg)
		return false, sv.send("E.read-only replay: writing would leave the recorded execution")
	case OpReadMem, OpReadMemBin:
		n := min(req.Len, MaxPacket/2-8)
		buf := make([]byte, n)
		got, err := sv.s.ReadMemory(req.Addr, buf)
		if got == 0 && (err != nil || n > 0) {
			return false, sv.send("E14") // EFAULT
		}
		if req.Op == OpReadMemBin {
			return false, sv.send("b" + string(Escape(buf[:got])))
		}
		return false, sv.send(hex.EncodeToString(buf[:got]))
	case OpInsert, OpRemove:
		return false, sv.send(sv.breakpoint(req))
	case OpStep, OpContinue, OpReverseStep, OpReverseCont:
		return sv.resume(req.Op)
	case OpStop:
		return false, sv.send(sv.stopReply(sv.last))
	case OpVContQuery:
		return false, sv.send("vCont;c;C;s;S;t")
	case OpSetThread:
		if req.Which == 'g' && sv.s.SelectThread(req.Thread) != nil {
			return false, sv.send("E03") // ESRCH
		}
		return false, sv.send("OK")
	case OpThreadAlive:
		if !slices.Contains(sv.s.Threads(), req.Thread) {
			return false, sv.send("E03")
		}
		return false, sv.send("OK")
	case OpCurrentThread:
		return false, sv.send(fmt.Sprintf("QC%x", sv.s.Tid()))
	case OpThreadsFirst:
		var ids []string
		for _, t := range sv.s.Threads() {
			ids = append(ids, fmt.Sprintf("%x", t))
		}
		return false, sv.send("m" + strings.Join(ids, ","))
	case OpThreadsNext:
		return false, sv.send("l")
	case OpXferRead:
		data, ok := sv.xfer(req.Object, req.Annex)
		if !ok {
			return false, sv.send("")
		}
		return false, sv.send(xferChunk(data, req.Addr, req.Len))
	case OpCatchSyscalls:
		sv.s.CatchSyscalls(req.On, len(req.Nrs) == 0, req.Nrs)
		return false, sv.send("OK")
	case OpAttached:
		return false, sv.send("1")
	case OpSymbol:
		return false, sv.send("OK")
	case OpMonitor:
		return false, sv.send(HexString(sv.monitor(req.Text)))
	case OpTLSAddr:
		a, err := sv.tlsAddress(req.Thread, req.Addr, req.LM)
		if err != nil {
			sv.notice("thread-local address: " + err.Error())
			return false, sv.send("E01")
		}
		return false, sv.send(fmt.Sprintf("%x", a))
	case OpKill:
		if strings.HasPrefix(req.Raw, "vKill") {
			_ = sv.send("OK")
		}
		return true, nil
	case OpDetach:
		return true, sv.send("OK")
	}
	return false, sv.send("")
}

// breakpoint handles Z/z: software breakpoints (type 0) and hardware
// watchpoints (2 write, 3 read, 4 access).
func (sv *Server) breakpoint(req Request) string {
	on := req.Op == OpInsert
	switch req.N {
	case 0:
		if on {
			if err := sv.s.SetBreakpoint(req.Addr); err != nil {
				sv.notice(err.Error())
				return "E0e" // EFAULT-like: GDB says it cannot insert the breakpoint
			}
		} else {
			_ = sv.s.ClearBreakpoint(req.Addr)
		}
		return "OK"
	case 2, 3, 4:
		kind := map[int]replayer.WatchKind{2: replayer.WatchWrite, 3: replayer.WatchRead, 4: replayer.WatchAccess}[req.N]
		parts, ok := splitWatch(req.Addr, req.Len)
		if !ok {
			return "E01"
		}
		ws := sv.s.Watches()
		var out []replayer.Watch
		if on {
			out = append(out, ws...)
			for _, p := range parts {
				out = append(out, replayer.Watch{Addr: p[0], Len: int(p[1]), Kind: kind})
			}
		} else {
			drop := map[replayer.Watch]bool{}
			for _, p := range parts {
				drop[replayer.Watch{Addr: p[0], Len: int(p[1]), Kind: kind}] = true
			}
			for _, w := range ws {
				if !drop[w] {
					out = append(out, w)
				}
			}
		}
		if err := sv.s.SetWatches(out); err != nil {
			sv.notice(err.Error())
			return "E28" // ENOSPC: GDB says it cannot insert the watchpoint
		}
		return "OK"
	}
	return ""
}

// splitWatch cuts [addr, addr+n) into naturally aligned pieces of 1, 2, 4
// or 8 bytes, as debug registers need.
func splitWatch(addr uint64, n int) ([][2]uint64, bool) {
	if n <= 0 || n > 32 {
		return nil, false
	}
	var out [][2]uint64
	end := addr + uint64(n)
	for a := addr; a < end; {
		size := uint64(8)
		for size > 1 && (a%size != 0 || a+size > end) {
			size /= 2
		}
		out = append(out, [2]uint64{a, size})
		a += size
	}
	return out, len(out) <= 4
}

// resume runs a step or continue, forward or backward, and sends the stop
// reply. GDB's interrupt (^C) during a forward continue stops it.
func (sv *Server) resume(op Op) (bool, error) {
	for _, m := range sv.console {
		if err := sv.consoleOut(m); err != nil {
			return false, err
		}
	}
	sv.console = nil
	type result struct {
		st  replayer.Stop
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		var r result
		switch op {
		case OpStep:
			r.st, r.err = sv.s.Step()
		case OpContinue:
			r.st, r.err = sv.s.Continue()
		case OpReverseStep:
			r.st, r.err = sv.s.ReverseStep()
		case OpReverseCont:
			r.st, r.err = sv.s.ReverseContinue()
		}
		done <- r
	}()
	var r result
wait:
	for {
		select {
		case r = <-done:
			break wait
		case tok, ok := <-sv.toks:
			if !ok {
				r = <-done
				return true, nil
			}
			if tok.err == nil && tok.Kind == Interrupt && op == OpContinue {
				sv.s.Interrupt()
			}
		}
	}
	if op == OpReverseStep || op == OpReverseCont {
		sv.ReverseTimes = append(sv.ReverseTimes, time.Since(start))
	}
	if r.err != nil {
		msg := r.err.Error()
		var d *replayer.Divergence
		if errors.As(r.err, &d) {
			msg = d.Report()
		}
		sv.notice(msg)
		if err := sv.consoleOut("tpreplay: " + msg); err != nil {
			return false, err
		}
		r.st = replayer.Stop{Reason: replayer.StopStep}
	}
	switch r.st.Reason {
	case replayer.StopPastEnd:
		if err := sv.consoleOut("tpreplay: the recording ends here; go back with reverse-step or reverse-continue"); err != nil {
			return false, err
		}
	case replayer.StopEnd:
		if r.st.Result != nil && r.st.Result.End.Kind == format.EndRequest {
			_ = sv.consoleOut("tpreplay: this is where the recording ended (a dump request)")
		}
	}
	sv.last = r.st
	sv.started = true
	reply := sv.stopReply(r.st)
	if r.err != nil && (op == OpContinue || op == OpReverseCont) {
		// Signal 0: GDB says the program stopped, where T05 made it
		// report a SIGTRAP the program never received (the message above
		// says why it stopped).
		reply = "T00" + strings.TrimPrefix(reply, "T05")
	}
	err := sv.send(reply)
	return strings.HasPrefix(reply, "W"), err
}

// stopReply encodes a stop for GDB.
func (sv *Server) stopReply(st replayer.Stop) string {
	th := fmt.Sprintf("thread:%x;", sv.s.Tid())
	if !sv.started {
		return "T05" + th
	}
	switch st.Reason {
	case replayer.StopEnd:
		end := st.Result.End
		switch end.Kind {
		case format.EndExit:
			return fmt.Sprintf("W%02x", end.ExitCode&0xff)
		case format.EndSignal:
			return fmt.Sprintf("T%02x%s", end.Signo, th)
		}
		return "T05" + th
	case replayer.StopPastEnd:
		return "T05" + th + "replaylog:end;"
	case replayer.StopHistoryStart:
		return "T05" + th + "replaylog:begin;"
	case replayer.StopBreakpoint:
		return "T05" + th + "swbreak:;"
	case replayer.StopWatch:
		kind := map[replayer.WatchKind]string{replayer.WatchWrite: "watch", replayer.WatchRead: "rwatch", replayer.WatchAccess: "awatch"}[st.Watch.Kind]
		return fmt.Sprintf("T05%s%s:%x;", th, kind, st.Addr)
	case replayer.StopSyscallEntry:
		return fmt.Sprintf("T05%ssyscall_entry:%x;", th, st.Syscall)
	case replayer.StopSyscallReturn:
		return fmt.Sprintf("T05%ssyscall_return:%x;", th, st.Syscall)
	case replayer.StopInterrupt:
		return "T02" + th
	}
	return "T05" + th
}

// xfer returns the whole content of a qXfer object.
func (sv *Server) xfer(object, annex string) ([]byte, bool) {
	c := sv.s.Checkpoint()
	switch object {
	case "features":
		if annex != "target.xml" {
			return nil, false
		}
		return []byte(targetXML(sv.avx)), true
	case "exec-file":
		return []byte(c.Header.ExePath), true
	case "auxv":
		return auxv(sv.s), true
	case "siginfo":
		return sv.siginfo(), true
	case "threads":
		return []byte(threadsXML(sv.s.Threads(), c.Header.ThreadNames)), true
	case "libraries-svr4":
		if len(c.Header.Modules) > 0 {
			return []byte(modulesSVR4(c.Header.Modules)), true
		}
		return []byte(librariesSVR4(libraries(c))), true
	}
	return nil, false
}

// siginfo is the siginfo_t of the current stop: the recorded one at the
// recorded signal, else a SIGTRAP one.
func (sv *Server) siginfo() []byte {
	if sv.last.Reason == replayer.StopEnd || sv.last.Reason == replayer.StopPastEnd {
		if r := sv.last.Result; r != nil && r.End.Kind == format.EndSignal && len(r.End.Siginfo) == 128 {
			return append([]byte(nil), r.End.Siginfo...)
		}
	}
	b := make([]byte, 128)
	binary.LittleEndian.PutUint32(b[0:], uint32(unix.SIGTRAP))
	code := int32(2) // TRAP_TRACE
	switch sv.last.Reason {
	case replayer.StopBreakpoint:
		code = 0x80 // SI_KERNEL, as an int3 reports
	case replayer.StopWatch:
		code = 4 // TRAP_HWBKPT
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(code))
	return b
}

// xferChunk answers a qXfer read of [off, off+n) of data.
func xferChunk(data []byte, off uint64, n int) string {
	if off >= uint64(len(data)) {
		return "l"
	}
	end := min(uint64(len(data)), off+uint64(n))
	prefix := "m"
	if end == uint64(len(data)) {
		prefix = "l"
	}
	return prefix + string(Escape(data[off:end]))
}

// monitor answers `monitor CMD` in GDB.
func (sv *Server) monitor(cmd string) string {
	switch strings.TrimSpace(cmd) {
	case "where", "position":
		p, ok := sv.s.Position()
		if !ok {
			return "position: not named yet (it will be, by re-execution, when you go back)\n"
		}
		return fmt.Sprintf("position: %v\n", p)
	case "stats":
		var b strings.Builder
		fmt.Fprintf(&b, "re-executions from the start: %d, from a snapshot: %d; snapshots kept: %d\n", sv.s.Reexecutions, sv.s.FromSnapshot, sv.s.Snapshots())
		if err := sv.s.SnapshotErr; err != nil {
			fmt.Fprintf(&b, "snapshots stopped: %v\n", err)
		}
		for i, d := range sv.ReverseTimes {
			fmt.Fprintf(&b, "reverse command %d: %v\n", i+1, d.Round(time.Microsecond))
		}
		return b.String()
	}
	return "tpreplay monitor commands: where (the current position), stats (re-execution costs)\n" +
		"The replay is read-only and deterministic: reverse-step and reverse-continue re-execute from the nearest snapshot (a fork of the replay left every few hundred syscalls) or the start of the window.\n"
}
