package parallel

import (
	"errors"
	"sync/atomic"
	"testing"
)

func TestEachRunsEveryIndexOnce(t *testing.T) {
	const n = 1000
	var seen [n]atomic.Int32
	if err := Each(n, func(i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if got := seen[i].Load(); got != 1 {
			t.Fatalf("index %d ran %d times", i, got)
		}
	}
	if err := Each(0, func(int) error { t.Fatal("ran with n = 0"); return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestEachJoinsErrors(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	err := Each(10, func(i int) error {
		switch i {
		case 3:
			return a
		case 7:
			return b
		}
		return nil
	})
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("got %v, want both errors", err)
	}
}
