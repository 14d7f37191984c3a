package logging

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestUnits: one call site, raw numbers in JSON and IEC units on the
// console, for fields given to the call and to With.
func TestUnits(t *testing.T) {
	logAll := func(format string) string {
		var buf bytes.Buffer
		log, err := New(format, "info", &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.With(Bytes("total", 3<<30)).Info("flushed",
			Bytes("size", 536870912), Rate("rate", 104857600), zap.Duration("elapsed", 90*time.Second+123*time.Millisecond),
			zap.Int("files", 4), zap.String("src", "/c/a"))
		return buf.String()
	}

	var rec map[string]any
	js := logAll("json")
	if err := json.Unmarshal([]byte(js), &rec); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	for k, want := range map[string]any{"total": 3.0 * (1 << 30), "size": 536870912.0, "rate": 104857600.0, "elapsed": 90.123, "files": 4.0, "src": "/c/a"} {
		if rec[k] != want {
			t.Errorf("JSON %s = %v (%T), want %v", k, rec[k], rec[k], want)
		}
	}

	con := logAll("console")
	for _, want := range []string{`"total": "3.00 GiB"`, `"size": "512 MiB"`, `"rate": "100 MiB/s"`, `"elapsed": "1m30s"`, `"files": 4`, `"src": "/c/a"`} {
		if !strings.Contains(con, want) {
			t.Errorf("console line lacks %s:\n%s", want, con)
		}
	}
}

func TestNewRejects(t *testing.T) {
	if _, err := New("xml", "info", new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "want console or json") {
		t.Errorf("format xml: %v", err)
	}
	if _, err := New("json", "loud", new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), "want debug, info, warn or error") {
		t.Errorf("level loud: %v", err)
	}
}

// TestLevel: debug lines appear only at --log-level debug.
func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		level string
		want  bool
	}{{"debug", true}, {"info", false}} {
		var buf bytes.Buffer
		log, err := New("console", tc.level, &buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug("lock taken", Bytes("n", 1))
		if got := strings.Contains(buf.String(), "lock taken"); got != tc.want {
			t.Errorf("level %s: debug line shown %v, want %v", tc.level, got, tc.want)
		}
	}
}
