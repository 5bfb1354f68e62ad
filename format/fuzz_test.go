package format

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteSeeds checks the committed files in testdata/ still decode to the
// models they were made from (an old file must stay readable); with -update it
// writes them again.
func TestWriteSeeds(t *testing.T) {
	small, store := smallCheckpointV6()
	small7, _ := smallCheckpointV6()
	small.Header.Schedule = ScheduleLate // version 7.1
	small71, _ := smallCheckpointV6()
	small71.Header.Schedule = ScheduleLate
	small.Header.XSave = []XComponent{{2, 576, 256}, {5, 832, 64}, {6, 896, 512}, {7, 1408, 1024}} // version 7.2
	small5, _ := smallCheckpointV5()
	old, _ := smallCheckpoint()
	old = legacy(old)
	seeds := []struct {
		name  string
		c     *Checkpoint
		pages PageSource
	}{
		{"small.tpc", small, store},
		{"empty.tpc", &Checkpoint{}, nil},
	}
	// small-1.0.tpc was written by version 1.0 of the writer (fixed-width
	// syscall log), small-2.0.tpc by version 2.0 (lz4), small-2.1.tpc by
	// version 2.1 (every interval start stored), small-3.0.tpc by version
	// 3.0 (signals without deliveries), small-3.1.tpc by version 3.1 (one
	// stream of syscall records), small-4.0.tpc by version 4.0 (no other
	// threads at the end), small-4.1.tpc by version 4.1 (no loader's list
	// of objects), small-4.2.tpc by version 4.2 (no repeated outputs),
	// small-5.0.tpc by version 5.0 (page words stored as they are),
	// small-5.1.tpc by version 5.1 (repeats of the compared record's
	// outputs), small-6.0.tpc by version 6.0 (the last outputs by number
	// kept in the slot of another key, smallCheckpointV6), small-7.0.tpc by
	// version 7.0 (no thread schedule), small-7.1.tpc by version 7.1 (no
	// XSAVE layout); they are never
	// rewritten: files of those versions must
	// stay readable.
	frozen := map[string]bool{"small-1.0.tpc": true, "small-2.0.tpc": true, "small-2.1.tpc": true, "small-3.0.tpc": true, "small-3.1.tpc": true, "small-4.0.tpc": true, "small-4.1.tpc": true, "small-4.2.tpc": true, "small-5.0.tpc": true, "small-5.1.tpc": true, "small-6.0.tpc": true, "small-7.0.tpc": true, "small-7.1.tpc": true}
	for name := range frozen {
		if name == "small-5.0.tpc" || name == "small-5.1.tpc" || name == "small-6.0.tpc" || name == "small-7.0.tpc" || name == "small-7.1.tpc" {
			c := small5
			if name == "small-6.0.tpc" || name == "small-7.0.tpc" {
				c = small7
			}
			if name == "small-7.1.tpc" {
				c = small71
			}
			seeds = append(seeds, struct {
				name  string
				c     *Checkpoint
				pages PageSource
			}{name, c, store})
			continue
		}
		c := old
		if name == "small-3.0.tpc" {
			// Version 3.0: signals without their deliveries.
			c, _ = smallCheckpointV3()
			c = noDeliveries(c)
		}
		if name == "small-3.1.tpc" || name == "small-4.0.tpc" || name == "small-4.1.tpc" || name == "small-4.2.tpc" {
			c, _ = smallCheckpointV3()
		}
		if name != "small-4.1.tpc" && name != "small-4.2.tpc" {
			c = noEndThreads(c)
		}
		if name != "small-4.2.tpc" {
			c.Header.Modules, c.Header.ThreadNames = nil, nil
		}
		seeds = append(seeds, struct {
			name  string
			c     *Checkpoint
			pages PageSource
		}{name, c, store})
	}
	for _, s := range seeds {
		path := filepath.Join("testdata", s.name)
		if *update && !frozen[s.name] {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Write(path, s.c, s.pages); err != nil {
				t.Fatal(err)
			}
			// Seeds are test data, not a process's memory: readable by all.
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		f, err := Open(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -run TestWriteSeeds -update after a deliberate format change)", path, err)
		}
		if err := sameCheckpoint(s.c, f.Checkpoint); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, h := range referenced(s.c) {
			want, _ := s.pages.Page(h)
			if got, err := f.Page(h); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: page %x: %v", path, h, err)
			}
		}
		f.Close()
	}
}

// FuzzDecode: whatever the bytes, Decode returns a File or a *FormatError,
// never panics; a File's pages read back or fail with a FormatError, and its
// model re-encodes to a file that decodes to the same model.
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.tpc"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	small, store := smallCheckpointV5()
	f.Add(encode(f, small, store))
	f.Add(encode(f, &Checkpoint{}, nil))
	secs, err := buildSections(small, store)
	if err != nil {
		f.Fatal(err)
	}
	var withUnknown bytes.Buffer
	writeSections(&withUnknown, append(secs, section{0x77, []byte("extra")}))
	f.Add(withUnknown.Bytes())
	f.Add([]byte(Magic))

	f.Fuzz(checkDecoded)
}

// checkDecoded is the property both fuzz targets check on any input.
func checkDecoded(t *testing.T, b []byte) {
	file, err := decodeBytes(b)
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFormat) {
			t.Fatalf("error %T is not a FormatError: %v", err, err)
		}
		if file != nil {
			t.Fatal("both a File and an error")
		}
		return
	}
	defer file.Close()
	pagesOK := true
	for _, h := range referenced(file.Checkpoint) {
		p, err := file.Page(h)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Page(%x): %v", h, err)
			}
			pagesOK = false
			continue
		}
		if HashPage(p) != h {
			t.Fatalf("Page(%x) returned other content", h)
		}
	}
	if !pagesOK {
		return
	}
	var out bytes.Buffer
	if err := Encode(&out, file.Checkpoint, file); err != nil {
		t.Fatalf("re-encode a decoded checkpoint: %v", err)
	}
	again, err := decodeBytes(out.Bytes())
	if err != nil {
		t.Fatalf("decode the re-encoding: %v", err)
	}
	if err := sameCheckpoint(file.Checkpoint, again.Checkpoint); err != nil {
		t.Fatalf("re-encoding changed the model: %v", err)
	}
}

// FuzzSectionPayload mutates the payload of one section of a valid file and
// frames it again with correct CRCs and lengths, so that the fuzzer reaches
// the section decoders behind the checks a random mutation almost never
// passes (FuzzDecode mostly meets CRC errors).
func FuzzSectionPayload(f *testing.F) {
	small, store := smallCheckpoint()
	secs, err := buildSections(small, store)
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range secs {
		f.Add(uint8(i), s.payload)
	}
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		mod := append([]section(nil), secs...)
		mod[int(which)%len(mod)] = section{mod[int(which)%len(mod)].typ, payload}
		var b bytes.Buffer
		if err := writeSections(&b, mod); err != nil {
			t.Fatal(err)
		}
		checkDecoded(t, b.Bytes())
	})
}
