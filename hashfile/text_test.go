package hashfile

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // printed with indent 0; empty when an error is expected
		wantErr string
	}{
		{"no base indent", "A\n  B\n    1\nC\n", "A\n  B\n    1\nC\n", ""},
		{"base indent 4, step 3", "    A\n       B\n          1\n    C\n", "A\n  B\n    1\nC\n", ""},
		{"blank lines and CRLF", "A\r\n\r\n  B\r\n", "A\n  B\n", ""},
		{"key with inner spaces", "A\n  two words\n", "A\n  two words\n", ""},
		{"tab", "A\n\tB\n", "", "line 2: tab in indentation"},
		{"inconsistent siblings", "A\n    B\n  C\n", "", "line 3: indentation 2 does not match its siblings' 4"},
		{"less than top level", "  A\n B\n", "", "line 2: indentation 1 does not match its siblings' 2"},
		{"duplicate", "A\n  B\n  B\n", "", `line 3: duplicate key "B"`},
		{"nul", "A\x00\n", "", "line 1: key contains a NUL byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := Parse(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := Format(tree, 0); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestParseDepthBound(t *testing.T) {
	var b strings.Builder
	for i := range MaxDepth + 5 {
		b.WriteString(strings.Repeat(" ", i))
		b.WriteString("k\n")
	}
	if _, err := Parse(strings.NewReader(b.String())); err == nil || !strings.Contains(err.Error(), "nesting deeper") {
		t.Fatalf("got %v", err)
	}
}

func TestTypedValues(t *testing.T) {
	tree := New()
	tree.SetFloat("BW", 52428800)
	tree.SetUint("SIZE", 18446744073709551615)
	tree.SetCRC("CRC", 0x1a2b3c4d)
	tree.SetCRC("ZERO", 0)
	want := "BW\n  52428800.000000\nSIZE\n  18446744073709551615\nCRC\n  0x1a2b3c4d\nZERO\n  0\n"
	if got := Format(tree, 0); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if v, ok, err := tree.CRC("CRC"); v != 0x1a2b3c4d || !ok || err != nil {
		t.Fatalf("CRC = %#x %v %v", v, ok, err)
	}
	if v, ok, err := tree.CRC("ZERO"); v != 0 || !ok || err != nil {
		t.Fatalf("zero CRC = %#x %v %v", v, ok, err)
	}
	tree.SetValue("SIZE", "-5")
	if _, ok, err := tree.Uint("SIZE"); !ok || err == nil || !strings.Contains(err.Error(), `"-5" is not an unsigned decimal number`) {
		t.Fatalf("negative SIZE: ok=%v err=%v", ok, err)
	}
	tree.Set("TWO").Set("1")
	tree.Get("TWO").Set("2")
	if _, ok, err := tree.Uint("TWO"); !ok || err == nil || !strings.Contains(err.Error(), "want one value, found 2") {
		t.Fatalf("two values: ok=%v err=%v", ok, err)
	}
	if _, ok, err := tree.Float("MISSING"); ok || err != nil {
		t.Fatalf("missing key: ok=%v err=%v", ok, err)
	}
	tree.SetValue("PERCENT", "abc")
	if _, _, err := tree.Float("PERCENT"); err == nil {
		t.Fatal("non-numeric PERCENT accepted")
	}
}

func TestSetValueKeepsPositionAndIndexStaysRight(t *testing.T) {
	tree := New()
	for i := range 100 {
		tree.SetUint("k"+strings.Repeat("x", i), uint64(i))
	}
	tree.SetUint("kxx", 7)
	if tree.Keys()[2] != "kxx" {
		t.Fatal("SetValue moved an existing key")
	}
	for i := range 100 {
		if i%3 == 0 {
			tree.Unset("k" + strings.Repeat("x", i))
		}
	}
	for i := range 100 {
		v, ok, _ := tree.Uint("k" + strings.Repeat("x", i))
		switch {
		case i%3 == 0 && ok:
			t.Fatalf("key %d still present after Unset", i)
		case i%3 != 0 && i != 2 && (!ok || v != uint64(i)):
			t.Fatalf("key %d: %d %v", i, v, ok)
		}
	}
}

func TestWalk(t *testing.T) {
	tree := sampleTree()
	var paths []string
	_ = tree.Walk(func(path []string, _ *Tree) error {
		paths = append(paths, strings.Join(path, "/"))
		return nil
	})
	if paths[0] != "FILES" || paths[2] != "FILES//cache/rank_0.ckpt/DESTINATION" {
		t.Fatalf("walk order: %q", paths)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("A\n  B\n    1\nC\n")
	f.Add("  FILES\n    /x\n      SIZE\n        5\n")
	f.Add("A\n\tB\n")
	f.Fuzz(func(t *testing.T, s string) {
		tree, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		again, err := Parse(strings.NewReader(Format(tree, 3)))
		if err != nil {
			t.Fatalf("printed form of a parsed tree does not parse: %v", err)
		}
		if !again.Equal(tree) {
			t.Fatal("print/parse changed the tree")
		}
	})
}
