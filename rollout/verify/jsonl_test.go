package verify

import (
	"context"
	"strings"
	"testing"
)

// ScoreJSONL keeps input order with several workers, keeps every field
// (replacing a line's own reward), reports bad lines as NAME:LINE, and
// writes objects with missing fields back with reward 0 and the problem.
func TestScoreJSONL(t *testing.T) {
	in := strings.Join([]string{
		`{"id":1,"response":"\\boxed{4}","answer":"4","reward":0.5}`,
		`not json`,
		`{"id":2,"response":"The final answer is 5","answer":"6"}`,
		``,
		`{"id":3,"answer":"1"}`,
		`[1,2]`,
		`{"id":4,"response":"\\boxed{\\frac{1}{2}}","answer":"0.5"}`,
	}, "\n") + "\n"
	var out, report strings.Builder
	sum, err := ScoreJSONL(context.Background(), Math{}, strings.NewReader(in), &out, JSONLConfig{Name: "in.jsonl", Workers: 3, Report: &report})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":1,"response":"\\boxed{4}","answer":"4","reward":1}
{"id":2,"response":"The final answer is 5","answer":"6","reward":0}
{"id":3,"answer":"1","reward":0,"error":"field \"response\" is missing"}
{"id":4,"response":"\\boxed{\\frac{1}{2}}","answer":"0.5","reward":1}
`
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	for _, w := range []string{"in.jsonl:2: not JSON", "in.jsonl:5: field \"response\" is missing", "in.jsonl:6: not a JSON object, left out"} {
		if !strings.Contains(report.String(), w) {
			t.Errorf("report lacks %q:\n%s", w, report.String())
		}
	}
	if (sum != JSONLSummary{Written: 4, Noted: 1, Bad: 2, BadFields: 1, RewardSum: 2}) {
		t.Errorf("summary %+v", sum)
	}
}
