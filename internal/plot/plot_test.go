package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func rgba(img image.Image, p image.Point) color.RGBA {
	r, g, b, a := img.At(p.X, p.Y).RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}

// decode encodes c as PNG and decodes it back, as a reader of the file would.
func decode(t *testing.T, c Chart) (image.Image, Axes) {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, c); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, ax, err := Draw(c)
	if err != nil {
		t.Fatal(err)
	}
	return img, ax
}

func TestDrawPutsCurvesWhereTheDataAre(t *testing.T) {
	red, blue := color.RGBA{200, 0, 0, 255}, color.RGBA{0, 0, 200, 255}
	rising := Series{Name: "reward_mean", Color: red}
	for x := 1; x <= 9; x++ {
		rising.X = append(rising.X, float64(x))
		rising.Y = append(rising.Y, float64(x)/10)
	}
	evals := Series{Name: "eval_accuracy", Color: blue, Markers: true, X: []float64{2, 5, 8}, Y: []float64{0.9, 0.95, 1}}
	c := Chart{Title: "t", XLabel: "step", Width: 400, Height: 240, Series: []Series{rising, evals}}
	img, ax := decode(t, c)
	if b := img.Bounds(); b.Dx() != 400 || b.Dy() != 240 {
		t.Fatalf("image is %v, want 400x240", b)
	}
	if ax.YMin != 0 || ax.YMax != 1 || ax.XMin != 1 || ax.XMax != 9 {
		t.Fatalf("axes %+v, want x [1, 9], y [0, 1]", ax)
	}
	for _, s := range []Series{rising, evals} {
		for i := range s.X {
			p := ax.Pixel(s.X[i], s.Y[i])
			if got := rgba(img, p); got != s.Color {
				t.Errorf("%s point (%v, %v) at pixel %v: colour %v, want %v", s.Name, s.X[i], s.Y[i], p, got, s.Color)
			}
		}
	}
	// Midway between two points the line passes too.
	if got := rgba(img, ax.Pixel(1.5, 0.15)); got != red {
		t.Errorf("no line between the first two points: %v", got)
	}
	// Where no data are there is no curve colour.
	for _, p := range []image.Point{ax.Pixel(8, 0.1), ax.Pixel(2, 0.6), ax.Pixel(9, 0.3)} {
		if got := rgba(img, p); got == red || got == blue {
			t.Errorf("pixel %v away from the data has a curve colour %v", p, got)
		}
	}
	// The top-left corner is background; some axis ink exists.
	if got := rgba(img, image.Point{0, 0}); got != background {
		t.Errorf("corner colour %v", got)
	}
	if got := rgba(img, image.Point{ax.Plot.Min.X - 1, ax.Plot.Max.Y - 10}); got != ink {
		t.Errorf("no y axis line: %v", got)
	}
}

func TestDrawXFromZero(t *testing.T) {
	s := []Series{{Name: "a", X: []float64{10, 20}, Y: []float64{0.5, 0.5}}}
	for _, c := range []struct {
		from0 bool
		want  float64
	}{{false, 10}, {true, 0}} {
		_, ax, err := Draw(Chart{Width: 300, Height: 200, Series: s, XFromZero: c.from0})
		if err != nil || ax.XMin != c.want {
			t.Errorf("XFromZero %v: x axis from %v (%v), want %v", c.from0, ax.XMin, err, c.want)
		}
	}
}

func TestDrawRangeOutsideUnitInterval(t *testing.T) {
	c := Chart{Width: 300, Height: 200, Series: []Series{{Name: "loss", X: []float64{0, 10, 20}, Y: []float64{-1.3, 2.7, 0.4}}}}
	img, ax := decode(t, c)
	if ax.YMin > -1.3 || ax.YMax < 2.7 || ax.YMin < -2 || ax.YMax > 3.5 {
		t.Errorf("y axis [%v, %v] does not fit [-1.3, 2.7] to whole ticks", ax.YMin, ax.YMax)
	}
	if got := rgba(img, ax.Pixel(10, 2.7)); got != Palette[0] {
		t.Errorf("peak pixel colour %v, want the first palette colour", got)
	}
}

func TestDrawBadInput(t *testing.T) {
	ok := []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{0, 1}}}
	cases := []struct {
		name  string
		chart Chart
		want  string
	}{
		{"too small", Chart{Width: 50, Height: 400, Series: ok}, "smaller than 200x120"},
		{"lengths", Chart{Width: 400, Height: 300, Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}, `series "a": 2 x values, 1 y values`},
		{"nan", Chart{Width: 400, Height: 300, Series: []Series{{Name: "b", X: []float64{1, 2}, Y: []float64{0, math.NaN()}}}}, `series "b" point 1`},
		{"inf x", Chart{Width: 400, Height: 300, Series: []Series{{Name: "c", X: []float64{math.Inf(1)}, Y: []float64{0}}}}, "not finite"},
		{"no series", Chart{Width: 400, Height: 300}, "no data"},
		{"empty series", Chart{Width: 400, Height: 300, Series: []Series{{Name: "d"}}}, "no data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := Draw(c.chart); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestCurvesFromMetrics(t *testing.T) {
	in := `{"step":1,"phase":"warmup","reward_mean":null,"loss":2.1}
{"step":2,"phase":"warmup","reward_mean":null,"eval_accuracy":0.125}

{"step":3,"phase":"rl","reward_mean":0.25,"turn1_accuracy":0.2,"turn3_accuracy":0.3}
{"step":4,"phase":"rl","reward_mean":0.5,"eval_accuracy":0.375}
{"step":4,"phase":"rl","reward_mean":0.75,"eval_accuracy":0.5}
`
	c, err := Curves("m.jsonl", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][][2]float64{
		"reward_mean":    {{3, 0.25}, {4, 0.75}},
		"eval_accuracy":  {{2, 0.125}, {4, 0.5}},
		"turn1_accuracy": {{3, 0.2}},
		"turn3_accuracy": {{3, 0.3}},
	}
	order := []string{"reward_mean", "eval_accuracy", "turn1_accuracy", "turn3_accuracy"}
	if len(c.Series) != len(order) {
		t.Fatalf("%d series, want %d", len(c.Series), len(order))
	}
	for i, s := range c.Series {
		if s.Name != order[i] || s.Color != Palette[slices.Index(CurveFields, s.Name)] {
			t.Errorf("series %d is %s in %v, want %s in its CurveFields colour", i, s.Name, s.Color, order[i])
		}
		w := want[s.Name]
		if len(s.X) != len(w) {
			t.Errorf("%s: %d points, want %d", s.Name, len(s.X), len(w))
			continue
		}
		for k := range w {
			if s.X[k] != w[k][0] || s.Y[k] != w[k][1] {
				t.Errorf("%s point %d: (%v, %v), want %v", s.Name, k, s.X[k], s.Y[k], w[k])
			}
		}
	}
	// Single-turn runs: only the two required curves.
	c, err = Curves("m.jsonl", strings.NewReader(`{"step":1,"reward_mean":0.5}`+"\n"))
	if err != nil || len(c.Series) != 1 || c.Series[0].Name != "reward_mean" {
		t.Errorf("single line: %+v %v", c.Series, err)
	}
}

func TestCurvesBadMetrics(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"malformed", `{"step":1,"reward_mean":0.1}` + "\n" + `{"step":2,` + "\n", "m.jsonl:2:"},
		{"no step", `{"reward_mean":0.1}`, `m.jsonl:1: no "step" field`},
		{"fractional step", `{"step":1.5,"reward_mean":0.1}`, "m.jsonl:1: step 1.5 is not a non-negative integer"},
		{"string step", `{"step":"one","reward_mean":0.1}`, `m.jsonl:1: step "one"`},
		{"string reward", `{"step":1}` + "\n" + `{"step":2,"reward_mean":"high"}`, `m.jsonl:2: reward_mean: "high" is not a number`},
		{"empty", "", "no data"},
		{"no curves", `{"step":1,"loss":3}`, "none with reward_mean or eval_accuracy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Curves("m.jsonl", strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
	if _, err := Curves("m.jsonl", strings.NewReader("")); !errors.Is(err, ErrNoData) {
		t.Errorf("empty file: %v does not wrap ErrNoData", err)
	}
}

func TestWriteCurves(t *testing.T) {
	dir := t.TempDir()
	metrics, out := filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "curves.png")
	var sb strings.Builder
	for s := 1; s <= 50; s++ {
		fmt.Fprintf(&sb, "{\"step\":%d,\"reward_mean\":%g}\n", s, float64(s)/50)
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
	if b := img.Bounds(); b.Dx() != 800 || b.Dy() != 480 {
		t.Errorf("curves.png is %v, want 800x480", b)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
	if err := WriteCurves(filepath.Join(dir, "missing.jsonl"), out); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing metrics file: %v", err)
	}
}
