package cliflag

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Help is a command's help: printed by --help (Text) and, from the same
// text, as a manual page (Man), so that the two never disagree.
type Help struct {
	Name     string // the program: "scr-transferd"
	Synopsis string // after the name: "[flags] TRANSFERFILE"
	Summary  string // one line, for the manual's NAME section
	// Description is paragraphs separated by blank lines.
	Description string
	// Placeholders names the value of a flag in "--flag VALUE" where its
	// type does not say it well (a string flag of a directory: DIR).
	Placeholders map[string]string
	// Sections follow the flags: environment, examples, exit status...
	Sections []Section
}

// Section is a titled part of a help text. Lines of Body indented by two
// spaces or more are shown as they are (commands, examples); others are
// prose.
type Section struct {
	Title, Body string
}

// placeholderer is a flag.Value that names its own value ("SIZE").
type placeholderer interface{ Placeholder() string }

// Placeholder returns the word standing for f's value in "--flag VALUE",
// "" for a boolean flag.
func (h Help) Placeholder(f *flag.Flag) string {
	if p, ok := h.Placeholders[f.Name]; ok {
		return p
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	if p, ok := f.Value.(placeholderer); ok {
		return p.Placeholder()
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return "DURATION"
		case int, int64, uint, uint64:
			return "N"
		}
	}
	return "VALUE"
}

// Text writes the --help text of fs: usage, description, flags in the
// "--flag VALUE" form the documentation uses, then the sections.
func (h Help) Text(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s %s\n", h.Name, h.Synopsis)
	if d := strings.TrimSpace(h.Description); d != "" {
		fmt.Fprintf(w, "\n%s\n", d)
	}
	if hasFlags(fs) {
		fmt.Fprintln(w, "\nFlags:")
		h.PrintFlags(w, fs)
	}
	for _, s := range h.Sections {
		fmt.Fprintf(w, "\n%s:\n%s\n", s.Title, strings.TrimRight(s.Body, "\n"))
	}
}

// PrintFlags writes each flag of fs as "  --name VALUE", then its usage
// and default indented below it.
func (h Help) PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		line := "  --" + f.Name
		if p := h.Placeholder(f); p != "" {
			line += " " + p
		}
		fmt.Fprintf(w, "%s\n%s", line, wrap(flagUsage(f), "        ", 78))
	})
}

// flagUsage is f's usage with its default when that says something.
func flagUsage(f *flag.Flag) string {
	u := f.Usage
	switch f.DefValue {
	case "", "false", "0", "[]", "0s":
	default:
		u += " (default " + f.DefValue + ")"
	}
	return u
}

func hasFlags(fs *flag.FlagSet) bool {
	if fs == nil {
		return false
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// Man writes the manual page (roff, man(7)) made of the same text as
// Text: NAME, SYNOPSIS, DESCRIPTION, OPTIONS, then the sections. source
// fills the title line's source field ("scr-transferd"); no date, so
// that the page is the same whenever it is made.
func (h Help) Man(w io.Writer, fs *flag.FlagSet, source string) {
	fmt.Fprintf(w, ".TH %s 1 \"\" %q \"User Commands\"\n", strings.ToUpper(h.Name), source)
	fmt.Fprintf(w, ".SH NAME\n%s \\- %s\n", roff(h.Name), roff(h.Summary))
	fmt.Fprintf(w, ".SH SYNOPSIS\n.B %s\n%s\n", roff(h.Name), roff(h.Synopsis))
	if d := strings.TrimSpace(h.Description); d != "" {
		fmt.Fprintln(w, ".SH DESCRIPTION")
		manBody(w, d)
	}
	if hasFlags(fs) {
		fmt.Fprintln(w, ".SH OPTIONS")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(w, ".TP\n\\fB\\-\\-%s\\fR", roff(f.Name))
			if p := h.Placeholder(f); p != "" {
				fmt.Fprintf(w, " \\fI%s\\fR", roff(p))
			}
			fmt.Fprintf(w, "\n%s\n", roff(flagUsage(f)))
		})
	}
	for _, s := range h.Sections {
		fmt.Fprintf(w, ".SH %s\n", roff(strings.ToUpper(s.Title)))
		manBody(w, s.Body)
	}
}

// manBody writes text as roff paragraphs: blank lines separate them,
// lines indented by two spaces or more are kept as they are.
func manBody(w io.Writer, text string) {
	literal := false
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		isLit := strings.HasPrefix(l, "  ")
		switch {
		case isLit && !literal:
			fmt.Fprintln(w, ".PP\n.nf\n.RS 4")
		case !isLit && literal:
			fmt.Fprintln(w, ".RE\n.fi")
		}
		literal = isLit
		switch {
		case isLit:
			fmt.Fprintln(w, roff(strings.TrimPrefix(l, "  ")))
		case strings.TrimSpace(l) == "":
			fmt.Fprintln(w, ".PP")
		default:
			fmt.Fprintln(w, roff(l))
		}
	}
	if literal {
		fmt.Fprintln(w, ".RE\n.fi")
	}
}

// roff escapes text for roff: backslashes and dashes, and a period or an
// apostrophe that would start a request at the beginning of a line.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// wrap breaks text into lines of at most width columns (a longer word
// stands alone), each starting with indent and ending with a newline.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if line != indent && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
	return b.String()
}
