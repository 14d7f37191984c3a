// Package version says which build of scr-transferd and scr-ctl is
// running: the module version and the version-control revision the Go
// toolchain records in every binary built from a clone (go build and go
// install stamp vcs.revision, vcs.time and vcs.modified), so that a site
// can tell which commit runs on its nodes. Packagers who build outside a
// clone set the values at link time:
//
//	go build -ldflags "-X github.com/scr-transferd/scr-transferd/internal/version.version=1.4.0 \
//	    -X github.com/scr-transferd/scr-transferd/internal/version.revision=$REV" ./cmd/...
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Set only by the linker (-ldflags -X); a string variable is the one form
// -X can set. Nothing assigns them at run time.
var (
	version  string
	revision string
)

// Info describes a build.
type Info struct {
	Version   string // module version, e.g. "v1.4.0" or "v0.0.0-20261123050505-0123456789ab"; "(devel)" if unknown
	Revision  string // version-control revision (a full commit hash); "" if unknown
	Time      string // commit time of Revision (RFC 3339); "" if unknown
	Modified  bool   // the working tree had uncommitted changes
	GoVersion string // the toolchain that built it
}

// Get returns the running binary's build information, with the link-time
// values taking precedence over what the toolchain recorded.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(bi, version, revision)
}

// get reads bi (nil if the binary has none) under the link-time values.
func get(bi *debug.BuildInfo, ldVersion, ldRevision string) Info {
	info := Info{Version: "(devel)"}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if ldVersion != "" {
		info.Version = ldVersion
	}
	if ldRevision != "" {
		info.Revision, info.Time, info.Modified = ldRevision, "", false
	}
	return info
}

// String is the one line printed by --version, e.g.
// "v1.4.0 (revision 0123456789ab, 2026-11-23T05:05:05Z, modified; go1.26.8)".
func (i Info) String() string {
	var details []string
	if i.Revision != "" {
		details = append(details, "revision "+i.Revision)
	}
	if i.Time != "" {
		details = append(details, i.Time)
	}
	if i.Modified {
		details = append(details, "modified")
	}
	s := i.Version
	if len(details) > 0 {
		s += " (" + strings.Join(details, ", ")
		if i.GoVersion != "" {
			s += "; " + i.GoVersion
		}
		s += ")"
	} else if i.GoVersion != "" {
		s += fmt.Sprintf(" (%s)", i.GoVersion)
	}
	return s
}
