package hashfile

import (
	"context"
	"fmt"
	"os"
)

// Replace rewrites an existing file, under the same exclusive lock as
// Update, with the tree fn makes from the file's raw bytes, whatever they
// hold: unlike Update, an image that does not decode reaches fn. It is the
// way out of a corrupt file (scr-ctl repair). fn may keep raw; returning a
// nil tree writes nothing. The new image is written in place and synced
// as Update writes.
func (s *Store) Replace(ctx context.Context, fn func(raw []byte) (*Tree, error)) (wrote bool, err error) {
	if err := s.acquire(ctx); err != nil {
		return false, err
	}
	defer s.release()
	f, err := s.open(os.O_RDWR)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := s.lock(ctx, f, true); err != nil {
		return false, fmt.Errorf("%s: %w", s.path, err)
	}
	raw, err := readAll(f, nil)
	if err != nil {
		return false, fmt.Errorf("%s: read: %w", s.path, err)
	}
	s.tree, s.buf = nil, nil
	t, err := fn(raw)
	if err != nil || t == nil {
		return false, err
	}
	if err := s.writeImage(f, Encode(t), 0, len(raw)); err != nil { // journaled, as Update
		return false, &WriteError{Path: s.path, Err: err, Rewrites: s.rewrites.Load()}
	}
	s.rewrites.Add(1)
	s.remember(f)
	return true, nil
}
