package format

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error the reader returns wraps one of them, so a caller
// can tell a damaged file (exit status 2) from anything else with errors.Is.
var (
	ErrFormat = errors.New("format: invalid checkpoint")
	ErrNoPage = errors.New("format: page not in checkpoint")
)

// FormatError names the section and byte offset where a file stopped making sense.
type FormatError struct {
	Section string
	Offset  int64
	Msg     string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("checkpoint: section %s at byte %d: %s", e.Section, e.Offset, e.Msg)
}

// Unwrap makes every FormatError match ErrFormat.
func (e *FormatError) Unwrap() error { return ErrFormat }
