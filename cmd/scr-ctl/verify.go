package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/scr-transferd/scr-transferd/cache"
	"github.com/scr-transferd/scr-transferd/internal/units"
)

const helpVerify = `
Identifies each FILE by its content (SIONlib container, FTI-FF checkpoint,
LIME/SciDAC file, or plain) and checks it the way the daemon does before a
copy: structure, and every checksum the format carries. For each file it
prints OK or FAIL, the kind, the bytes that hold data against the apparent
size (a SIONlib container has gaps), what was found, and warnings. A FAIL
gives the precise problem, its code and its offset.
Exit status 0 only if every file is sound.`

// verifyResult is one file's verdict; the --json form is a list of them.
type verifyResult struct {
	Path      string   `json:"path"`
	OK        bool     `json:"ok"`
	Kind      string   `json:"kind,omitempty"`
	Size      int64    `json:"size"`       // apparent size in bytes
	DataBytes int64    `json:"data_bytes"` // bytes holding data; 0 when not OK
	Detail    string   `json:"detail,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	Error     string   `json:"error,omitempty"`
	Code      string   `json:"code,omitempty"`   // e.g. E_CHUNK_HASH, for a corrupt file
	Offset    *int64   `json:"offset,omitempty"` // where the problem was found
}

// verifyFile inspects one file.
func verifyFile(ctx context.Context, path string) verifyResult {
	res := verifyResult{Path: path}
	rep, err := cache.Inspect(ctx, path)
	if rep != nil {
		res.Kind, res.Size, res.Detail, res.Warnings = string(rep.Kind), rep.Size, rep.Detail, rep.Warnings
	}
	var fe *cache.FormatError
	switch {
	case errors.As(err, &fe):
		res.Error, res.Code = fe.Msg, fe.Code
		if fe.Offset >= 0 {
			off := fe.Offset
			res.Offset = &off
		}
	case err != nil:
		res.Error = err.Error()
	default:
		res.OK, res.DataBytes = true, rep.DataBytes
	}
	return res
}

// writeVerify writes the human form of a verdict.
func writeVerify(w io.Writer, r verifyResult) {
	verdict := "OK  "
	if !r.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s  %s\n", verdict, r.Path)
	switch {
	case r.OK:
		pct := 100.0
		if r.Size > 0 {
			pct = 100 * float64(r.DataBytes) / float64(r.Size)
		}
		fmt.Fprintf(w, "      %s: %d data bytes of %d apparent (%.1f%%, %s of %s): %s\n",
			r.Kind, r.DataBytes, r.Size, pct, units.IEC(float64(r.DataBytes)), units.IEC(float64(r.Size)), r.Detail)
	case r.Code != "":
		at := ""
		if r.Offset != nil {
			at = fmt.Sprintf(" at offset %d", *r.Offset)
		}
		fmt.Fprintf(w, "      %s, %d bytes: %s%s: %s\n", r.Kind, r.Size, r.Code, at, r.Error)
	default:
		fmt.Fprintf(w, "      %s\n", r.Error)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "      warning: %s\n", warn)
	}
}

func cmdVerify(e *env, args []string) error {
	fs := newFlags("verify")
	asJSON := fs.Bool("json", false, "print a JSON list of verdicts")
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError{"want at least one FILE"}
	}
	var results []verifyResult
	var bad []string
	for _, p := range pos {
		if err := e.ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		r := verifyFile(e.ctx, p)
		results = append(results, r)
		if !r.OK {
			bad = append(bad, p)
		}
		if !*asJSON {
			writeVerify(e.stdout, r)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d files failed verification: %s", len(bad), len(pos), strings.Join(bad, ", "))
	}
	return nil
}
