// Package docs holds the project's reference documentation. Its tests keep
// the documents usable: the README short enough to read and starting with
// its contents, its test command the one CI runs, and every link between
// the documents leading somewhere.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// readmeMax is the most bytes the README may hold: it is the user's
// contract, read in a few minutes; detail belongs in docs/.
const readmeMax = 20000

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeSize: the README stays within readmeMax bytes.
func TestReadmeSize(t *testing.T) {
	if n := len(read(t, "../README.md")); n > readmeMax {
		t.Errorf("README.md holds %d bytes, more than %d: move detail to docs/", n, readmeMax)
	}
}

// TestReadmeFirstScreen: the README's first 30 lines link to the sections a
// site engineer looks for first.
func TestReadmeFirstScreen(t *testing.T) {
	lines := strings.SplitN(read(t, "../README.md"), "\n", 31)
	first := strings.Join(lines[:min(len(lines), 30)], "\n")
	for _, want := range []string{"#install", "#quick-start", "#daemon-flags", "#metrics", "#when-something-goes-wrong"} {
		if !strings.Contains(first, "]("+want+")") {
			t.Errorf("README.md: no link to %s in its first 30 lines", want)
		}
	}
}

// TestReadmeTestCommandIsCIs: the README's test command is the one .ci/run
// runs, word for word.
func TestReadmeTestCommandIsCIs(t *testing.T) {
	const cmd = "go test -race -count=1 -timeout 60m ./..."
	if !strings.Contains(read(t, "../README.md"), "`"+cmd+"`") {
		t.Errorf("README.md does not give the test command `%s`", cmd)
	}
	ci := read(t, "../.ci/run")
	found := false
	for _, line := range strings.Split(ci, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), cmd+" ") {
			found = true
		}
	}
	if !found {
		t.Errorf(".ci/run does not run %q as the README says", cmd)
	}
}

// markdownFiles lists the documents whose links are checked: the README,
// the changelog and docs/*.md (docs/pending/ holds drafts, not checked).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(files, "../README.md", "../CHANGELOG.md")
}

// TestLinksLeadSomewhere: every relative link in the documents names a file
// that exists and, with a #fragment, a heading of that file.
func TestLinksLeadSomewhere(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range markdownFiles(t) {
		for n, line := range proseLines(read(t, f)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				if err := checkLink(f, m[1]); err != "" {
					t.Errorf("%s:%d: link %s: %s", f, n, m[1], err)
				}
			}
		}
	}
}

// proseLines returns the lines of a Markdown text outside fenced code
// blocks, keyed by their line number.
func proseLines(text string) map[int]string {
	out := map[int]string{}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out[i+1] = line
		}
	}
	return out
}

// checkLink tells what is wrong with target, a link found in file from, or
// "" if nothing is. Links to other sites are not followed.
func checkLink(from, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, frag, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		dest = filepath.Join(filepath.Dir(from), path)
	}
	b, err := os.ReadFile(dest)
	if err != nil {
		if st, serr := os.Stat(dest); serr == nil && st.IsDir() && frag == "" {
			return ""
		}
		return "no such file"
	}
	if frag == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	for _, h := range headings(string(b)) {
		if slug(h) == frag {
			return ""
		}
	}
	return "no heading #" + frag
}

// headings returns the texts of the Markdown headings outside code blocks.
func headings(text string) []string {
	var out []string
	for _, line := range proseLines(text) {
		if t := strings.TrimLeft(line, "#"); t != line && strings.HasPrefix(t, " ") {
			out = append(out, strings.TrimSpace(t))
		}
	}
	return out
}

// slug is the fragment GitHub gives a heading: lower case, every rune but
// letters, digits, marks, hyphens and underscores dropped, spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestSlug pins slug to the fragments GitHub makes.
func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"status --json", "status---json"},
		{"A file's state", "a-files-state"},
		{"When something goes wrong", "when-something-goes-wrong"},
		{"Crash: SIGKILL at random moments", "crash-sigkill-at-random-moments"},
		{"add, set, print, verify, demo", "add-set-print-verify-demo"},
		{"Messages → meaning", "messages--meaning"},
		{"Field tests: the deployment files under real Slurm and systemd", "field-tests-the-deployment-files-under-real-slurm-and-systemd"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestCheckLink: checkLink finds a missing file and a missing heading.
func TestCheckLink(t *testing.T) {
	for _, tc := range []struct {
		target string
		bad    bool
	}{
		{"DESIGN.md", false},
		{"DESIGN.md#invariants", false},
		{"DESIGN.md#no-such-heading", true},
		{"NO-SUCH-FILE.md", true},
		{"../README.md#metrics", false},
		{"https://example.org/x", false},
	} {
		if got := checkLink("TESTING.md", tc.target); (got != "") != tc.bad {
			t.Errorf("checkLink(TESTING.md, %q) = %q, want bad=%v", tc.target, got, tc.bad)
		}
	}
}
