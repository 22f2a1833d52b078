package data

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// MaxCSVBytes caps a CSV dataset file (as every dataset file is capped).
const MaxCSVBytes = MaxDatasetBytes

// loadCSV reads a CSV file with a header row (RFC 4180 quoting, as
// pandas' to_csv writes it: MATH.csv, mbpp_filtered.csv). Every cell is a
// string; a tests or setup cell holding a list literal (JSON's, or
// Python's repr of a list of strings, as pandas writes list columns) is
// that list.
func loadCSV(ctx context.Context, path string, m Mapping) ([]Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load dataset: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxCSVBytes {
		return nil, fmt.Errorf("load %s: %d bytes, over the %d-byte limit for CSV: %w", path, st.Size(), MaxCSVBytes, ErrBadDataset)
	}
	r := csv.NewReader(io.LimitReader(f, MaxCSVBytes))
	r.ReuseRecord = false
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: header: %v: %w", path, err, ErrBadDataset)
	}
	header[0] = strings.TrimPrefix(header[0], "\ufeff") // a byte-order mark
	for _, p := range m.columns() {
		top, _, _ := strings.Cut(p, ".")
		if !containsString(header, top) {
			return nil, fmt.Errorf("load %s: column %q: not in the header (columns: %s): %w", path, top, strings.Join(header, ", "), ErrBadDataset)
		}
		// A row would keep the last of two such columns, unsaid.
		if first := slices.Index(header, top); slices.Index(header[first+1:], top) >= 0 {
			return nil, fmt.Errorf("load %s: column %q: twice in the header (columns %d and %d): %w", path, top, first+1, first+2+slices.Index(header[first+1:], top), ErrBadDataset)
		}
	}
	lists := map[string]bool{}
	for _, p := range []string{m.Tests, m.Setup} {
		if p != "" {
			lists[p] = true
		}
	}
	var out []Example
	for {
		if err := stopped(ctx, path, len(out)+1); err != nil {
			return nil, err
		}
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("load %s: row %d: %v: %w", path, len(out), err, ErrBadDataset)
		}
		for i := range rec {
			if at := InvalidUTF8At([]byte(rec[i])); at >= 0 {
				line, col := r.FieldPos(i)
				return nil, fmt.Errorf("load %s: row %d (line %d): column %q: not UTF-8 at byte %d of the field, which starts at column %d (a file in another encoding: save it as UTF-8): %w", path, len(out), line, header[i], at+1, col, ErrBadDataset)
			}
		}
		row := make(map[string]any, len(header))
		for i, h := range header {
			var v any = rec[i]
			if lists[h] {
				if l, ok := listLiteral(rec[i]); ok {
					v = l
				}
			}
			row[h] = v
		}
		line, _ := r.FieldPos(0)
		ex, err := m.example(path, len(out), row)
		if err != nil {
			return nil, fmt.Errorf("load %s: line %d: %w", path, line, err)
		}
		out = append(out, ex)
	}
	return out, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// listLiteral parses a list of strings written as JSON or as Python's
// repr ('…' or "…" strings with backslash escapes, comma-separated, in
// brackets). Anything else is not a list.
func listLiteral(s string) ([]any, bool) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return nil, false
	}
	out := []any{}
	i := 1
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	skip()
	if s[i] == ']' {
		return out, i == len(s)-1
	}
	for {
		skip()
		if i >= len(s) || (s[i] != '\'' && s[i] != '"') {
			return nil, false
		}
		q := s[i]
		i++
		var b strings.Builder
		for {
			if i >= len(s) {
				return nil, false
			}
			c := s[i]
			if c == q {
				i++
				break
			}
			if c == '\\' && i+1 < len(s) {
				i++
				switch e := s[i]; e {
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case '\\', '\'', '"':
					b.WriteByte(e)
				default:
					b.WriteByte('\\')
					b.WriteByte(e)
				}
				i++
				continue
			}
			b.WriteByte(c)
			i++
		}
		out = append(out, b.String())
		skip()
		if i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case ',':
			i++
			skip()
			if s[i] == ']' && i == len(s)-1 { // a trailing comma
				return out, true
			}
		case ']':
			return out, i == len(s)-1
		default:
			return nil, false
		}
	}
}
