package main

import (
	"bytes"
	"context"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/scr-transferd/scr-transferd/internal/cliflag"
)

// examples ends scr-ctl --help, and is the EXAMPLES of its manual page.
const examples = `  scr-ctl status --watch /dev/shm/scr.1001/transfer.scrinfo
  scr-ctl set /dev/shm/scr.1001/transfer.scrinfo bw 200M
  scr-ctl run --wait --timeout 30m /dev/shm/scr.1001/transfer.scrinfo
  scr-ctl add /dev/shm/scr.1001/transfer.scrinfo /dev/shm/ckpt.0 /p/lustre/me/ckpt.0
  scr-ctl verify /dev/shm/scr.1001/scr.dataset.3/*.sion
  scr-ctl demo`

// placeholders name the values of scr-ctl's flags in --help where their
// type does not.
func placeholders() map[string]string {
	return map[string]string{"locking": "MODE", "size": "SIZE", "dir": "DIR", "bw": "RATE", "width": "N", "indent": "N"}
}

// manPage writes scr-ctl's manual page, made of the texts of
// scr-ctl --help and of each command's --help (docs/man/scr-ctl.1).
func manPage(w io.Writer) int {
	cmds := commands()
	var top bytes.Buffer
	printUsage(&top, cmds)
	_, desc, _ := strings.Cut(top.String(), "\n") // after the usage line
	desc, _, _ = strings.Cut(desc, "\nExamples:\n")
	h := cliflag.Help{
		Name:        "scr-ctl",
		Synopsis:    "COMMAND [flags] [args]",
		Summary:     "drive and inspect scr-transferd through SCR's transfer file",
		Description: desc,
	}
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var out bytes.Buffer
		e := &env{ctx: context.Background(), stdout: &out, stderr: io.Discard, now: time.Now,
			term: func() (bool, int, int) { return false, 0, 0 }}
		_ = cmds[n].run(e, []string{"--help"})
		h.Sections = append(h.Sections, cliflag.Section{Title: "scr-ctl " + n, Body: out.String()})
	}
	h.Sections = append(h.Sections, cliflag.Section{Title: "Examples", Body: examples},
		cliflag.Section{Title: "See also", Body: "scr-transferd(1)"})
	h.Man(w, nil, "scr-ctl")
	return exitOK
}
