package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestControlDir(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		dir     string
		create  bool
		wantErr error // nil: no error; errAny: some other error
		exists  bool  // the directory exists afterwards
	}{
		{name: "exists", dir: root, exists: true},
		{name: "missing", dir: filepath.Join(root, "a", "b"), wantErr: ErrNoControlDir},
		{name: "missing, created", dir: filepath.Join(root, "c", "d"), create: true, exists: true},
		{name: "a file", dir: file, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := controlDir(tc.dir, tc.create)
			switch {
			case tc.wantErr == nil && err != nil, tc.wantErr != nil && err == nil:
				t.Fatalf("controlDir(%s, %v) = %v; want %v", tc.dir, tc.create, err, tc.wantErr)
			case tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("controlDir(%s) = %v; want %v", tc.dir, err, tc.wantErr)
			}
			fi, serr := os.Stat(tc.dir)
			if exists := serr == nil && fi.IsDir(); exists != tc.exists {
				t.Errorf("directory exists afterwards: %v; want %v", exists, tc.exists)
			}
		})
	}
}

// errAny stands for any error in TestControlDir.
var errAny = errors.New("any error")
