package flush

import (
	"context"
	"io"
)

// Verifier checks a source's content while Copy copies it, so that the
// source is opened once (through the job's confinement) and its bytes are
// read once and throttled once.
type Verifier interface {
	// Start is called once the source is open and matches the job, before
	// any byte is copied. src reads the open source (a small one's bytes,
	// read whole already, or a duplicate of its descriptor, an *os.File);
	// Start may read its structure through it but must not keep it past
	// the Check's Close.
	// It returns the data ranges to copy (nil: the job's own ranges, or
	// the whole file) and a Check that sees every byte copied (nil: the
	// verdict is already in and sound). An error stops the copy before
	// it begins; it is returned as is.
	Start(ctx context.Context, src io.ReaderAt, size int64) (Check, []Range, error)
}

// Check receives the bytes of the source as Copy reads them and gives the
// verdict before the copy is published.
type Check interface {
	// Feed hands over the bytes p at offset off. Pieces come in increasing
	// offset order; bytes never fed are holes (zeros). An error, the
	// verdict on a corrupt source, stops the copy.
	Feed(off int64, p []byte) error
	// Verdict is called once every byte of the source has been fed; the
	// copy is published only if it returns nil.
	Verdict() error
	// Close releases the check; it is called once, whatever happened.
	Close()
}

// refusal carries a Check's verdict met while a resumed copy's prefix is
// read, so that the caller removes the partial copy.
type refusal struct{ err error }

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }
