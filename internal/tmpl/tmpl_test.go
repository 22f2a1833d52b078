package tmpl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

type data struct{ Problem, Answer string }

func TestCheck(t *testing.T) {
	cases := []struct {
		name, text string
		refused    string // "" when accepted
	}{
		{"fields", "{{.Problem}} = \\boxed{ {{- .Answer -}} }", ""},
		{"if eq", "{{if eq .Problem .Answer}}same{{else}}{{.Answer}}{{end}}", ""},
		{"with and variables", "{{with $p := .Problem}}{{$p}}{{$.Answer}}{{end}}", ""},
		{"functions", `{{len .Problem}} {{slice .Problem 0 1}} {{printf "%-8.3s|%d" .Answer 7}} {{html .Problem}}`, ""},
		{"unknown field", "{{.Secret}}", ".Secret"},
		{"unknown field by $", "{{$.Secret}}", ".Secret"},
		{"range over an int", "{{range 1000000000}}x{{end}}", "{{range}}"},
		{"empty range", "{{range 1000000000}}{{end}}", "{{range}}"},
		{"nested range", "{{range 100000}}{{range 100000}}{{end}}{{end}}", "{{range}}"},
		{"range inside if", "{{if .Problem}}{{range 9}}{{end}}{{end}}", "{{range}}"},
		{"recursion", `{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}`, "{{template}}"},
		{"block", `{{block "b" .}}x{{end}}`, "{{template}}"},
		{"define alone", `{{define "a"}}x{{end}}{{.Problem}}`, "{{define}}"},
		{"huge printf width", `{{printf "%0999999999d" 1}}`, "over 999"},
		{"printf width from an argument", `{{printf "%*d" 999999999 1}}`, "from an argument"},
		{"printf precision from an argument", `{{printf "%.*f" 999999999 1.0}}`, "from an argument"},
		{"printf format from data", `{{printf .Problem 1}}`, "not a constant"},
		{"call", `{{call .Problem}}`, "call"},
		{"printf in a pipeline", `{{.Problem | printf "%9999s"}}`, "over 999"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.name, c.text, "Problem", "Answer")
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("%q refused: %v", c.text, err)
			case c.refused != "" && err == nil:
				t.Fatalf("%q accepted, want refused for %s", c.text, c.refused)
			case c.refused != "" && !strings.Contains(err.Error(), c.refused):
				t.Fatalf("%q: error %q does not name %s", c.text, err, c.refused)
			}
		})
	}
}

func TestExecuteCapsOutput(t *testing.T) {
	tp, err := Parse("t", "{{.Problem}}{{.Problem}}{{.Problem}}", "Problem")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Execute(tp, data{Problem: "abc"}, 9)
	if err != nil || out != "abcabcabc" {
		t.Fatalf("at the cap: %q, %v", out, err)
	}
	if out, err := Execute(tp, data{Problem: "abcd"}, 9); !errors.Is(err, ErrTooLong) || out != "abcdabcda" {
		t.Fatalf("over the cap: %q, %v; want ErrTooLong and the first 9 bytes", out, err)
	}
	if out, err := Execute(tp, data{Problem: "abcdefghijk"}, 9); !errors.Is(err, ErrTooLong) || out != "abcdefghi" {
		t.Fatalf("one field over the cap: %q, %v; want ErrTooLong and the first 9 bytes", out, err)
	}
	if _, err := Execute(tp, struct{ Other string }{}, 9); err == nil || errors.Is(err, ErrTooLong) {
		t.Fatalf("missing field: %v", err)
	}
}

// TestHostileTemplatesReturn runs each hostile template through Parse and,
// had it passed, Execute under the cap; each must come back (refused)
// well within the bound, which only guards against a hang.
func TestHostileTemplatesReturn(t *testing.T) {
	for _, text := range []string{
		"{{range 1000000000}}x{{end}}",
		"{{range 1000000000}}{{end}}",
		`{{printf "%0999999999d" 1}}`,
		`{{define "a"}}{{template "a" .}}{{end}}{{template "a" .}}`,
		strings.Repeat("{{.Problem}}", 1<<16),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		done := make(chan error, 1)
		go func() {
			tp, err := Parse("hostile", text, "Problem")
			if err == nil {
				_, err = Execute(tp, data{Problem: strings.Repeat("p", 64)}, MaxOutput)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%.40q: rendered, want refused", text)
			}
		case <-ctx.Done():
			t.Errorf("%.40q: still running after 10 s", text)
		}
		cancel()
	}
}
