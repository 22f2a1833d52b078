package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ErrNoCurves is returned by WriteCurves for a metrics file with no value
// any panel plots (a run stopped before its first step).
var ErrNoCurves = errors.New("no data to plot")

// CurvePanel is one panel of curves.png: Fields of metrics.jsonl against
// step, the i-th in CurveColors[i], in quarter Quarter of the image (0 to
// 3, row by row). Panels that share a quarter are stacked in it, so that
// values of different scales (KL and entropy) each get their own axis.
type CurvePanel struct {
	Title, YLabel string
	Fields        []string
	Quarter       int
	// Optional panels are drawn only when they have data (those of one
	// episode type), so that other runs' images keep their layout.
	Optional bool
}

// TokensPerSecond is the field curves.png derives from each line's
// tokens / (gen_s + train_s).
const TokensPerSecond = "tokens_per_s"

// CurvePanels are the panels of curves.png.
var CurvePanels = []CurvePanel{
	{"reward", "mean reward", []string{"reward_mean", "turn1_reward_mean", "eval_episode_return"}, 0, false},
	{"accuracy per turn", "held-out accuracy", []string{"eval_accuracy", "turn1_accuracy", "turn2_accuracy", "turn3_accuracy", "turn3_accuracy_static"}, 1, false},
	{"KL", "nats", []string{"approx_kl", "ref_kl", "kl_penalty"}, 2, false},
	{"entropy", "nats per token", []string{"entropy"}, 2, false},
	{"tokens/s", "tokens per second", []string{TokensPerSecond}, 3, false},
	{"agent episodes", "share", []string{"completion_rate", "eval_completion_rate", "invalid_action_rate", "eval_invalid_action_rate"}, 3, true},
}

// CurveColors are the colours of a panel's fields, in order.
var CurveColors = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {255, 127, 14, 255},
}

// The size of curves.png in pixels.
const (
	CurvesWidth  = 1200
	CurvesHeight = 800
	curvesDPI    = 96
)

// curve is one field's points, by step.
type curve struct {
	field string
	xy    plotter.XYs
}

// readCurves reads metrics.jsonl lines from r (name is the file, for
// errors) and returns each panel's curves that have points, in field
// order. A field absent or null on a line is skipped there (warm-up steps
// have no reward); a later line for the same step replaces an earlier one
// (a resumed run appends steps it had already written before the kill).
// Malformed lines, a missing or non-integer step and values that are not
// numbers are errors naming name:line.
func readCurves(name string, r io.Reader) ([][]curve, error) {
	want := map[string]bool{"tokens": true, "gen_s": true, "train_s": true}
	for _, p := range CurvePanels {
		for _, f := range p.Fields {
			want[f] = true
		}
	}
	rows := map[int]map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	// A last line with no newline is one a run is writing, or was writing
	// when it was killed: when it does not parse it is left out, as the
	// dashboard does, rather than keeping the complete rows from a plot.
	unterminated := false
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		unterminated = atEOF && tok != nil && adv == len(data) && !bytes.HasSuffix(data, []byte("\n"))
		return adv, tok, err
	})
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			if unterminated {
				break
			}
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		raw, ok := m["step"]
		if !ok {
			return nil, fmt.Errorf("%s:%d: no \"step\" field", name, line)
		}
		var step float64
		if err := json.Unmarshal(raw, &step); err != nil || step != math.Trunc(step) || step < 0 {
			return nil, fmt.Errorf("%s:%d: step %s is not a non-negative integer", name, line, raw)
		}
		vals := map[string]float64{}
		for f, raw := range m {
			if !want[f] || string(raw) == "null" {
				continue
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("%s:%d: %s: %s is not a number", name, line, f, raw)
			}
			vals[f] = v
		}
		if s := vals["gen_s"] + vals["train_s"]; s > 0 && vals["tokens"] > 0 {
			vals[TokensPerSecond] = vals["tokens"] / s
		}
		rows[int(step)] = vals
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	steps := make([]int, 0, len(rows))
	for s := range rows {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	panels := make([][]curve, len(CurvePanels))
	points := 0
	for i, p := range CurvePanels {
		for _, f := range p.Fields {
			c := curve{field: f}
			for _, s := range steps {
				if v, ok := rows[s][f]; ok {
					c.xy = append(c.xy, plotter.XY{X: float64(s), Y: v})
				}
			}
			if len(c.xy) > 0 {
				panels[i] = append(panels[i], c)
				points += len(c.xy)
			}
		}
	}
	if points == 0 {
		return nil, fmt.Errorf("%s: %d lines, none with a value curves.png plots: %w", name, line, ErrNoCurves)
	}
	return panels, nil
}

// drawCurves draws the panels; at maps a data point of a panel to its
// pixel in the image.
func drawCurves(panels [][]curve) (img image.Image, at func(panel int, x, y float64) image.Point, err error) {
	plots := make([]*plot.Plot, len(CurvePanels))
	for i, cp := range CurvePanels {
		p := plot.New()
		p.Title.Text = cp.Title
		if len(panels[i]) == 0 {
			p.Title.Text += " (no data)"
		}
		p.X.Label.Text = "step"
		p.Y.Label.Text = cp.YLabel
		p.X.Min = 0 // steps count from the run's start
		p.X.Tick.Marker, p.Y.Tick.Marker = trimmedTicks{}, trimmedTicks{}
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.TextStyle.Font.Size = vg.Points(10)
		p.Add(plotter.NewGrid())
		for _, c := range panels[i] {
			col := CurveColors[indexOf(cp.Fields, c.field)%len(CurveColors)]
			line, err := plotter.NewLine(decimate(c.xy, maxCurvePoints))
			if err != nil {
				return nil, nil, fmt.Errorf("curves: %s: %w", c.field, err)
			}
			line.Color, line.Width = col, vg.Points(1.5)
			marks, err := plotter.NewScatter(c.xy)
			if err != nil {
				return nil, nil, fmt.Errorf("curves: %s: %w", c.field, err)
			}
			marks.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
			p.Add(line)
			// Evaluations are sparse: mark their points.
			if len(c.xy) <= 60 {
				p.Add(marks)
			}
			label := c.field
			if label == TokensPerSecond {
				label = "tokens/s"
			}
			p.Legend.Add(label, line, marks)
		}
		// Headroom above the curves for the legend's rows.
		if n := len(panels[i]); n > 0 {
			p.Y.Max += (p.Y.Max - p.Y.Min) * (0.04 + 0.12*float64(n))
		}
		plots[i] = p
	}
	pt := func(px int) vg.Length { return vg.Length(px) * vg.Inch / curvesDPI }
	cnv := vgimg.NewWith(vgimg.UseWH(pt(CurvesWidth), pt(CurvesHeight)), vgimg.UseDPI(curvesDPI))
	quarters := draw.Tiles{Rows: 2, Cols: 2, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadX: vg.Points(18), PadY: vg.Points(12)}
	stacked := map[int][]int{} // quarter → its panels
	for i, cp := range CurvePanels {
		if cp.Optional && len(panels[i]) == 0 {
			continue
		}
		stacked[cp.Quarter] = append(stacked[cp.Quarter], i)
	}
	data := make([]draw.Canvas, len(plots))
	for q, ps := range stacked {
		c := quarters.At(draw.New(cnv), q%2, q/2)
		stack := draw.Tiles{Rows: len(ps), Cols: 1, PadY: vg.Points(8)}
		for k, i := range ps {
			tile := stack.At(c, 0, k)
			plots[i].Draw(tile)
			data[i] = plots[i].DataCanvas(tile)
		}
	}
	at = func(panel int, x, y float64) image.Point {
		tx, ty := plots[panel].Transforms(&data[panel])
		scale := float64(curvesDPI) / float64(vg.Inch)
		return image.Point{X: int(float64(tx(x)) * scale), Y: CurvesHeight - 1 - int(float64(ty(y))*scale)}
	}
	return cnv.Image(), at, nil
}

// maxCurvePoints bounds the points of a drawn line: about two per pixel
// column of a panel. Stroking costs more than linear time in the points
// (5,000 steps took seconds), and more points than pixels draw nothing
// more.
const maxCurvePoints = 800

// decimate returns xy cut to at most limit points: consecutive runs of
// points each give their lowest and highest, in step order, so that every
// peak and trough of the curve is still drawn.
func decimate(xy plotter.XYs, limit int) plotter.XYs {
	if len(xy) <= limit {
		return xy
	}
	runs := limit / 2
	out := make(plotter.XYs, 0, 2*runs)
	for r := range runs {
		lo, hi := r*len(xy)/runs, (r+1)*len(xy)/runs
		mn, mx := lo, lo
		for i := lo; i < hi; i++ {
			if xy[i].Y < xy[mn].Y {
				mn = i
			}
			if xy[i].Y > xy[mx].Y {
				mx = i
			}
		}
		out = append(out, xy[min(mn, mx)])
		if mn != mx {
			out = append(out, xy[max(mn, mx)])
		}
	}
	return out
}

// trimmedTicks are gonum's default ticks with labels like 2500.00 and
// 0.20 written 2500 and 0.2.
type trimmedTicks struct{}

func (trimmedTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ts {
		if strings.Contains(t.Label, ".") && !strings.ContainsAny(t.Label, "eE") {
			ts[i].Label = strings.TrimSuffix(strings.TrimRight(t.Label, "0"), ".")
		}
	}
	return ts
}

func indexOf(fields []string, f string) int {
	for i, g := range fields {
		if g == f {
			return i
		}
	}
	return 0
}

// WriteCurves draws curves.png (CurvePanels) from the metrics.jsonl at
// metricsPath to pngPath, through a temporary file so that a reader never
// sees half a PNG. A file with nothing to plot gives ErrNoCurves.
func WriteCurves(metricsPath, pngPath string) error {
	f, err := os.Open(metricsPath)
	if err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	defer f.Close()
	panels, err := readCurves(metricsPath, f)
	if err != nil {
		return err
	}
	img, _, err := drawCurves(panels)
	if err != nil {
		return fmt.Errorf("curves from %s: %w", metricsPath, err)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return fmt.Errorf("curves from %s: %w", metricsPath, err)
	}
	tmp := pngPath + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("curves: %w", err)
	}
	if err := os.Rename(tmp, pngPath); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("curves: %w", err)
	}
	return nil
}
