package ctxopt

import (
	"fmt"
	"image/color"
	"io"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rlnode/rlnode/internal/atomicfile"
)

// WritePlot draws accuracy against cost: every fixed configuration, their
// Pareto front, the random policy, the best fixed configuration per
// question type and the learned policies (named by label), as PNG.
func WritePlot(path string, res Result, learned map[string]Summary) error {
	p := plot.New()
	p.Title.Text = "accuracy vs cost (held-out questions)"
	p.X.Label.Text = "cost per question"
	p.Y.Label.Text = "accuracy"
	var fixed, front plotter.XYs
	onFront := map[string]bool{}
	for _, n := range res.Front {
		onFront[n] = true
	}
	for _, f := range res.Fixed {
		fixed = append(fixed, plotter.XY{X: f.Cost, Y: f.Accuracy})
		if onFront[f.Name] {
			front = append(front, plotter.XY{X: f.Cost, Y: f.Accuracy})
		}
	}
	sortXY(front)
	sc, err := plotter.NewScatter(fixed)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Color = color.Gray{Y: 150}
	sc.GlyphStyle.Radius = vg.Points(2.5)
	p.Add(sc)
	p.Legend.Add("fixed configurations", sc)
	if len(front) > 0 {
		ln, err := plotter.NewLine(front)
		if err != nil {
			return err
		}
		ln.Color = color.Gray{Y: 90}
		ln.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(ln)
		p.Legend.Add("Pareto front of fixed", ln)
	}
	point := func(name string, s Summary, c color.Color, shape draw.GlyphDrawer) error {
		sc, err := plotter.NewScatter(plotter.XYs{{X: s.Cost, Y: s.Accuracy}})
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = c, shape, vg.Points(5)
		p.Add(sc)
		p.Legend.Add(fmt.Sprintf("%s (R %.2f)", name, s.Reward), sc)
		return nil
	}
	if err := point("random", res.Random, color.RGBA{R: 200, G: 30, B: 30, A: 255}, draw.CrossGlyph{}); err != nil {
		return err
	}
	if err := point("best fixed per type", res.BestPerType, color.RGBA{R: 30, G: 140, B: 30, A: 255}, draw.SquareGlyph{}); err != nil {
		return err
	}
	colors := []color.Color{color.RGBA{B: 220, A: 255}, color.RGBA{R: 150, B: 200, A: 255}, color.RGBA{R: 230, G: 140, A: 255}}
	names := make([]string, 0, len(learned))
	for n := range learned {
		names = append(names, n)
	}
	sortStrings(names)
	for i, n := range names {
		if err := point(n, learned[n], colors[i%len(colors)], draw.PyramidGlyph{}); err != nil {
			return err
		}
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	// As p.Save, the format from the name, but replaced atomically.
	wt, err := p.WriterTo(7*vg.Inch, 5*vg.Inch, strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), "."))
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, err := wt.WriteTo(w)
		return err
	})
}

func sortXY(xy plotter.XYs) {
	for i := 1; i < len(xy); i++ {
		for j := i; j > 0 && xy[j].X < xy[j-1].X; j-- {
			xy[j], xy[j-1] = xy[j-1], xy[j]
		}
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
