package daemon

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/flush"
)

// checkpointVerifier is the flush.Verifier of --verify=before: cache checks
// the checkpoint on the descriptor the copy opened beneath --allow-src, its
// structure before the copy and its hashes as the bytes stream through the
// copy. Companion files (the other members of a SIONlib set, the other
// volumes of a LIME partition set) are opened beneath the same prefix by
// the rule the copy opens its source by (package beneath).
type checkpointVerifier struct {
	path string                      // the source, for messages and companions
	root string                      // the confining --allow-src prefix, "/" when none
	pace func(context.Context) error // the throttle's pacing of reads the copy does not do
	bufs *cache.Buffers              // the daemon's, shared by the checks of all files
	rep  *cache.Report               // the verdict on a sound file, once known
}

// Start implements flush.Verifier.
func (v *checkpointVerifier) Start(ctx context.Context, src io.ReaderAt, size int64) (flush.Check, []flush.Range, error) {
	c := cache.StartCheck(ctx, src, size, v.path, cache.Options{Pace: v.pace, RootDir: v.root, Buffers: v.bufs})
	chk := &streamCheck{v: v, c: c}
	rep, err, done := c.Early()
	if !done {
		return chk, nil, nil
	}
	chk.Close()
	if err != nil {
		return nil, nil, checkError(err)
	}
	v.rep = rep
	if rep.Kind != cache.SION {
		return nil, nil, nil
	}
	// A SIONlib container is copied as its data ranges, holes elsewhere.
	return nil, slices.Clone(rep.Ranges), nil
}

// warnings joins the warnings of a sound verdict; "" without one, or
// without a verifier.
func (v *checkpointVerifier) warnings() string {
	if v == nil || v.rep == nil {
		return ""
	}
	return strings.Join(v.rep.Warnings, "; ")
}

// checkError names the verification in an error.
func checkError(err error) error { return fmt.Errorf("checking the checkpoint: %w", err) }

// streamCheck adapts a cache.Check to flush.Check.
type streamCheck struct {
	v *checkpointVerifier
	c *cache.Check
}

func (s *streamCheck) Feed(off int64, p []byte) error {
	if err := s.c.Feed(off, p); err != nil {
		return checkError(err)
	}
	return nil
}

func (s *streamCheck) Verdict() error {
	rep, err := s.c.Wait()
	if err != nil {
		return checkError(err)
	}
	s.v.rep = rep
	return nil
}

func (s *streamCheck) Close() {
	s.c.Close()
}
