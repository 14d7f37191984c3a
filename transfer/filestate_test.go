package transfer

import (
	"errors"
	"testing"
)

func TestFileState(t *testing.T) {
	bad := errors.New("no DESTINATION")
	for _, tc := range []struct {
		name string
		f    File
		want FileState
	}{
		{"nothing written", File{Size: 10}, StatePending},
		{"part written", File{Size: 10, Written: 4}, StatePending},
		{"all written", File{Size: 10, Written: 10}, StateComplete},
		{"written beyond size is copied again", File{Size: 10, Written: 11}, StatePending},
		{"empty file not created yet", File{}, StatePending},
		{"empty file created", File{HasCRC: true}, StateComplete},
		{"error while pending", File{Size: 10, Written: 4, Error: "ENOENT"}, StateError},
		{"error outranks written = size", File{Size: 10, Written: 10, Error: "destination changed"}, StateError},
		{"malformed entry", File{Size: 10, Problem: bad}, StateInvalid},
		{"refused by the daemon", File{Size: 10, Error: Refused(errors.New("source outside the allowed prefixes"))}, StateInvalid},
		{"malformed outranks error", File{Size: 10, Written: 10, Error: "refused", Problem: bad}, StateInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.State(); got != tc.want {
				t.Fatalf("State() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFileStateNames(t *testing.T) {
	for s, want := range map[FileState]string{
		StatePending: "pending", StateComplete: "complete", StateError: "error", StateInvalid: "invalid",
	} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", int(s), s.String(), want)
		}
	}
	v := View{Files: []File{{Size: 1}, {Size: 1, Written: 1}, {Size: 1, Error: "x"}, {Problem: errors.New("x")}, {Size: 2}}}
	if got := v.Count(); got != [4]int{2, 1, 1, 1} {
		t.Fatalf("Count() = %v", got)
	}
}
