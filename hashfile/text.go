package hashfile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Print writes t in KVTree's printed tree form (kvtree_print): one key per
// line, each level indented two spaces more than its parent, the top level
// indented by indent spaces.
func Print(w io.Writer, t *Tree, indent int) error {
	bw := bufio.NewWriter(w)
	printTree(bw, t, indent)
	return bw.Flush()
}

func printTree(w *bufio.Writer, t *Tree, indent int) {
	for i := range t.Len() {
		e := &t.entries[i]
		printLine(w, e.key, indent)
		if sub := e.peek(); sub != nil || e.val == "" {
			printTree(w, sub, indent+2)
			continue
		}
		printLine(w, e.val, indent+2)
	}
}

// printLine writes key on a line of its own, indented by indent spaces.
func printLine(w *bufio.Writer, key string, indent int) {
	for range indent {
		w.WriteByte(' ')
	}
	w.WriteString(key)
	w.WriteByte('\n')
}

// Format returns t in printed tree form with a top-level indent of indent.
func Format(t *Tree, indent int) string {
	var b bytes.Buffer
	_ = Print(&b, t, indent) // writes to a bytes.Buffer cannot fail
	return b.String()
}

// Parse reads a tree in printed form. The top level may have any indentation
// as long as every top-level key has the same; each child level must be
// indented consistently deeper than its parent. Tabs in the indentation,
// NUL bytes, a line indented less than the top level and inconsistent
// indentation are errors that name the line. Empty lines are skipped.
func Parse(r io.Reader) (*Tree, error) {
	type level struct {
		indent      int
		childIndent int // -1 until the first child is seen
		t           *Tree
	}
	root := New()
	stack := []level{{indent: -1, childIndent: -1, t: root}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		key := strings.TrimLeft(line, " \t")
		ws := line[:len(line)-len(key)]
		if strings.ContainsRune(ws, '\t') {
			return nil, fmt.Errorf("line %d: tab in indentation; indent with spaces", lineNo)
		}
		if strings.IndexByte(key, 0) >= 0 {
			return nil, fmt.Errorf("line %d: key contains a NUL byte", lineNo)
		}
		ind := len(ws)
		for len(stack) > 1 && stack[len(stack)-1].indent >= ind {
			stack = stack[:len(stack)-1]
		}
		parent := &stack[len(stack)-1]
		switch {
		case parent.childIndent < 0:
			parent.childIndent = ind
		case parent.childIndent != ind:
			return nil, fmt.Errorf("line %d: indentation %d does not match its siblings' %d", lineNo, ind, parent.childIndent)
		}
		if parent.t.Has(key) {
			return nil, fmt.Errorf("line %d: duplicate key %q", lineNo, key)
		}
		if len(stack) > MaxDepth {
			return nil, fmt.Errorf("line %d: nesting deeper than %d levels", lineNo, MaxDepth)
		}
		stack = append(stack, level{indent: ind, childIndent: -1, t: parent.t.Set(key)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", lineNo+1, err)
	}
	return root, nil
}
