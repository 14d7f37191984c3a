package eintr

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// interrupted returns a call that fails with EINTR (as given) times times,
// then returns last, and the count of calls made.
func interrupted(times int, eintr, last error) (func() (int, error), *int) {
	calls := 0
	return func() (int, error) {
		calls++
		if calls <= times {
			return -1, eintr
		}
		return calls, last
	}, &calls
}

// TestDoAndValue: a call interrupted any number of times is made again
// until it returns something else, which is returned as it is; an EINTR
// wrapped in an error counts as one.
func TestDoAndValue(t *testing.T) {
	other := errors.New("other")
	for _, tc := range []struct {
		name  string
		times int
		eintr error
		last  error
	}{
		{"at once", 0, unix.EINTR, nil},
		{"once", 1, unix.EINTR, nil},
		{"many", 1000, unix.EINTR, nil},
		{"then another error", 3, unix.EINTR, other},
		{"wrapped", 2, fmt.Errorf("fsync: %w", unix.EINTR), unix.EIO},
		{"another error at once", 0, unix.EINTR, unix.ENOSPC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, calls := interrupted(tc.times, tc.eintr, tc.last)
			v, err := Value(f)
			if !errors.Is(err, tc.last) || (tc.last == nil && err != nil) || v != tc.times+1 || *calls != tc.times+1 {
				t.Errorf("Value: %d, %v after %d calls; want %d, %v after %d", v, err, *calls, tc.times+1, tc.last, tc.times+1)
			}
			g, calls := interrupted(tc.times, tc.eintr, tc.last)
			err = Do(func() error { _, err := g(); return err })
			if !errors.Is(err, tc.last) || (tc.last == nil && err != nil) || *calls != tc.times+1 {
				t.Errorf("Do: %v after %d calls; want %v after %d", err, *calls, tc.last, tc.times+1)
			}
		})
	}
}
