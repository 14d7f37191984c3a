package cache

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// A name can claim a format. Content decides the kind of a file; but when a
// file's content matches no format while its name says it holds one, the
// name is a claim the content must back, and the file is reported as a
// damaged file of the claimed kind rather than flushed as a plain one: a
// SIONlib or LIME file whose magic number was overwritten, or an FTI-FF file
// cut before its meta. These names claim a format:
//
//	*.fti                              FTI-FF (FTI's checkpoint files)
//	*.sion, *.sion.NNNNNN              SIONlib (a container, a member of a multi-file set)
//	*.lime, *.ildg, *.scidac (+ .volNNNN)  LIME/SciDAC (ILDG and QIO files, partition volumes)
//
// A file merely named so (a plain file called x.sion) is refused like a
// damaged one; flush such files with verification off.
var nameClaims = []struct {
	kind Kind
	re   *regexp.Regexp
	what string // for messages
}{
	{FTIFF, regexp.MustCompile(`\.fti$`), "an FTI checkpoint (*.fti)"},
	{SION, regexp.MustCompile(`\.sion(\.[0-9]{6})?$`), "a SIONlib file (*.sion)"},
	{LIME, regexp.MustCompile(`\.(lime|ildg|scidac)(\.vol[0-9]{4})?$`), "a LIME/SciDAC file (*.lime, *.ildg, *.scidac)"},
}

// claimedKind returns the kind the name of path claims, if any.
func claimedKind(path string) (Kind, string, bool) {
	base := strings.ToLower(filepath.Base(path))
	for _, c := range nameClaims {
		if c.re.MatchString(base) {
			return c.kind, c.what, true
		}
	}
	return "", "", false
}

// claimError is the verdict on a file whose content matched no format while
// its name claims kind.
func claimError(path string, size int64, kind Kind, what string) *FormatError {
	if kind == FTIFF {
		return &FormatError{Path: path, Kind: FTIFF, Code: "E_META_HASH", Offset: max(size-ftiMetaSize, 0),
			Msg: "named as " + what + " but no FTI-FF file meta ends it: truncated, or not written in FTI-FF mode (use --verify=off for FTI's other I/O modes)"}
	}
	magic := map[Kind]string{SION: sionMagic, LIME: limeMagicBytes}[kind]
	return &FormatError{Path: path, Kind: kind, Code: "E_BAD_MAGIC", Offset: 0,
		Msg: fmt.Sprintf("named as %s but it does not start with the magic number %q and no %s structure was found: damaged, or not %s (use --verify=off for files merely named so)",
			what, magic, kind, kind)}
}
