package dashboard

import (
	"math"
	"strings"
	"testing"
)

func TestTableReadMore(t *testing.T) {
	rows := `{"step":1,"phase":"warmup","reward_mean":null,"loss":2.5,"tokens":100,"train_s":0.5,"elapsed_s":1}
not json
{"phase":"rl","loss":1}
{"step":2,"phase":"rl","reward_mean":0.25,"loss":2,"tokens":300,"gen_s":1,"train_s":0.5,"elapsed_s":3,"note":"x","ok":true}

{"step":3,"phase":"rl","reward_mean":0.5,"lo`
	tab := &Table{}
	if err := tab.ReadMore(strings.NewReader(rows)); err != nil {
		t.Fatal(err)
	}
	if tab.Rows() != 2 || tab.BadLines != 2 || !tab.Truncated {
		t.Fatalf("rows %d, bad lines %d, truncated %v; want 2, 2, true", tab.Rows(), tab.BadLines, tab.Truncated)
	}
	if want := int64(strings.LastIndex(rows, "\n") + 1); tab.Offset != want {
		t.Fatalf("offset %d, want %d (the start of the cut line)", tab.Offset, want)
	}
	if xs, ys := tab.Series("reward_mean"); len(xs) != 1 || xs[0] != 2 || ys[0] != 0.25 {
		t.Errorf("reward_mean: %v %v, want the one non-null value at step 2", xs, ys)
	}
	if got := tab.Columns["tokens_per_s"]; len(got) != 2 || got[0] != 200 || got[1] != 200 {
		t.Errorf("tokens_per_s %v, want [200 200] (tokens over gen_s + train_s)", got)
	}
	if _, ok := tab.Columns["note"]; ok {
		t.Error("a string field became a column")
	}
	if _, ok := tab.Columns["ok"]; ok {
		t.Error("a bool field became a column")
	}
	if tab.Phases[1] != "rl" {
		t.Errorf("phases %v", tab.Phases)
	}

	// The writer finishes the line: reading on from Offset completes it.
	rest := rows[tab.Offset:] + `ss":1.5,"elapsed_s":5}` + "\n"
	if err := tab.ReadMore(strings.NewReader(rest)); err != nil {
		t.Fatal(err)
	}
	if tab.Rows() != 3 || tab.Truncated {
		t.Fatalf("after the line was finished: rows %d, truncated %v", tab.Rows(), tab.Truncated)
	}
	if l := tab.Columns["loss"]; len(l) != 3 || l[2] != 1.5 {
		t.Errorf("loss %v", l)
	}
	if g := tab.Columns["gen_s"]; len(g) != 3 || !math.IsNaN(g[0]) || g[1] != 1 || !math.IsNaN(g[2]) {
		t.Errorf("gen_s %v: want NaN where rows lack it", g)
	}
}

func TestTableOverlongLine(t *testing.T) {
	long := `{"step":1,"x":"` + strings.Repeat("a", maxMetricsLine+10) + `"}` + "\n"
	tab := &Table{}
	if err := tab.ReadMore(strings.NewReader(long + `{"step":2,"loss":1}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if tab.Rows() != 1 || tab.BadLines != 1 || tab.Steps[0] != 2 {
		t.Fatalf("rows %d (steps %v), bad lines %d; want the overlong line skipped", tab.Rows(), tab.Steps, tab.BadLines)
	}
}

// The fast reader of flat rows and encoding/json agree; rows it does not
// read go to encoding/json.
func TestParseFlatObject(t *testing.T) {
	for _, c := range []struct {
		line string
		fast bool // parseFlatObject reads it
		ok   bool // one of the two reads it
	}{
		{`{"step":1,"phase":"rl","reward_mean":null,"loss":-2.5e-3,"ok":true,"no":false}`, true, true},
		{` { "step" : 2 , "x" : "a b" } `, true, true},
		{`{}`, true, true},
		{`{"step":3,"nested":{"a":1},"loss":1}`, false, true},
		{`{"st\u0065p":4,"loss":1}`, false, true},
		{`{"step":5,"s":"quote \" inside"}`, false, true},
		{`{"step":6,"list":[1,2]}`, false, true},
		{`{"step":7,}`, false, false},
		{`{"step":8} trailing`, false, false},
		{`{"step":9e999}`, false, false},
		{`[1,2]`, false, false},
		{`{"step":1.2.3}`, false, false},
	} {
		fast, fastOK := parseFlatObject([]byte(c.line), nil, map[string]string{})
		slow, slowOK := parseObjectSlow([]byte(c.line), nil)
		if fastOK != c.fast || (fastOK || slowOK) != c.ok {
			t.Errorf("%s: fast %v, slow %v; want fast %v, read %v", c.line, fastOK, slowOK, c.fast, c.ok)
			continue
		}
		if fastOK {
			want := map[string]field{}
			for _, f := range slow {
				want[f.key] = f
			}
			if len(fast) != len(want) {
				t.Errorf("%s: fast %v, slow %v", c.line, fast, slow)
			}
			for _, f := range fast {
				if want[f.key] != f {
					t.Errorf("%s: %s: fast %+v, slow %+v", c.line, f.key, f, want[f.key])
				}
			}
		}
	}
}
