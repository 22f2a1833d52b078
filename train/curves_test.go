package train

import (
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

func TestReadCurves(t *testing.T) {
	in := `{"step":1,"phase":"warmup","reward_mean":null,"loss":2.1,"tokens":300,"train_s":0.5,"entropy":1.5}
{"step":2,"phase":"warmup","reward_mean":null,"eval_accuracy":0.125,"tokens":0,"train_s":0.5}

{"step":3,"phase":"rl","reward_mean":0.25,"turn1_accuracy":0.2,"turn3_accuracy":0.3,"tokens":100,"gen_s":1,"train_s":1}
{"step":4,"phase":"rl","reward_mean":0.5,"eval_accuracy":0.375}
{"step":4,"phase":"rl","reward_mean":0.75,"eval_accuracy":0.5,"approx_kl":0.01}
`
	panels, err := readCurves("m.jsonl", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, p := range panels {
		for _, c := range p {
			got[c.field] = fmt.Sprintf("panel %d %v", i, c.xy)
		}
	}
	want := map[string]string{
		"reward_mean":    "panel 0 [{3 0.25} {4 0.75}]",
		"eval_accuracy":  "panel 1 [{2 0.125} {4 0.5}]",
		"turn1_accuracy": "panel 1 [{3 0.2}]",
		"turn3_accuracy": "panel 1 [{3 0.3}]",
		"approx_kl":      "panel 2 [{4 0.01}]",
		"entropy":        "panel 3 [{1 1.5}]",
		// No tokens on step 2, no timing on step 4: no point there.
		TokensPerSecond: "panel 4 [{1 600} {3 50}]",
	}
	if len(got) != len(want) {
		t.Errorf("curves %v, want %v", got, want)
	}
	for f, w := range want {
		if got[f] != w {
			t.Errorf("%s: %q, want %q", f, got[f], w)
		}
	}
	// Within a panel, curves keep CurvePanels' field order.
	if p := panels[1]; p[0].field != "eval_accuracy" || p[1].field != "turn1_accuracy" || p[2].field != "turn3_accuracy" {
		t.Errorf("accuracy panel order: %v", p)
	}
}

func TestReadCurvesBadMetrics(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"malformed", `{"step":1,"reward_mean":0.1}` + "\n" + `{"step":2,` + "\n", "m.jsonl:2:"},
		{"no step", `{"reward_mean":0.1}`, `m.jsonl:1: no "step" field`},
		{"fractional step", `{"step":1.5,"reward_mean":0.1}`, "m.jsonl:1: step 1.5 is not a non-negative integer"},
		{"string step", `{"step":"one","reward_mean":0.1}`, `m.jsonl:1: step "one"`},
		{"string reward", `{"step":1}` + "\n" + `{"step":2,"reward_mean":"high"}`, `m.jsonl:2: reward_mean: "high" is not a number`},
		{"empty", "", "no data"},
		{"nothing plotted", `{"step":1,"loss":3}`, "m.jsonl: 1 lines, none with a value curves.png plots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readCurves("m.jsonl", strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	// A last line cut before its newline (a run writing it, or killed
	// mid-write) is left out; the complete rows are plotted.
	panels, err := readCurves("m.jsonl", strings.NewReader(`{"step":1,"reward_mean":0.1}`+"\n"+`{"step":2,"reward_mean":0.3}`+"\n"+`{"step":3,"rew`))
	if err != nil || len(panels[0]) == 0 || len(panels[0][0].xy) != 2 {
		t.Errorf("a metrics file cut inside its last line: %v", err)
	}
	if _, err := readCurves("m.jsonl", strings.NewReader("")); !errors.Is(err, ErrNoCurves) {
		t.Errorf("empty file: %v does not wrap ErrNoCurves", err)
	}
}

// TestWriteCurves draws a small metrics.jsonl: the PNG decodes at
// CurvesWidth×CurvesHeight and every point of every panel's curves is at
// its pixel in its curve's colour; away from the data there is none.
func TestWriteCurves(t *testing.T) {
	dir := t.TempDir()
	metrics, out := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "curves.png")
	var sb strings.Builder
	for s := 1; s <= 10; s++ {
		x := float64(s) / 10
		fmt.Fprintf(&sb, `{"step":%d,"phase":"rl","reward_mean":%g,"turn1_reward_mean":%g,"approx_kl":%g,"entropy":%g,"tokens":%d,"gen_s":1,"train_s":1`,
			s, 0.5*x, 0.4*x, 0.01*x, 2*x, 100*s)
		if s%3 == 0 {
			fmt.Fprintf(&sb, `,"eval_accuracy":%g,"turn1_accuracy":%g,"turn3_accuracy":%g`, 0.9*x, 0.5*x, 0.8*x)
		}
		if s%2 == 0 { // agent episodes' figures, at evaluation steps
			fmt.Fprintf(&sb, `,"completion_rate":%g,"eval_completion_rate":%g,"invalid_action_rate":%g`, 0.9*x, 0.5*x, 0.1*x)
		}
		sb.WriteString("}\n")
	}
	if err := os.WriteFile(metrics, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteCurves(metrics, out); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != CurvesWidth || b.Dy() != CurvesHeight {
		t.Fatalf("curves.png is %v, want %dx%d", b, CurvesWidth, CurvesHeight)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}

	// The same drawing, with the mapping from data to pixels.
	panels, err := readCurves(metrics, strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	_, at, err := drawCurves(panels)
	if err != nil {
		t.Fatal(err)
	}
	rgba := func(x, y int) color.RGBA {
		r, g, b, a := img.At(x, y).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
	}
	for i, p := range panels {
		if len(p) == 0 {
			t.Errorf("panel %q has no curve", CurvePanels[i].Title)
		}
		for _, c := range p {
			want := CurveColors[indexOf(CurvePanels[i].Fields, c.field)]
			for _, xy := range c.xy {
				if pt := at(i, xy.X, xy.Y); rgba(pt.X, pt.Y) != want {
					t.Errorf("panel %q: %s point (%v, %v) at pixel %v is %v, want %v", CurvePanels[i].Title, c.field, xy.X, xy.Y, pt, rgba(pt.X, pt.Y), want)
				}
			}
		}
		// Bottom right of the data area, below every rising curve: no curve colour.
		lo := c0(p)
		pt := at(i, 9.5, lo)
		for _, col := range CurveColors {
			if rgba(pt.X, pt.Y) == col {
				t.Errorf("panel %q: pixel %v away from the data has curve colour %v", CurvePanels[i].Title, pt, col)
			}
		}
	}

	if err := WriteCurves(filepath.Join(dir, "missing.jsonl"), out); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing metrics file: %v", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"step\":1,\"reward_mean\":0.5}\n{\"step\":\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteCurves(bad, filepath.Join(dir, "bad.png")); err == nil || !strings.Contains(err.Error(), bad+":2:") {
		t.Errorf("broken metrics file: %v, want it to name %s:2", err, bad)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.png")); !os.IsNotExist(err) {
		t.Errorf("a PNG was written from a broken metrics file (%v)", err)
	}
}

// c0 is the smallest value of a panel's curves.
func c0(p []curve) float64 {
	lo := p[0].xy[0].Y
	for _, c := range p {
		for _, xy := range c.xy {
			lo = min(lo, xy.Y)
		}
	}
	return lo
}

func TestDecimate(t *testing.T) {
	ramp := func(n int) plotter.XYs {
		xy := make(plotter.XYs, n)
		for i := range xy {
			xy[i] = plotter.XY{X: float64(i + 1), Y: float64(i % 7)}
		}
		return xy
	}
	spike := ramp(1000)
	spike[500].Y = 100
	spike[700].Y = -100
	cases := []struct {
		name  string
		in    plotter.XYs
		limit int
		want  string // points kept, or "same"
	}{
		{"short: kept whole", ramp(10), 10, "same"},
		{"two runs of four: lowest and highest of each, in step order", ramp(8), 4, "[{1 0} {4 3} {7 6} {8 0}]"},
		{"one point per run when flat", plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 2}, {X: 3, Y: 2}, {X: 4, Y: 2}}, 2, "[{1 2}]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decimate(c.in, c.limit)
			want := c.want
			if want == "same" {
				want = fmt.Sprint(c.in)
			}
			if fmt.Sprint(got) != want {
				t.Errorf("decimate = %v, want %s", got, want)
			}
		})
	}
	// A long curve keeps its extremes and its step order.
	got := decimate(spike, 100)
	if len(got) > 100 {
		t.Errorf("%d points, want at most 100", len(got))
	}
	seen := map[float64]bool{}
	for i, p := range got {
		seen[p.Y] = true
		if i > 0 && p.X <= got[i-1].X {
			t.Fatalf("point %d at step %v after step %v", i, p.X, got[i-1].X)
		}
	}
	if !seen[100] || !seen[-100] {
		t.Errorf("the spike at step 501 or the trough at step 701 was dropped")
	}
}
