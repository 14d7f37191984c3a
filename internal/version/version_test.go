package version

import (
	"runtime/debug"
	"testing"
)

func TestGet(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/scr-transferd/scr-transferd", Version: "v0.0.0-20261123051538-c7f1d501104a"},
		Settings: []debug.BuildSetting{
			{Key: "-buildmode", Value: "exe"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "c7f1d501104a4d2dfae64c4439c9eb9e5faaa2a9"},
			{Key: "vcs.time", Value: "2026-11-23T05:15:38Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name         string
		bi           *debug.BuildInfo
		ldVer, ldRev string
		want         Info
	}{
		{"no build information", nil, "", "", Info{Version: "(devel)"}},
		{"devel build without VCS", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "", "",
			Info{Version: "(devel)", GoVersion: "go1.26.8"}},
		{"stamped by the toolchain", stamped, "", "",
			Info{Version: "v0.0.0-20261123051538-c7f1d501104a", Revision: "c7f1d501104a4d2dfae64c4439c9eb9e5faaa2a9",
				Time: "2026-11-23T05:15:38Z", Modified: true, GoVersion: "go1.26.8"}},
		{"packager's version", stamped, "1.4.0", "", Info{Version: "1.4.0", Revision: "c7f1d501104a4d2dfae64c4439c9eb9e5faaa2a9",
			Time: "2026-11-23T05:15:38Z", Modified: true, GoVersion: "go1.26.8"}},
		{"packager's version and revision", stamped, "1.4.0", "0123abc", Info{Version: "1.4.0", Revision: "0123abc", GoVersion: "go1.26.8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(tc.bi, tc.ldVer, tc.ldRev); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   Info
		want string
	}{
		{Info{Version: "(devel)"}, "(devel)"},
		{Info{Version: "(devel)", GoVersion: "go1.26"}, "(devel) (go1.26)"},
		{Info{Version: "v1.0.0", Revision: "abc", Time: "2026-11-23T05:05:05Z", Modified: true, GoVersion: "go1.26"},
			"v1.0.0 (revision abc, 2026-11-23T05:05:05Z, modified; go1.26)"},
	}
	for _, tc := range tests {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.in, got, tc.want)
		}
	}
}
