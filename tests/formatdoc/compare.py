#!/usr/bin/python3
"""Compare tpcread.py's decoding of a checkpoint with `tpinspect --json --syscalls`.

Usage: compare.py MINE.json TPINSPECT.json LABEL [--min-syscalls N] [--min-pages N]
       [--min-outputs N] [--min-signals N]

MINE.json is `tpcread.py --syscalls FILE`; TPINSPECT.json is
`tpinspect --json --syscalls FILE`.  Every field both expose is compared; a
field of tpinspect's JSON this script does not know is reported (not an
error).  Prints one summary line "LABEL: ..." with the numbers compared;
exits 1 on any difference (each one printed) or when fewer than the minimum
syscalls/pages/outputs/signals were compared, so it cannot pass on an empty
checkpoint.
"""

import json
import re
import struct
import sys

diffs = []
unknown = set()
n = {"syscalls": 0, "outputs": 0, "pages": 0, "intervals": 0, "signals": 0, "fields": 0, "modules": 0}


def diff(path, mine, theirs):
    diffs.append("%s: reader %r, tpinspect %r" % (path, mine, theirs))


def eq(path, mine, theirs):
    n["fields"] += 1
    if mine != theirs:
        diff(path, mine, theirs)
        return False
    return True


def known(path, obj, keys):
    for k in obj:
        if k not in keys:
            unknown.add("%s.%s" % (path, k))


def go_duration_ns(s):
    if s == "0s":
        return 0
    units = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 10**6, "s": 10**9, "m": 60 * 10**9,
             "h": 3600 * 10**9}
    tot = 0
    for num, unit in re.findall(r"([0-9.]+)(ns|us|µs|μs|ms|s|m|h)", s):
        if "." in num:
            ip, fp = num.split(".")
            tot += int(ip) * units[unit] + int(fp) * units[unit] // 10 ** len(fp)
        else:
            tot += int(num) * units[unit]
    return tot


def go_time(s):
    """RFC 3339 with optional fraction, Z -> (sec, nsec) via the reader's utc string form."""
    if s is None or s.startswith("0001-01-01T00:00:00"):
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z", s)
    if not m:
        return s
    frac = (m.group(2) or "").ljust(9, "0")
    return "%s.%sZ" % (m.group(1), frac)


def my_time(t):
    return None if t is None else t["utc"]


def hx(v):
    return "%#x" % v


def unquote(s):
    """Decode a Go/C quoted string body (between the quotes) into bytes."""
    out = bytearray()
    i = 0
    simple = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, '"': 34, "'": 39,
              "e": 27}
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = s[i + 1]
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e == "x":
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        elif e == "u":
            out += chr(int(s[i + 2:i + 6], 16)).encode()
            i += 6
        elif e == "U":
            out += chr(int(s[i + 2:i + 10], 16)).encode()
            i += 10
        elif e in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8) & 0xFF)
            i = j
        else:
            raise ValueError("unknown escape \\%s" % e)
    return bytes(out)


SIGNAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
            8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
            14: "SIGALRM", 15: "SIGTERM", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP"}

QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"(\.\.\.)?')
TIMESPEC = re.compile(r"\{tv_sec=(-?\d+), tv_nsec=(-?\d+)\}")
TIMEVAL = re.compile(r"\{tv_sec=(-?\d+), tv_usec=(-?\d+)\}")
STAT = re.compile(r"\{st_mode=[^,]*, st_size=(\d+)")


def compare_outputs(path, mine, text):
    """Check what the syscall's text shows of its outputs against the decoded bytes."""
    outs = [bytes.fromhex(d) for _, d in mine["outs"]]
    checked = 0
    for m in TIMESPEC.finditer(text):
        want = struct.pack("<qq", int(m.group(1)), int(m.group(2)))
        if not any(o[:16] == want for o in outs):
            diff(path + " timespec", [o.hex() for o in outs], m.group(0))
        checked += 1
    for m in TIMEVAL.finditer(text):
        want = struct.pack("<qq", int(m.group(1)), int(m.group(2)))
        if not any(o[:16] == want for o in outs):
            diff(path + " timeval", [o.hex() for o in outs], m.group(0))
        checked += 1
    for m in STAT.finditer(text):
        size = int(m.group(1))
        if not any(len(o) >= 56 and struct.unpack_from("<q", o, 48)[0] == size for o in outs):
            diff(path + " stat st_size", [o.hex()[:120] for o in outs], m.group(0))
        checked += 1
    for m in QUOTED.finditer(text):
        try:
            b = unquote(m.group(1))
        except (ValueError, IndexError) as e:
            diff(path + " quoted", "undecodable", "%s (%s)" % (m.group(0)[:60], e))
            continue
        if m.group(2):  # cut: a prefix of an output
            ok = any(o.startswith(b) and len(o) > len(b) for o in outs)
        else:
            ok = any(o == b or o.rstrip(b"\0") == b for o in outs)
        if not ok:
            diff(path + " quoted bytes", [o[:48] for o in outs], m.group(0)[:120])
        checked += 1
    return checked


def main(argv):
    args = argv[:3]
    opts = dict(zip(argv[3::2], map(int, argv[4::2])))
    mine = json.load(open(args[0]))
    th = json.load(open(args[1]))
    label = args[2]
    known("", th, {"process", "intervals", "end", "signals", "pages", "sections", "syscall_counts",
                   "syscalls"})

    # process / HEADR
    p, h = th["process"], mine["header"]
    known("process", p, {"pid", "exe", "build_id", "cmdline", "host", "kernel", "arch", "backend", "reason",
                         "start", "dump", "interval", "full_pages", "page_set_note", "schedule",
                         "lost_events", "cpu_flags", "modules", "threads"})
    eq("process.pid", h["pid"], p.get("pid"))
    eq("process.exe", h["exe"], p.get("exe"))
    eq("process.build_id", h["build_id"], p.get("build_id", ""))
    eq("process.cmdline", h["cmdline"], p.get("cmdline") or [])
    eq("process.host", h["hostname"], p.get("host"))
    eq("process.kernel", h["kernel"], p.get("kernel"))
    eq("process.arch", h["arch"], p.get("arch"))
    eq("process.backend", h["backend"], p.get("backend"))
    eq("process.reason", h["reason"], p.get("reason"))
    eq("process.start", my_time(h["start"]), go_time(p.get("start")))
    eq("process.dump", my_time(h["dump"]), go_time(p.get("dump")))
    eq("process.interval", h["interval_ns"], go_duration_ns(p.get("interval", "")))
    eq("process.full_pages", h["full_pages"], p.get("full_pages"))
    eq("process.page_set_note", h["page_set_note"], p.get("page_set_note", ""))
    eq("process.schedule", {0: "eager", 1: "late"}.get(h["schedule"], h["schedule"]), p.get("schedule"))
    eq("process.lost_events", h["lost"], p.get("lost_events"))
    eq("process.cpu_flags", h["cpu_flags"], p.get("cpu_flags"))
    tm = p.get("modules") or []
    if eq("process.modules count", len(h["modules"]), len(tm)):
        for i, (a, b) in enumerate(zip(h["modules"], tm)):
            known("process.modules[]", b, {"name", "link_map", "load_bias", "tls_modid", "tls_offset",
                                           "dynamic"})
            eq("modules[%d].name" % i, a["name"], b.get("name"))
            eq("modules[%d].link_map" % i, a["link_map"], b.get("link_map"))
            eq("modules[%d].load_bias" % i, a["load_bias"], b.get("load_bias"))
            eq("modules[%d].tls_modid" % i, a["tls_modid"], b.get("tls_modid", 0))
            eq("modules[%d].tls_offset" % i, a["tls_offset"], b.get("tls_offset", 0))
            if "dynamic" in b:
                eq("modules[%d].dynamic" % i, a["dynamic"], b["dynamic"])
            n["modules"] += 1
    eq("process.threads", [(t["tid"], t["name"]) for t in h["thread_names"]],
       [(t["tid"], t["name"]) for t in p.get("threads") or []])

    # intervals
    ti = th.get("intervals") or []
    if eq("intervals count", len(mine["intervals"]), len(ti)):
        for a, b in zip(mine["intervals"], ti):
            path = "interval %s" % a["index"]
            known("intervals[]", b, {"index", "start", "first_seq", "threads", "regions", "written_pages",
                                     "start_stored", "boundary_digests", "signals", "replayable", "reason",
                                     "end"})
            eq(path + ".index", a["index"], b.get("index"))
            eq(path + ".start", my_time(a["start"]), go_time(b.get("start")))
            if "end" in b:
                eq(path + ".end", my_time(a["end"]), go_time(b.get("end")))
            eq(path + ".first_seq", a["first_seq"], b.get("first_seq"))
            eq(path + ".threads", a["threads"], b.get("threads"))
            eq(path + ".regions", a["maps"], b.get("regions"))
            eq(path + ".written_pages", a["written"], b.get("written_pages"))
            eq(path + ".start_stored", not a["start_omitted"], b.get("start_stored"))
            eq(path + ".boundary_digests", a["digests"], b.get("boundary_digests"))
            eq(path + ".signals", a["signals"], b.get("signals"))
            eq(path + ".replayable", a["replayable"], b.get("replayable"))
            eq(path + ".reason", a["reason"], b.get("reason", ""))
            n["intervals"] += 1

    # end state
    e, te = mine["end"], th["end"]
    known("end", te, {"kind", "tid", "signo", "signal", "si_code", "fault_addr", "exit_code", "rip",
                      "last_seq", "digests", "threads"})
    eq("end.kind", e["kind"], te.get("kind"))
    eq("end.tid", e["tid"], te.get("tid"))
    eq("end.signo", e["signo"], te.get("signo", 0))
    if "signal" in te:
        eq("end.signal", SIGNAMES.get(e["signo"], e["signo"]), te["signal"])
    eq("end.exit_code", e["exit_code"], te.get("exit_code", 0))
    eq("end.rip", e["regs"]["rip"], te.get("rip"))
    eq("end.last_seq", e["last_seq"], te.get("last_seq"))
    eq("end.digests", e["digests"], te.get("digests", 0))
    if "si_code" in te:
        eq("end.si_code", e["si_code"], te["si_code"])
    if "fault_addr" in te:
        eq("end.fault_addr", e["fault_addr"], te["fault_addr"])
    if "threads" in te:
        eq("end.threads", e["threads"], te["threads"] if isinstance(te["threads"], int) else len(te["threads"]))

    # signals
    ts = th.get("signals") or []
    if eq("signals count", len(mine["signals"]), len(ts)):
        for i, (a, b) in enumerate(zip(mine["signals"], ts)):
            known("signals[]", b, {"seq", "tid", "signo", "signal", "interval", "handler", "si_code", "rip",
                                   "handler_seen", "where"})
            for k in ("seq", "tid", "signo", "interval", "si_code", "rip"):
                if k in b:
                    eq("signals[%d].%s" % (i, k), a[k], b[k])
            if "signal" in b:
                eq("signals[%d].signal" % i, SIGNAMES.get(a["signo"], a["signo"]), b["signal"])
            if "where" in b:
                restart = a["rax"] in (-512, -513, -514, -516)
                if a["orig_rax"] < 0:
                    mine_where = "not in a syscall"
                elif restart:
                    mine_where = "interrupting"
                else:
                    mine_where = "after the syscall"
                theirs = b["where"]
                if theirs.startswith("interrupting"):
                    theirs = "interrupting"
                elif theirs != "after the syscall":
                    theirs = "not in a syscall"
                eq("signals[%d].where (orig_rax %d, rax %d)" % (i, a["orig_rax"], a["rax"]), mine_where, theirs)
            for k in ("handler", "handler_seen"):
                if k in b and isinstance(b[k], bool):
                    eq("signals[%d].%s" % (i, k), a["handler"], b[k])
            n["signals"] += 1

    # pages
    pg, tp = mine["pages"], th["pages"]
    known("pages", tp, {"stored", "zero_page_refs", "final", "written", "raw_bytes", "compressed_bytes",
                        "blocks"})
    for k in ("stored", "zero_page_refs", "final", "written", "raw_bytes", "compressed_bytes", "blocks"):
        eq("pages." + k, pg[k], tp.get(k))
    n["pages"] = pg["stored"] if pg["stored"] == tp.get("stored") else 0

    # sections
    tsec = th.get("sections") or []
    msec = mine["sections"]
    if eq("sections", [(s["name"], s["offset"], s["bytes"]) for s in msec],
          [(s["name"], s["offset"], s["bytes"]) for s in tsec]):
        for a, b in zip(msec, tsec):
            known("sections[]", b, {"name", "offset", "bytes", "raw_bytes"})
            raw = a["raw_bytes"]
            if a["name"] == "PAGES":  # tpinspect counts the payload with its blocks unpacked
                raw = 4 + 16 * pg["blocks"] + pg["pages_in_blocks"] * (4096 + (8 if mine["flags"] & 4 else 0))
            eq("sections.%s.raw_bytes" % a["name"], raw, b.get("raw_bytes"))

    # syscalls
    eq("syscall_counts", {int(k): v for k, v in mine["syscall_counts"].items()},
       {c["nr"]: c["count"] for c in th.get("syscall_counts") or []})
    tsys = th.get("syscalls")
    if tsys is None and mine["syscall_count"] == 0:
        tsys = []
    if tsys is None:
        diff("syscalls", "present", "tpinspect --syscalls gave no list")
        tsys = []
    msys = mine.get("syscalls") or []
    if eq("syscalls count", len(msys), len(tsys)):
        for a, b in zip(msys, tsys):
            path = "syscall seq %s" % a["seq"]
            known("syscalls[]", b, {"seq", "tid", "nr", "name", "args", "ret", "rip", "text"})
            ok = True
            for k in ("seq", "tid", "nr", "args", "ret", "rip"):
                ok &= eq(path + "." + k, a[k], b.get(k))
            n["outputs"] += compare_outputs(path, a, b.get("text", ""))
            n["syscalls"] += 1
            if len(diffs) > 50:
                break

    mins = {"syscalls": opts.get("--min-syscalls", 1), "pages": opts.get("--min-pages", 1),
            "outputs": opts.get("--min-outputs", 1), "signals": opts.get("--min-signals", 0)}
    for k, v in mins.items():
        if n[k] < v:
            diffs.append("only %d %s compared, want at least %d" % (n[k], k, v))
    for u in sorted(unknown):
        print("%s: note: tpinspect field %s not compared" % (label, u))
    print("%s: compared %d fields: %d syscalls, %d outputs shown by tpinspect, %d intervals, %d signals, "
          "%d modules; %d stored pages (each checked against its SHA-256 by the reader), %d blocks; "
          "%d differences" % (label, n["fields"], n["syscalls"], n["outputs"], n["intervals"], n["signals"],
                              n["modules"], n["pages"], pg["blocks"], len(diffs)))
    for d in diffs[:60]:
        print("%s: DIFF %s" % (label, d))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
