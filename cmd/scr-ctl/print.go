package main

import (
	"encoding/json"
	"fmt"

	"github.com/scr-transferd/scr-transferd/hashfile"
)

func cmdPrint(e *env, args []string) error {
	fs := newFlags("print")
	asJSON := fs.Bool("json", false, "print the tree as nested JSON objects")
	indent := fs.Int("indent", 0, "spaces before top-level keys in tree form")
	locking := lockingFlag(fs)
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(pos, 1, "exactly one FILE"); err != nil {
		return err
	}
	store, err := openStore(pos[0], *locking)
	if err != nil {
		return err
	}
	tree, err := store.Read()
	if err != nil {
		return explainCorrupt(err, store.Path())
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(toJSON(tree))
	}
	if err := hashfile.Print(e.stdout, tree, *indent); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// jsonTree renders a tree as nested JSON objects whose key order is the
// tree's order.
type jsonTree struct{ t *hashfile.Tree }

func toJSON(t *hashfile.Tree) jsonTree { return jsonTree{t} }

// MarshalJSON writes {"key": {...}, ...} keeping the tree's key order.
func (j jsonTree) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	i := 0
	for k, sub := range j.t.All() {
		if i > 0 {
			b = append(b, ',')
		}
		i++
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b = append(b, kb...)
		b = append(b, ':')
		vb, err := jsonTree{sub}.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, vb...)
	}
	return append(b, '}'), nil
}
