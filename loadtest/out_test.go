package loadtest

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
)

// --out against an embedded cluster writes one CSV row per pod, with every stage reached, and
// non-empty plots in both formats.
func TestRunOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded cluster: skipped under -short")
	}
	const pods = 50
	dir := filepath.Join(t.TempDir(), "out")
	cfg, err := ParseFlags([]string{"--nodes", "5", "--pods", strconv.Itoa(pods), "--rate", "500", "--concurrency", "4",
		"--quiet", "--memory-streams", "--no-audit", "--data-dir", t.TempDir(), "--timeout", "2m", "--out", dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var report bytes.Buffer
	if err := Run(ctx, cfg, &report); err != nil {
		t.Fatalf("%v\n%s", err, report.String())
	}
	t.Logf("\n%s", report.String())
	if !strings.Contains(report.String(), "p99.9 ms") {
		t.Errorf("the report has no p99.9 column")
	}

	f, err := os.Open(filepath.Join(dir, OutCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s does not parse: %v", OutCSV, err)
	}
	if len(rows) != pods+1 {
		t.Fatalf("%s has %d rows, want a header and %d pods", OutCSV, len(rows), pods)
	}
	header := rows[0]
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	names := map[string]bool{}
	for _, row := range rows[1:] {
		if len(row) != len(header) {
			t.Fatalf("row %v: %d fields, header has %d", row, len(row), len(header))
		}
		names[row[col["pod"]]] = true
		sent := parseMs(t, row[col["sent_ms"]])
		for _, s := range stages {
			at := parseMs(t, row[col[s+"_ms"]])
			lat := parseMs(t, row[col[s+"_latency_ms"]])
			if d := at - sent - lat; d > 0.01 || d < -0.01 {
				t.Errorf("pod %s %s: at %.3f − sent %.3f ≠ latency %.3f", row[0], s, at, sent, lat)
			}
		}
	}
	if len(names) != pods {
		t.Errorf("%d distinct pods in %s, want %d", len(names), OutCSV, pods)
	}

	for _, name := range []string{OutLatencyCDF, OutThroughput} {
		for _, ext := range []string{".png", ".svg"} {
			data, err := os.ReadFile(filepath.Join(dir, name+ext))
			if err != nil {
				t.Fatal(err)
			}
			magic := map[string]string{".png": "\x89PNG", ".svg": "<?xml"}[ext]
			if len(data) == 0 || !bytes.HasPrefix(data, []byte(magic)) {
				t.Errorf("%s%s: %d bytes, want a %s file", name, ext, len(data), ext)
			}
		}
	}
}

func parseMs(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q is not a time in ms: %v", s, err)
	}
	return v
}

func TestAxisTicks(t *testing.T) {
	tests := []struct {
		name   string
		ticker plot.Ticker
		lo, hi float64
		want   []string // the labelled ticks
	}{
		{"linear 0..280", linearTicks{}, 0, 280, []string{"0", "100", "200"}},
		{"linear 0..1.3", linearTicks{}, 0, 1.3, []string{"0", "0.5", "1"}},
		{"linear 0..37", linearTicks{}, 0, 37, []string{"0", "10", "20", "30"}},
		{"linear 0..0.9", linearTicks{}, 0, 0.9, []string{"0", "0.2", "0.4", "0.6", "0.8"}},
		{"decades 3..700", decadeTicks{}, 3, 700, []string{"5", "10", "20", "50", "100", "200", "500"}},
		{"decades 0.5..2", decadeTicks{}, 0.5, 2, []string{"0.5", "1", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, tk := range tt.ticker.Ticks(tt.lo, tt.hi) {
				if tk.Label != "" {
					got = append(got, tk.Label)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("labels %v, want %v", got, tt.want)
			}
		})
	}
}
