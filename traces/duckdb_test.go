package traces

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDuckDBReadsTheStore has DuckDB (its npm package) read a store the
// way a data lake query does: read_parquet over the partition folders with
// hive_partitioning, the same call that reads an s3:// prefix.
func TestDuckDBReadsTheStore(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := filepath.Join("testdata", "clients")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api", "package.json")); err != nil {
		t.Skip("the @duckdb/node-api npm package is not installed: run npm ci in traces/testdata/clients")
	}
	root := t.TempDir()
	w, err := OpenWriter(root, WriterOptions{FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC)
	w.Add(sampleSpan(1, 1, day, "run-1"), sampleSpan(1, 2, day, "run-1"), sampleSpan(2, 1, day.Add(24*time.Hour), "agent/ä b"))
	w.Flush()
	w.Add(sampleSpan(3, 1, day, "run-1")) // a second file in the first partition
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "duckdb.mjs", root)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node duckdb.mjs: %v\n%s", err, stderr.String())
	}
	type row struct {
		Date         string   `json:"date"`
		Source       string   `json:"source"`
		Spans        int      `json:"spans"`
		Traces       int      `json:"traces"`
		OutputTokens int      `json:"output_tokens"`
		Rewards      []string `json:"rewards"`
	}
	var got []row
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r row
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("duckdb.mjs printed %q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []row{
		{Date: "2026-03-04", Source: "run-1", Spans: 3, Traces: 2, OutputTokens: 9, Rewards: []string{"answer", "len"}},
		{Date: "2026-03-05", Source: "agent/ä b", Spans: 1, Traces: 1, OutputTokens: 3, Rewards: []string{"answer", "len"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DuckDB read\n%+v\nwant\n%+v", got, want)
	}
}
