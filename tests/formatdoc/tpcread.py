#!/usr/bin/python3
"""Independent reader of tprec checkpoint files (.tpc), written from FORMAT.md alone.

It parses the file header, the trailer, the directory, every section header and
payload (CRC-32C checked), unpacks the packed payloads (zstd chunks), decodes
HEADR, INTVL, FINAL, SYSCL, SIGNL, ENDST, PGIDX and PAGES (every page is
decompressed, its words mapped back and its SHA-256 checked against the index),
checks the invariants of FORMAT.md "What a reader checks" and prints a JSON
summary on stdout.

Exit status: 0 the file is valid, 2 the file was rejected (message on stderr),
1 usage error.

Only the standard library and Debian's python3-zstandard are used.  This
reader decodes version 7.x files with FlagZstd set (what the current tprec
writes); older versions are refused as unsupported by this reader.

Usage: tpcread.py [--syscalls] [--pages] [--quiet] FILE
"""

import hashlib
import json
import struct
import sys

try:
    import zstandard
except ImportError:  # pragma: no cover
    sys.stderr.write("tpcread: needs python3-zstandard (apt-get install python3-zstandard); "
                     "run it with /usr/bin/python3\n")
    sys.exit(1)

MAGIC = b"TPCKPT\x00\x01"
END_MAGIC = b"TPCKEND\x00"
MAJOR = 7
MINOR = 2
FLAG_ZSTD = 1
FLAG_SIGNALS = 2
FLAG_PAGEWORDS = 4
KNOWN_FLAGS = FLAG_ZSTD | FLAG_SIGNALS | FLAG_PAGEWORDS

SEC_NAMES = {1: "HEADR", 2: "INTVL", 3: "FINAL", 4: "SYSCL", 5: "SIGNL",
             6: "ENDST", 7: "PGIDX", 8: "PAGES", 16: "DIRCT"}
REQUIRED = (1, 2, 3, 4, 5, 6, 7, 8)

PAGE = 4096
M64 = (1 << 64) - 1
K63 = 1 << 63
MAX_SYSCALLS = 8388608
ZERO_HASH = hashlib.sha256(bytes(PAGE)).digest()[:16]
REG_NAMES = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax "
             "rip cs eflags rsp ss fs_base gs_base ds es fs gs").split()
assert len(REG_NAMES) == 27


NOTES = []  # properties FORMAT.md states but does not make a reader's check


class FormatError(Exception):
    def __init__(self, section, offset, msg):
        super().__init__("%s at file offset %d: %s" % (section, offset, msg))
        self.section = section
        self.offset = offset


# ---------------------------------------------------------------- CRC-32C

def _crc_tables():
    poly = 0x82F63B78
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t0.append(c)
    tabs = [t0]
    for k in range(1, 4):
        prev = tabs[k - 1]
        tabs.append([(prev[i] >> 8) ^ t0[prev[i] & 0xFF] for i in range(256)])
    return tabs


_T0, _T1, _T2, _T3 = _crc_tables()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as Go's crc32.Checksum(data, MakeTable(Castagnoli))."""
    c = crc ^ 0xFFFFFFFF
    mv = memoryview(data)
    n4 = len(mv) // 4 * 4
    t0, t1, t2, t3 = _T0, _T1, _T2, _T3
    if n4:
        for (w,) in struct.iter_unpack("<I", mv[:n4]):
            c ^= w
            c = t3[c & 0xFF] ^ t2[(c >> 8) & 0xFF] ^ t1[(c >> 16) & 0xFF] ^ t0[c >> 24]
    for b in mv[n4:]:
        c = t0[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


# ---------------------------------------------------------------- byte reader

class Reader:
    """Reads the fields of FORMAT.md's "Conventions" from one buffer.

    section/base name the error location: for a plain payload, base is the
    payload's file offset and errors give base + position; for a packed payload
    (packed=True) errors give base and the position in the unpacked bytes."""

    def __init__(self, buf, section, base, packed=False):
        self.b = memoryview(buf)
        self.p = 0
        self.section = section
        self.base = base
        self.packed = packed

    def err(self, msg):
        if self.packed:
            raise FormatError(self.section, self.base, "unpacked byte %d: %s" % (self.p, msg))
        raise FormatError(self.section, self.base + self.p, msg)

    def left(self):
        return len(self.b) - self.p

    def need(self, n, what="field"):
        if n > self.left():
            self.err("%s needs %d bytes, %d left" % (what, n, self.left()))

    def take(self, n, what="field"):
        self.need(n, what)
        v = bytes(self.b[self.p:self.p + n])
        self.p += n
        return v

    def _st(self, fmt, n):
        self.need(n)
        v = struct.unpack_from(fmt, self.b, self.p)[0]
        self.p += n
        return v

    def u8(self):
        return self._st("<B", 1)

    def u16(self):
        return self._st("<H", 2)

    def u32(self):
        return self._st("<I", 4)

    def u64(self):
        return self._st("<Q", 8)

    def i64(self):
        return self._st("<q", 8)

    def bool(self):
        v = self.u8()
        if v > 1:
            self.p -= 1
            self.err("boolean %d is neither 0 nor 1" % v)
        return v == 1

    def bytes(self):
        n = self.u32()
        return self.take(n, "byte string of %d bytes" % n)

    def string(self):
        return self.bytes().decode("utf-8", "surrogateescape")

    def count(self, minsize, what):
        n = self.u32()
        if n * minsize > self.left():
            self.err("%s count %d needs at least %d bytes, %d left" % (what, n, n * minsize, self.left()))
        return n

    def strings(self):
        return [self.string() for _ in range(self.count(4, "string list"))]

    def time(self):
        s = self.i64()
        ns = self.u32()
        if ns >= 1000000000:
            self.p -= 4
            self.err("nanoseconds %d not below 10^9" % ns)
        return (s, ns)

    def hash(self):
        return self.take(16)

    def regs(self):
        self.need(216, "registers")
        v = struct.unpack_from("<27Q", self.b, self.p)
        self.p += 216
        return v

    def pagerefs(self, what):
        n = self.count(24, what)
        out = []
        seen = set()
        for _ in range(n):
            a = self.u64()
            h = self.hash()
            if a % PAGE:
                self.err("%s: address %#x not page-aligned" % (what, a))
            if a in seen:
                self.err("%s: address %#x twice" % (what, a))
            seen.add(a)
            out.append((a, h))
        return out

    def uvarint(self):
        x = 0
        s = 0
        for i in range(10):
            if self.p >= len(self.b):
                self.err("uvarint runs past the end")
            c = self.b[self.p]
            self.p += 1
            if c < 0x80:
                if i == 9 and c > 1:
                    self.err("uvarint overflows 64 bits")
                return x | (c << s)
            x |= (c & 0x7F) << s
            s += 7
        self.err("uvarint longer than 10 bytes")

    def svarint(self):
        u = self.uvarint()
        x = u >> 1
        if u & 1:
            x = ~x
        return x

    def end(self, minor_above):
        """No trailing bytes, unless the file's minor version is above ours."""
        if self.left() and not minor_above:
            self.err("%d trailing bytes" % self.left())


def s64(u):
    u &= M64
    return u - (1 << 64) if u >= K63 else u


def rfc3339(t):
    import datetime
    s, ns = t
    if s == -62135596800 and ns == 0:
        return None
    d = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=s)
    return {"sec": s, "nsec": ns, "utc": d.strftime("%Y-%m-%dT%H:%M:%S") + ".%09dZ" % ns}


# ---------------------------------------------------------------- packed payloads

def unpack(payload, section, base):
    r = Reader(payload, section, base)
    raw = r.u64()
    c = r.u32()
    if c < 4096 or c > 16 << 20:
        r.err("chunk size %d outside 4 KiB..16 MiB" % c)
    if raw > 32768 * len(payload):
        r.err("raw length %d exceeds 32768 times the payload" % raw)
    nchunks = (raw + c - 1) // c
    out = bytearray()
    dctx = zstandard.ZstdDecompressor()
    info = {"raw_length": raw, "chunk_size": c, "chunks": nchunks, "compressed_chunks": 0}
    for i in range(nchunks):
        want = min(c, raw - i * c)
        n = r.u32()
        if n > want:
            r.err("chunk %d: stored length %d above its unpacked size %d" % (i, n, want))
        data = r.take(n, "chunk %d" % i)
        if n == want:
            out += data
            continue
        if want > 32768 * n:
            r.err("chunk %d: %d bytes cannot expand to %d" % (i, n, want))
        try:
            obj = dctx.decompressobj()
            got = obj.decompress(data)
            if not obj.eof:
                raise zstandard.ZstdError("frame incomplete")
            if obj.unused_data:
                raise zstandard.ZstdError("%d bytes after the frame" % len(obj.unused_data))
        except zstandard.ZstdError as e:
            raise FormatError(section, base, "chunk %d: zstd: %s" % (i, e))
        if len(got) != want:
            raise FormatError(section, base, "chunk %d: unpacks to %d bytes, not %d" % (i, len(got), want))
        info["compressed_chunks"] += 1
        out += got
    if r.left():
        r.err("%d bytes after the last chunk" % r.left())
    return bytes(out), info


# ---------------------------------------------------------------- the file

class Checkpoint:
    pass


def read_file(path):
    with open(path, "rb") as f:
        data = f.read()
    return decode(data)


def decode(data):
    ck = Checkpoint()
    size = len(data)
    # 1. file header
    if size < 8 or data[:8] != MAGIC:
        raise FormatError("FILEHDR", 0, "not a tprec checkpoint")
    if size < 16 + 32:
        raise FormatError("FILEHDR", 0, "file of %d bytes is too short" % size)
    major, minor, flags = struct.unpack_from("<HHI", data, 8)
    if major != MAJOR:
        raise FormatError("FILEHDR", 8, "format version %d.%d is not supported by this independent reader "
                          "(it decodes 7.x only)" % (major, minor))
    unknown = flags & 0xFFFF & ~KNOWN_FLAGS
    if unknown:
        raise FormatError("FILEHDR", 12, "file needs features this build lacks (flags %#x)" % unknown)
    if not flags & FLAG_ZSTD:
        raise FormatError("FILEHDR", 12, "lz4 payloads (no FlagZstd) are not decoded by this reader")
    ck.major, ck.minor, ck.flags = major, minor, flags
    minor_above = minor > MINOR
    # 2. trailer
    t = size - 32
    dir_off, flen, fcrc, tcrc = struct.unpack_from("<QQII", data, t)
    if data[t + 24:] != END_MAGIC:
        raise FormatError("TRAILER", t + 24, "no end magic: the file is truncated or incomplete")
    if crc32c(data[t:t + 20]) != tcrc:
        raise FormatError("TRAILER", t + 20, "trailer CRC mismatch")
    if flen != size:
        raise FormatError("TRAILER", t + 8, "file length field %d, file has %d bytes" % (flen, size))
    if dir_off < 16 or dir_off + 16 > t:
        raise FormatError("TRAILER", t, "directory offset %d outside the file" % dir_off)
    # 3. directory
    dtype, dlen, dcrc = struct.unpack_from("<IQI", data, dir_off)
    if dtype != 16:
        raise FormatError("DIRCT", dir_off, "section type %d where the directory should be" % dtype)
    if dir_off + 16 + dlen != t:
        raise FormatError("DIRCT", dir_off + 4, "directory length %d does not end at the trailer" % dlen)
    dpay = data[dir_off + 16:t]
    if crc32c(dpay) != dcrc:
        raise FormatError("DIRCT", dir_off + 12, "directory CRC mismatch")
    dr = Reader(dpay, "DIRCT", dir_off + 16)
    n = dr.count(16, "directory")
    entries = []
    for _ in range(n):
        st, res, off = dr.u32(), dr.u32(), dr.u64()
        if res != 0:
            dr.err("reserved field %d is not 0" % res)
        if st == 16:
            dr.err("the directory lists a directory")
        entries.append((st, off))
    dr.end(False)
    # each listed section header; contiguity
    secs = []
    for st, off in entries:
        if off < 16 or off + 16 > dir_off:
            raise FormatError("DIRCT", dir_off + 16, "section offset %d outside the file" % off)
        ht, hl, hc = struct.unpack_from("<IQI", data, off)
        name = SEC_NAMES.get(st, "type%d" % st)
        if ht != st:
            raise FormatError(name, off, "directory says type %d, header says %d" % (st, ht))
        if off + 16 + hl > dir_off:
            raise FormatError(name, off + 4, "payload length %d runs past the directory" % hl)
        secs.append((off, st, hl, hc))
    secs.sort()
    pos = 16
    for off, st, hl, hc in secs:
        if off != pos:
            raise FormatError(SEC_NAMES.get(st, "type%d" % st), off,
                              "sections not contiguous: expected one at %d" % pos)
        pos = off + 16 + hl
    if pos != dir_off:
        raise FormatError("DIRCT", dir_off, "last section ends at %d, not at the directory" % pos)
    framing = crc32c(b"".join([data[:16]] + [data[o:o + 16] for o, _, _, _ in secs] +
                              [data[dir_off:dir_off + 16]]))
    if framing != fcrc:
        raise FormatError("TRAILER", t + 16, "framing CRC mismatch")
    # 4. payload CRCs, required sections
    payloads = {}
    ck.sections = []
    skipped = []
    for off, st, hl, hc in secs:
        name = SEC_NAMES.get(st, "type%d" % st)
        p = data[off + 16:off + 16 + hl]
        if crc32c(p) != hc:
            raise FormatError(name, off + 16, "payload CRC mismatch")
        if st in REQUIRED:
            if st in payloads:
                raise FormatError(name, off, "section twice")
            payloads[st] = (p, off + 16)
        elif st & 0x80000000:
            raise FormatError(name, off, "unknown critical section type %#x" % st)
        else:
            skipped.append(st)
        ck.sections.append({"name": name, "type": st, "offset": off, "bytes": hl})
    ck.sections.append({"name": "DIRCT", "type": 16, "offset": dir_off, "bytes": dlen})
    for st in REQUIRED:
        if st not in payloads:
            raise FormatError(SEC_NAMES[st], 0, "required section missing")
    ck.skipped = skipped
    ck.framing_crc = fcrc
    ck.size = size

    # 5./6. payloads
    raw_sizes = {}

    def packed(st):
        p, base = payloads[st]
        u, info = unpack(p, SEC_NAMES[st], base)
        raw_sizes[SEC_NAMES[st]] = info
        return Reader(u, SEC_NAMES[st], base, packed=True)

    # PGIDX and PAGES first so references can be checked against the index.
    ck.pages = decode_pages(ck, *payloads[8])
    ck.index = decode_index(ck, *payloads[7])
    ck.header = decode_headr(Reader(payloads[1][0], "HEADR", payloads[1][1]), minor, minor_above)
    ck.intervals = decode_intvl(packed(2), minor_above)
    fr = Reader(payloads[3][0], "FINAL", payloads[3][1])
    ck.final = fr.pagerefs("FINAL")
    fr.end(minor_above)
    ck.syscalls = decode_syscl(packed(4), minor_above)
    ck.signals = decode_signl(Reader(payloads[5][0], "SIGNL", payloads[5][1]), minor_above)
    ck.end = decode_endst(Reader(payloads[6][0], "ENDST", payloads[6][1]), minor_above)
    ck.raw_sizes = raw_sizes
    check_model(ck, payloads)
    return ck


# ---------------------------------------------------------------- HEADR

def decode_headr(r, minor, minor_above):
    h = {}
    h["arch"] = r.string()
    h["kernel"] = r.string()
    h["cpu_flags"] = r.strings()
    h["hostname"] = r.string()
    h["exe"] = r.string()
    h["build_id"] = r.string()
    h["cmdline"] = r.strings()
    h["pid"] = r.i64()
    h["backend"] = r.string()
    h["interval_ns"] = r.i64()
    if h["interval_ns"] < 0:
        r.err("negative interval")
    h["full_pages"] = r.bool()
    h["page_set_note"] = r.string()
    h["start"] = rfc3339(r.time())
    h["dump"] = rfc3339(r.time())
    h["reason"] = r.string()
    h["lost"] = r.u64()
    mods = []
    for _ in range(r.count(4 + 40, "modules")):
        m = {"name": r.string(), "link_map": r.u64(), "load_bias": r.u64(), "dynamic": r.u64(),
             "tls_modid": r.u64(), "tls_offset": r.i64()}
        mods.append(m)
    h["modules"] = mods
    h["thread_names"] = [{"tid": r.i64(), "name": r.string()} for _ in range(r.count(12, "thread names"))]
    h["schedule"] = 0  # "A 7.0 file ends the payload after the thread names and replays eager."
    if minor >= 1:
        h["schedule"] = r.u8()
    if minor >= 2:
        xs = []
        for _ in range(r.count(9, "XSAVE layout")):
            xs.append({"number": r.u8(), "offset": r.u32(), "size": r.u32()})
        h["xsave"] = xs
    r.end(minor_above)
    return h


# ---------------------------------------------------------------- INTVL

THREAD_MIN = 8 + 216 + 4 + 8 + 1 + 16
MAP_MIN = 8 + 8 + 4 + 1 + 8 + 4 + 8 + 4
INTERVAL_MIN = 8 + 12 + 12 + 8 + 1 + 4 + 1 + 4 + 4 + 4 + 4


def decode_thread(r):
    th = {"tid": r.i64(), "regs": r.regs(), "xstate": r.bytes(), "sigmask": r.u64(),
          "in_syscall": r.bool()}
    th["rseq"] = (r.u64(), r.u32(), r.u32())
    return th


def decode_threads(r, what):
    ths = []
    tids = set()
    for _ in range(r.count(THREAD_MIN, what)):
        th = decode_thread(r)
        if th["tid"] in tids:
            r.err("%s: tid %d twice" % (what, th["tid"]))
        tids.add(th["tid"])
        ths.append(th)
    return ths


def decode_intvl(r, minor_above):
    out = []
    n = r.count(INTERVAL_MIN, "intervals")
    prev_index = None
    prev_seq = 0
    for _ in range(n):
        iv = {"index": r.i64(), "start": rfc3339(r.time()), "end": rfc3339(r.time()),
              "first_seq": r.u64(), "replayable": r.bool(), "reason": r.string(),
              "start_omitted": r.bool()}
        if prev_index is not None and iv["index"] <= prev_index:
            r.err("interval index %d not above %d" % (iv["index"], prev_index))
        if iv["first_seq"] < prev_seq:
            r.err("interval first seq %d below the previous %d" % (iv["first_seq"], prev_seq))
        prev_index, prev_seq = iv["index"], iv["first_seq"]
        iv["threads"] = decode_threads(r, "interval %d threads" % iv["index"])
        maps = []
        prev_end = 0
        for _ in range(r.count(MAP_MIN, "mappings")):
            m = {"start": r.u64(), "end": r.u64(), "prot": r.u32(), "shared": r.bool(),
                 "offset": r.u64(), "dev": r.string(), "inode": r.u64(), "path": r.string()}
            if m["start"] % PAGE or m["end"] % PAGE:
                r.err("mapping %#x-%#x not page-aligned" % (m["start"], m["end"]))
            if m["end"] <= m["start"]:
                r.err("mapping %#x-%#x empty or reversed" % (m["start"], m["end"]))
            if m["start"] < prev_end:
                r.err("mapping %#x-%#x not sorted or overlapping" % (m["start"], m["end"]))
            if m["prot"] & ~7:
                r.err("mapping prot %#x has bits other than 1/2/4" % m["prot"])
            prev_end = m["end"]
            maps.append(m)
        iv["maps"] = maps
        iv["written"] = r.pagerefs("interval %d written" % iv["index"])
        iv["digests"] = r.pagerefs("interval %d digests" % iv["index"])
        out.append(iv)
    r.end(minor_above)
    return out


# ---------------------------------------------------------------- SYSCL

class Rec:
    __slots__ = ("seq", "tid", "nr", "vals", "outs", "pages")

    def __init__(self):
        self.vals = [0] * 8   # Args[0..5], Ret, Rip as u64
        self.outs = []        # (address, bytes)
        self.pages = []


ZERO_REC = Rec()


def decode_syscl(r, minor_above):
    n = r.uvarint()
    if n > MAX_SYSCALLS:
        r.err("%d syscalls exceed MaxSyscalls" % n)
    s = r.uvarint()
    if s * 3 > r.left():
        r.err("stream count %d too large" % s)
    dirent = []
    seen = set()
    for _ in range(s):
        kind = r.uvarint()
        key = r.svarint()
        ln = r.uvarint()
        if kind < 1 or kind > 6:
            r.err("stream kind %d outside 1-6" % kind)
        if (kind, key) in seen:
            r.err("stream (%d, %d) twice" % (kind, key))
        if kind in (1, 3, 6) and key != 0:
            r.err("stream kind %d with key %d, not 0" % (kind, key))
        if kind == 2 and not 0 <= key <= 7:
            r.err("values stream key %d outside 0-7" % key)
        seen.add((kind, key))
        dirent.append((kind, key, ln))
    streams = {}
    for kind, key, ln in dirent:
        if ln > r.left():
            r.err("stream (%d, %d) of %d bytes, %d left" % (kind, key, ln, r.left()))
        sub = Reader(b"", r.section, r.base, packed=True)
        sub.b = r.b[r.p:r.p + ln]
        sub.start = r.p
        r.p += ln
        streams[(kind, key)] = sub
    r.end(minor_above)

    empty = Reader(b"", r.section, r.base, packed=True)

    def stream(kind, key):
        return streams.get((kind, key), empty)

    heads = stream(1, 0)
    if n * 6 > heads.left():
        heads.err("record count %d needs %d bytes of heads, stream has %d" % (n, n * 6, heads.left()))
    outs_s = stream(3, 0)
    pages_s = stream(6, 0)
    vals = [stream(2, k) for k in range(8)]

    by_nr = {}
    by_desc = {}
    last_nr = {}      # nr -> {j: bytes}
    last_desc = {}    # (nr, a0) -> {j: bytes}
    desc_had_outs = set()
    recs = []
    prev_seq = 0
    prev_tid = 0
    stats = {"words_outputs": 0, "repeat_outputs": 0, "byte_outputs": 0, "empty_outputs": 0}
    for i in range(n):
        rec = Rec()
        dseq = heads.uvarint()
        rec.seq = (prev_seq + dseq) & M64
        if dseq == 0 or rec.seq < prev_seq:
            heads.err("record %d: seq %d not above %d" % (i, rec.seq, prev_seq))
        rec.tid = s64(prev_tid + heads.svarint())
        rec.nr = heads.svarint()
        mask = heads.u8()
        nout = heads.uvarint()
        npages = heads.uvarint()
        if nout * 2 > outs_s.left():
            outs_s.err("record %d (seq %d): %d outputs, outputs stream has %d bytes" %
                       (i, rec.seq, nout, outs_s.left()))
        if npages * 24 > pages_s.left():
            pages_s.err("record %d (seq %d): %d pages, pages stream has %d bytes" %
                        (i, rec.seq, npages, pages_s.left()))
        nr = rec.nr
        rn = by_nr.get(nr, ZERO_REC)
        a0 = rn.vals[0]
        if mask & 1:
            a0 = (a0 + vals[0].svarint()) & M64
        rd = by_desc.get((nr, a0), rn) if a0 < 65536 else rn
        rec.vals[0] = a0
        for k in range(1, 8):
            v = rd.vals[k]
            if mask >> k & 1:
                v = (v + vals[k].svarint()) & M64
            rec.vals[k] = v
        if a0 < 65536 and (nr, a0) in desc_had_outs:
            lastlist = last_desc.get((nr, a0), {})
        else:
            lastlist = last_nr.get(nr, {})
        for j in range(nout):
            base_addr = rd.outs[j][0] if j < len(rd.outs) else 0
            addr = (base_addr + outs_s.svarint()) & M64
            l2 = outs_s.uvarint()
            ln, rep = l2 >> 1, l2 & 1
            if rep:
                prevd = lastlist.get(j)
                if ln == 0 or prevd is None or len(prevd) != ln:
                    outs_s.err("record %d (seq %d) output %d: repeat of %s, length %d" %
                               (i, rec.seq, j, "nothing" if prevd is None else "%d bytes" % len(prevd), ln))
                d = prevd
                stats["repeat_outputs"] += 1
            elif ln in (8, 16) and j < len(rd.outs) and len(rd.outs[j][1]) == ln:
                ws = stream(4, nr)
                base = struct.unpack("<%dQ" % (ln // 8), rd.outs[j][1])
                d = struct.pack("<%dQ" % (ln // 8), *[(b + ws.svarint()) & M64 for b in base])
                stats["words_outputs"] += 1
            elif ln > 0:
                ds = stream(5, nr)
                if ln > ds.left():
                    ds.err("record %d (seq %d) output %d: %d bytes, data stream of nr %d has %d" %
                           (i, rec.seq, j, ln, nr, ds.left()))
                d = ds.take(ln)
                stats["byte_outputs"] += 1
            else:
                d = b""
                stats["empty_outputs"] += 1
            rec.outs.append((addr, d))
        seenp = set()
        for _ in range(npages):
            a = pages_s.u64()
            h = pages_s.hash()
            if a % PAGE:
                pages_s.err("record seq %d: page %#x not aligned" % (rec.seq, a))
            if a in seenp:
                pages_s.err("record seq %d: page %#x twice" % (rec.seq, a))
            seenp.add(a)
            rec.pages.append((a, h))
        by_nr[nr] = rec
        if a0 < 65536:
            by_desc[(nr, a0)] = rec
            if nout:
                desc_had_outs.add((nr, a0))
        for j, (_, d) in enumerate(rec.outs):
            if d:
                last_nr.setdefault(nr, {})[j] = d
                if a0 < 65536:
                    last_desc.setdefault((nr, a0), {})[j] = d
        prev_seq, prev_tid = rec.seq, rec.tid
        recs.append(rec)
    for (kind, key), st in streams.items():
        if st.left():
            st.err("stream (%d, %d): %d bytes left over after the last record" % (kind, key, st.left()))
    decode_syscl.stats = stats
    decode_syscl.streams = [(k, key, ln) for k, key, ln in dirent]
    return recs


# ---------------------------------------------------------------- SIGNL / ENDST

def decode_signl(r, minor_above):
    sigs = []
    n = r.count(8 + 8 + 8 + 4 + 216, "signals")
    prev = 0
    for _ in range(n):
        sg = {"seq": r.u64(), "tid": r.i64(), "signo": r.i64(), "siginfo": r.bytes(), "regs": r.regs()}
        if sg["seq"] < prev:
            r.err("signal seq %d below the previous %d" % (sg["seq"], prev))
        prev = sg["seq"]
        sigs.append(sg)
    for sg in sigs:
        sg["interval"] = r.i64()
        sg["handler"] = None
        if r.bool():
            h = {"regs": r.regs(), "xstate": r.bytes(), "sigmask": r.u64(), "frame_addr": r.u64(),
                 "frame": r.bytes()}
            h["digests"] = r.pagerefs("signal digests")
            if h["frame_addr"] != h["regs"][REG_NAMES.index("rsp")]:
                # FORMAT.md states it ("equal to the registers' rsp") but does not list it
                # among the reader's checks: a note, not an error.
                NOTES.append("SIGNL: signal seq %d: frame address %#x is not the handler's rsp %#x" %
                             (sg["seq"], h["frame_addr"], h["regs"][REG_NAMES.index("rsp")]))
            sg["handler"] = h
    r.end(minor_above)
    return sigs


def decode_endst(r, minor_above):
    e = {"kind": r.string(), "tid": r.i64(), "signo": r.i64(), "siginfo": r.bytes(),
         "exit_code": r.i64(), "regs": r.regs(), "xstate": r.bytes(), "last_seq": r.u64()}
    e["rseq"] = (r.u64(), r.u32(), r.u32())
    e["digests"] = r.pagerefs("ENDST digests")
    e["threads"] = decode_threads(r, "end threads")
    r.end(minor_above)
    return e


# ---------------------------------------------------------------- PGIDX / PAGES

def decode_index(ck, payload, base):
    r = Reader(payload, "PGIDX", base)
    n = r.count(24, "index")
    idx = {}
    prev = None
    blocks = ck.pages["blocks"]
    for _ in range(n):
        h = r.hash()
        b = r.u32()
        off = r.u32()
        if prev is not None and h <= prev:
            r.err("index not sorted by hash (or a hash twice)")
        if h == ZERO_HASH:
            r.err("index holds ZeroHash")
        prev = h
        if b >= len(blocks):
            r.err("block %d outside the block table (%d blocks)" % (b, len(blocks)))
        if off % PAGE or off + PAGE > blocks[b]["npages"] * PAGE:
            r.err("offset %d outside block %d's %d pages" % (off, b, blocks[b]["npages"]))
        idx[h] = (b, off)
    r.end(ck.minor > MINOR)
    # every indexed page: its content hashes to its hash
    used = {}
    for h, (b, off) in idx.items():
        content = ck.pages["content"][b][off:off + PAGE]
        if hashlib.sha256(content).digest()[:16] != h:
            raise FormatError("PAGES", blocks[b]["file_offset"],
                              "page at offset %d of block %d does not hash to %s" % (off, b, h.hex()))
        used.setdefault(b, set()).add(off)
    ck.pages["unindexed_pages"] = sum(bl["npages"] - len(used.get(i, ())) for i, bl in enumerate(blocks))
    return idx


def unmap_words(content, addrs):
    """FORMAT.md "Page words": the same mapping turns stored words back into content."""
    out = bytearray(content)
    W = PAGE
    for pi, a in enumerate(addrs):
        o = pi * PAGE
        ws = list(struct.unpack_from("<512Q", content, o))
        for i in range(512):
            s = ws[i]
            p = (a + 8 * i) & M64
            if (s - p + W) & M64 < 2 * W:
                ws[i] = (s - p + K63) & M64
            elif (s - K63 + W) & M64 < 2 * W:
                ws[i] = (s - K63 + p) & M64
        struct.pack_into("<512Q", out, o, *ws)
    return bytes(out)


def decode_pages(ck, payload, base):
    r = Reader(payload, "PAGES", base)
    nb = r.count(16, "block table")
    table = []
    for i in range(nb):
        table.append((r.u64(), r.u32(), r.u32()))
    words = bool(ck.flags & FLAG_PAGEWORDS)
    unit = PAGE + 8 if words else PAGE
    blocks = []
    contents = []
    dctx = zstandard.ZstdDecompressor()
    pos = r.p
    stored_total = 0
    for i, (off, sl, ul) in enumerate(table):
        where = base + off
        if off != pos:
            # FORMAT.md: "the stored blocks, in table order"; we require them end to end.
            raise FormatError("PAGES", base + 4 + 16 * i,
                              "block %d at payload offset %d, expected %d" % (i, off, pos))
        if off + sl > len(payload):
            raise FormatError("PAGES", base + 4 + 16 * i, "block %d runs past the payload" % i)
        if ul % unit or ul == 0 or ul // unit > 1024:
            raise FormatError("PAGES", base + 4 + 16 * i,
                              "block %d unpacked length %d is not 1..1024 x %d" % (i, ul, unit))
        if sl > ul:
            raise FormatError("PAGES", where, "block %d stored length %d above unpacked %d" % (i, sl, ul))
        raw = payload[off:off + sl]
        if sl < ul:
            if ul > 32768 * sl:
                raise FormatError("PAGES", where, "block %d cannot expand to %d" % (i, ul))
            try:
                obj = dctx.decompressobj()
                got = obj.decompress(raw)
                if not obj.eof or obj.unused_data:
                    raise zstandard.ZstdError("frame incomplete or followed by bytes")
            except zstandard.ZstdError as e:
                raise FormatError("PAGES", where, "block %d: zstd: %s" % (i, e))
            if len(got) != ul:
                raise FormatError("PAGES", where, "block %d unpacks to %d, not %d" % (i, len(got), ul))
            raw = got
        npages = ul // unit
        content = raw[:npages * PAGE]
        addrs = None
        if words:
            addrs = struct.unpack_from("<%dQ" % npages, raw, npages * PAGE)
            content = unmap_words(content, addrs)
        contents.append(content)
        blocks.append({"offset": off, "file_offset": where, "stored": sl, "unpacked": ul,
                       "npages": npages, "compressed": sl < ul, "addresses": addrs})
        stored_total += sl
        pos = off + sl
    if pos != len(payload):
        raise FormatError("PAGES", base + pos, "%d bytes after the last block" % (len(payload) - pos))
    return {"blocks": blocks, "content": contents, "stored_bytes": stored_total}


# ---------------------------------------------------------------- model rules

def check_model(ck, payloads):
    idx = ck.index

    def refs(lst, section, what):
        for a, h in lst:
            if h != ZERO_HASH and h not in idx:
                raise FormatError(section, payloads[{"INTVL": 2, "FINAL": 3, "SYSCL": 4}[section]][1],
                                  "%s: page %#x hash %s not in the index" % (what, a, h.hex()))

    for iv in ck.intervals:
        refs(iv["written"], "INTVL", "interval %d written" % iv["index"])
    refs(ck.final, "FINAL", "FINAL")
    for rec in ck.syscalls:
        refs(rec.pages, "SYSCL", "syscall %d pages" % rec.seq)
    # FORMAT.md "Page words": the writer stores a page relative to "the first address the
    # model refers to that content at" (intervals oldest first, then the final pages, then
    # mapped-file pages), or 0. Not a reader's check: counted, not an error.
    first = {}
    allrefs = {}
    order = [iv["written"] for iv in ck.intervals] + [ck.final] + [r.pages for r in ck.syscalls]
    for lst in order:
        for a, h in lst:
            first.setdefault(h, a)
            allrefs.setdefault(h, set()).add(a)
    not_ref = not_first = 0
    for h, (b, off) in idx.items():
        addrs = ck.pages["blocks"][b]["addresses"]
        if addrs is None:
            continue
        a = addrs[off // PAGE]
        if a != 0 and a not in allrefs.get(h, ()):
            not_ref += 1
        elif a != first.get(h, 0):
            not_first += 1
    ck.pages["word_base_unreferenced"] = not_ref
    ck.pages["word_base_not_first"] = not_first
    if ck.syscalls and ck.syscalls[0].seq < 1:
        raise FormatError("SYSCL", payloads[4][1], "first seq is 0")


# ---------------------------------------------------------------- summary

def hx(v):
    return "%#x" % v


def summary(ck, with_syscalls=False, with_pages=False):
    h = ck.header
    nr_counts = {}
    for r in ck.syscalls:
        nr_counts[r.nr] = nr_counts.get(r.nr, 0) + 1
    sig_by_iv = {}
    for s in ck.signals:
        sig_by_iv[s["interval"]] = sig_by_iv.get(s["interval"], 0) + 1
    e = ck.end
    si = e["siginfo"]
    pg = ck.pages
    out = {
        "version": "%d.%d" % (ck.major, ck.minor),
        "flags": ck.flags,
        "size": ck.size,
        "sections": [dict(s, raw_bytes=ck.raw_sizes.get(s["name"], {}).get("raw_length", s["bytes"]))
                     for s in ck.sections],
        "skipped_sections": ck.skipped,
        "notes": NOTES,
        "header": {
            "arch": h["arch"], "kernel": h["kernel"], "cpu_flags": len(h["cpu_flags"]),
            "hostname": h["hostname"], "exe": h["exe"], "build_id": h["build_id"],
            "cmdline": h["cmdline"], "pid": h["pid"], "backend": h["backend"],
            "interval_ns": h["interval_ns"], "full_pages": h["full_pages"],
            "page_set_note": h["page_set_note"], "start": h["start"], "dump": h["dump"],
            "reason": h["reason"], "lost": h["lost"], "schedule": h.get("schedule"),
            "modules": [dict(m, link_map=hx(m["link_map"]), load_bias=hx(m["load_bias"]),
                             dynamic=hx(m["dynamic"])) for m in h["modules"]],
            "thread_names": h["thread_names"],
            "xsave": h.get("xsave"),
        },
        "intervals": [{
            "index": iv["index"], "start": iv["start"], "end": iv["end"], "first_seq": iv["first_seq"],
            "replayable": iv["replayable"], "reason": iv["reason"], "start_omitted": iv["start_omitted"],
            "threads": len(iv["threads"]), "tids": [t["tid"] for t in iv["threads"]],
            "maps": len(iv["maps"]), "written": len(iv["written"]), "digests": len(iv["digests"]),
            "signals": sig_by_iv.get(iv["index"], 0),
            "regs": [dict(zip(REG_NAMES, map(hx, t["regs"]))) for t in iv["threads"]],
        } for iv in ck.intervals],
        "final": len(ck.final),
        "syscall_count": len(ck.syscalls),
        "syscall_counts": {str(k): v for k, v in sorted(nr_counts.items())},
        "syscall_streams": getattr(decode_syscl, "streams", []),
        "syscall_output_kinds": getattr(decode_syscl, "stats", {}),
        "signals": [{
            "seq": s["seq"], "tid": s["tid"], "signo": s["signo"], "interval": s["interval"],
            "handler": s["handler"] is not None,
            "si_code": struct.unpack_from("<i", s["siginfo"], 8)[0] if len(s["siginfo"]) >= 12 else None,
            "rip": hx(s["regs"][REG_NAMES.index("rip")]),
            "orig_rax": s64(s["regs"][REG_NAMES.index("orig_rax")]),
            "rax": s64(s["regs"][REG_NAMES.index("rax")]),
            "siginfo_len": len(s["siginfo"]),
            "handler_rip": hx(s["handler"]["regs"][REG_NAMES.index("rip")]) if s["handler"] else None,
            "handler_digests": len(s["handler"]["digests"]) if s["handler"] else 0,
            "frame_len": len(s["handler"]["frame"]) if s["handler"] else 0,
        } for s in ck.signals],
        "end": {
            "kind": e["kind"], "tid": e["tid"], "signo": e["signo"], "exit_code": e["exit_code"],
            "si_code": struct.unpack_from("<i", si, 8)[0] if len(si) >= 12 else None,
            "fault_addr": hx(struct.unpack_from("<Q", si, 16)[0]) if len(si) >= 24 else None,
            "siginfo_len": len(si),
            "regs": dict(zip(REG_NAMES, map(hx, e["regs"]))), "xstate_len": len(e["xstate"]),
            "last_seq": e["last_seq"], "rseq": [hx(e["rseq"][0]), e["rseq"][1], hx(e["rseq"][2])],
            "digests": len(e["digests"]), "threads": len(e["threads"]),
        },
        "pages": {
            "stored": len(ck.index),
            "blocks": len(pg["blocks"]),
            "compressed_blocks": sum(1 for b in pg["blocks"] if b["compressed"]),
            "pages_in_blocks": sum(b["npages"] for b in pg["blocks"]),
            "unindexed_pages": pg["unindexed_pages"],
            "word_base_unreferenced": pg.get("word_base_unreferenced", 0),
            "word_base_not_first": pg.get("word_base_not_first", 0),
            "raw_bytes": len(ck.index) * PAGE,
            "compressed_bytes": pg["stored_bytes"],
            "final": len(ck.final),
            "written": sum(len(iv["written"]) for iv in ck.intervals),
            "zero_page_refs": sum(1 for iv in ck.intervals for _, hh in iv["written"] if hh == ZERO_HASH)
            + sum(1 for _, hh in ck.final if hh == ZERO_HASH),
            "syscall_pages": sum(len(r.pages) for r in ck.syscalls),
            "content_sha256": hashlib.sha256(b"".join(
                ck.pages["content"][b][o:o + PAGE] for hh, (b, o) in sorted(ck.index.items()))).hexdigest(),
        },
    }
    if with_syscalls:
        out["syscalls"] = [{
            "seq": r.seq, "tid": r.tid, "nr": r.nr, "args": [hx(v) for v in r.vals[:6]],
            "ret": s64(r.vals[6]), "rip": hx(r.vals[7]),
            "outs": [[hx(a), d.hex()] for a, d in r.outs],
            "pages": [[hx(a), hh.hex()] for a, hh in r.pages],
        } for r in ck.syscalls]
    if with_pages:
        out["page_index"] = [[hh.hex(), b, o] for hh, (b, o) in sorted(ck.index.items())]
        out["final_refs"] = [[hx(a), hh.hex()] for a, hh in ck.final]
        out["written_refs"] = {str(iv["index"]): [[hx(a), hh.hex()] for a, hh in iv["written"]]
                               for iv in ck.intervals}
        out["end_digests"] = [[hx(a), hh.hex()] for a, hh in e["digests"]]
    return out


def main(argv):
    opts = {a for a in argv if a.startswith("--")}
    files = [a for a in argv if not a.startswith("--")]
    if len(files) != 1 or opts - {"--syscalls", "--pages", "--quiet"}:
        sys.stderr.write(__doc__)
        return 1
    try:
        ck = read_file(files[0])
    except FormatError as e:
        sys.stderr.write("tpcread: %s: invalid checkpoint: %s\n" % (files[0], e))
        return 2
    except OSError as e:
        sys.stderr.write("tpcread: %s\n" % e)
        return 2
    if "--quiet" not in opts:
        json.dump(summary(ck, "--syscalls" in opts, "--pages" in opts), sys.stdout, indent=1)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
