package transfer

import "github.com/scr-transferd/scr-transferd/hashfile"

// SetWarning records msg as the file's WARNING ("" clears it): a finding
// about a file that was flushed all the same, such as a SIONlib container
// with stray bytes after its metadata, or an FTI-FF checkpoint FTI 1.6
// itself will refuse on restart. It is stored as SetError stores an ERROR.
// It reports false if the entry is gone.
func SetWarning(t *hashfile.Tree, src, msg string) bool {
	e := t.Lookup(KeyFiles, src)
	if e == nil {
		return false
	}
	setMessage(e, KeyWarning, msg)
	return true
}
