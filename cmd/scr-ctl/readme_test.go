package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// readmeRows returns the rows of the README's scr-ctl command table:
// command name -> cells (usage, flags, description), with "\|" unescaped.
func readmeRows(t *testing.T) map[string][]string {
	t.Helper()
	return tableRows(t, "../../README.md")
}

// tableRows returns the rows of the scr-ctl command table of the markdown
// file at path, which must have a "## scr-ctl" section.
func tableRows(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## scr-ctl\n")
	if i < 0 {
		t.Fatalf("%s: no \"## scr-ctl\" section", path)
	}
	s = s[i+1:]
	if j := strings.Index(s[1:], "\n## "); j >= 0 {
		s = s[:j+1]
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		line = strings.ReplaceAll(line, `\|`, "\x00")
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		usage := strings.Trim(cells[0], "`")
		name, _, _ := strings.Cut(usage, " ")
		rows[name] = append([]string{usage}, cells[1:]...)
	}
	return rows
}

// helpFlags returns the flags listed by "scr-ctl NAME --help", and its
// usage line without "usage: scr-ctl ".
func helpFlags(t *testing.T, name string) (usage string, flags []string) {
	t.Helper()
	r := inproc(context.Background(), name, "--help")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("%s --help: %v", name, r)
	}
	first, rest, _ := strings.Cut(r.stdout, "\n")
	_, section, ok := strings.Cut(rest, "\nFlags:\n")
	if ok {
		for _, m := range regexp.MustCompile(`(?m)^  --?(\S+)`).FindAllStringSubmatch(section, -1) {
			flags = append(flags, m[1])
		}
	}
	sort.Strings(flags)
	return strings.TrimPrefix(first, "usage: scr-ctl "), flags
}

// TestReadmeMatchesHelp: the README's command table has one row per
// command, whose usage is the one --help prints and whose flags column
// lists exactly the flags --help lists.
func TestReadmeMatchesHelp(t *testing.T) {
	rows := readmeRows(t)
	for name := range commands() {
		row, ok := rows[name]
		if !ok {
			t.Errorf("README: no row for scr-ctl %s", name)
			continue
		}
		usage, flags := helpFlags(t, name)
		if row[0] != usage {
			t.Errorf("README row of %s: usage %q, --help says %q", name, row[0], usage)
		}
		if len(row) != 3 {
			t.Errorf("README row of %s: want 3 cells (command, flags, what it does), got %d", name, len(row))
			continue
		}
		var listed []string
		for _, m := range regexp.MustCompile("`--([a-z-]+)").FindAllStringSubmatch(row[1], -1) {
			listed = append(listed, m[1])
		}
		sort.Strings(listed)
		if !slices.Equal(listed, flags) {
			t.Errorf("README row of %s lists flags %v; --help lists %v: keep them the same", name, listed, flags)
		}
	}
	for name := range rows {
		if _, ok := commands()[name]; !ok {
			t.Errorf("README: row for %q, which is no scr-ctl command", name)
		}
	}
}

// TestEachHelpIsItsOwn: every command's --help is its own text, to stdout.
func TestEachHelpIsItsOwn(t *testing.T) {
	seen := map[string]string{}
	for name := range commands() {
		r := inproc(context.Background(), name, "--help")
		wantCode(t, r, exitOK, name+" --help")
		if !strings.HasPrefix(r.stdout, "usage: scr-ctl "+name+" ") {
			t.Errorf("%s --help starts %q", name, r.stdout[:min(len(r.stdout), 40)])
		}
		// The text between the summary and the flags.
		body, _, _ := strings.Cut(r.stdout, "\nFlags:\n")
		if parts := strings.SplitN(body, "\n\n", 3); len(parts) == 3 {
			body = parts[2]
		} else {
			continue // no text beyond the summary
		}
		if other, ok := seen[body]; ok {
			t.Errorf("%s --help has the same text as %s --help", name, other)
		}
		seen[body] = name
	}
}
