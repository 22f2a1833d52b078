// Package plot draws line charts as PNG with the standard library only
// (image, image/png and a built-in 5×7 bitmap font), and turns a run's
// metrics.jsonl into its curves.png: reward_mean and eval_accuracy (and
// turn1_accuracy/turn3_accuracy when present) against step.
//
// It owns drawing and reading metrics for plots; it must not need a
// display, fonts on disk or any package outside the standard library.
//
// Not done yet: one panel only (all curves share the y axis, which suits
// rewards and accuracies in [0, 1]); no log scales; no smoothing.
package plot

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
)

// Series is one curve: points (X[i], Y[i]) joined in order.
type Series struct {
	Name string
	X, Y []float64
	// Color of the curve; the zero value takes the next palette colour.
	Color color.RGBA
	// Markers draws a 5×5 square at every point (for sparse series, such
	// as evaluations every few steps).
	Markers bool
}

// Chart is one panel of curves sharing both axes.
type Chart struct {
	Title          string
	XLabel, YLabel string
	Width, Height  int // pixels; at least MinWidth × MinHeight
	Series         []Series
	// XFromZero starts the x axis at 0 when no x is negative (steps).
	XFromZero bool
}

// Smallest chart Draw accepts: below this the labels do not fit.
const (
	MinWidth  = 200
	MinHeight = 120
)

// Palette is the colour order of series that set none.
var Palette = []color.RGBA{
	{31, 119, 180, 255},  // blue
	{255, 127, 14, 255},  // orange
	{44, 160, 44, 255},   // green
	{214, 39, 40, 255},   // red
	{148, 103, 189, 255}, // purple
	{140, 86, 75, 255},   // brown
}

var (
	background = color.RGBA{255, 255, 255, 255}
	ink        = color.RGBA{0, 0, 0, 255}
	grid       = color.RGBA{225, 225, 225, 255}
)

// ErrNoData: no series has a point.
var ErrNoData = errors.New("plot: no data points")

// Axes maps data coordinates to pixels of a drawn chart.
type Axes struct {
	Plot                   image.Rectangle // the plotting area (inside the axis lines)
	XMin, XMax, YMin, YMax float64
}

// Pixel is the pixel where the point (x, y) is drawn.
func (a Axes) Pixel(x, y float64) image.Point {
	w, h := float64(a.Plot.Dx()-1), float64(a.Plot.Dy()-1)
	px := a.Plot.Min.X + int(math.Round((x-a.XMin)/(a.XMax-a.XMin)*w))
	py := a.Plot.Max.Y - 1 - int(math.Round((y-a.YMin)/(a.YMax-a.YMin)*h))
	return image.Point{px, py}
}

// Layout margins in pixels.
const (
	marginLeft   = 56
	marginRight  = 16
	marginTop    = 34
	marginBottom = 36
)

// check validates c and returns the data ranges.
func (c *Chart) check() (xmin, xmax, ymin, ymax float64, err error) {
	if c.Width < MinWidth || c.Height < MinHeight {
		return 0, 0, 0, 0, fmt.Errorf("plot: chart %dx%d is smaller than %dx%d", c.Width, c.Height, MinWidth, MinHeight)
	}
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	points := 0
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, 0, 0, fmt.Errorf("plot: series %q: %d x values, %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
				return 0, 0, 0, 0, fmt.Errorf("plot: series %q point %d: (%v, %v) is not finite", s.Name, i, x, y)
			}
			xmin, xmax = min(xmin, x), max(xmax, x)
			ymin, ymax = min(ymin, y), max(ymax, y)
			points++
		}
	}
	if points == 0 {
		return 0, 0, 0, 0, ErrNoData
	}
	return xmin, xmax, ymin, ymax, nil
}

// niceStep is a 1, 2 or 5 × 10^k tick spacing giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// Draw renders the chart. Rewards and accuracies within [0, 1] get the
// y axis [0, 1]; other data get their range widened to whole ticks.
func Draw(c Chart) (*image.RGBA, Axes, error) {
	xmin, xmax, ymin, ymax, err := c.check()
	if err != nil {
		return nil, Axes{}, err
	}
	if c.XFromZero && xmin > 0 {
		xmin = 0
	}
	if xmax == xmin {
		xmin, xmax = xmin-1, xmax+1
	}
	if ymin >= 0 && ymax <= 1 {
		ymin, ymax = 0, 1
	} else {
		if ymax == ymin {
			ymin, ymax = ymin-1, ymax+1
		}
		st := niceStep(ymax-ymin, 5)
		ymin, ymax = math.Floor(ymin/st)*st, math.Ceil(ymax/st)*st
	}
	img := image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	ax := Axes{Plot: image.Rect(marginLeft, marginTop, c.Width-marginRight, c.Height-marginBottom),
		XMin: xmin, XMax: xmax, YMin: ymin, YMax: ymax}

	// Grid and tick labels.
	ystep := niceStep(ymax-ymin, 5)
	for v := math.Ceil(ymin/ystep) * ystep; v <= ymax+ystep/1e6; v += ystep {
		p := ax.Pixel(xmin, v)
		hline(img, ax.Plot.Min.X, ax.Plot.Max.X-1, p.Y, grid)
		label := strconv.FormatFloat(v, 'f', decimals(ystep), 64)
		drawText(img, ax.Plot.Min.X-6-textWidth(label), p.Y-glyphH/2, label, ink)
	}
	xstep := niceStep(xmax-xmin, 6)
	for v := math.Ceil(xmin/xstep) * xstep; v <= xmax+xstep/1e6; v += xstep {
		p := ax.Pixel(v, ymin)
		vline(img, p.X, ax.Plot.Min.Y, ax.Plot.Max.Y-1, grid)
		label := strconv.FormatFloat(v, 'f', decimals(xstep), 64)
		drawText(img, p.X-textWidth(label)/2, ax.Plot.Max.Y+5, label, ink)
	}
	// Axis lines just outside the plotting area.
	hline(img, ax.Plot.Min.X-1, ax.Plot.Max.X-1, ax.Plot.Max.Y, ink)
	vline(img, ax.Plot.Min.X-1, ax.Plot.Min.Y, ax.Plot.Max.Y, ink)
	if c.XLabel != "" {
		drawText(img, ax.Plot.Min.X+(ax.Plot.Dx()-textWidth(c.XLabel))/2, c.Height-glyphH-4, c.XLabel, ink)
	}
	if c.YLabel != "" {
		drawText(img, 4, marginTop-glyphH-14, c.YLabel, ink)
	}
	if c.Title != "" {
		drawText(img, (c.Width-textWidth(c.Title))/2, 4, c.Title, ink)
	}

	// Curves, then the legend along the top.
	lx := ax.Plot.Min.X + 4
	for i, s := range c.Series {
		col := s.Color
		if col == (color.RGBA{}) {
			col = Palette[i%len(Palette)]
		}
		for k := range s.X {
			p := ax.Pixel(s.X[k], s.Y[k])
			if k > 0 {
				q := ax.Pixel(s.X[k-1], s.Y[k-1])
				line(img, q, p, col)
			}
			if s.Markers {
				for dy := -2; dy <= 2; dy++ {
					for dx := -2; dx <= 2; dx++ {
						set(img, p.X+dx, p.Y+dy, col)
					}
				}
			} else if len(s.X) == 1 {
				set(img, p.X, p.Y, col)
			}
		}
		ly := marginTop - glyphH - 4
		for dx := range 10 {
			for dy := 2; dy <= 4; dy++ {
				set(img, lx+dx, ly+dy, col)
			}
		}
		drawText(img, lx+13, ly, s.Name, ink)
		lx += 13 + textWidth(s.Name) + 14
	}
	return img, ax, nil
}

// decimals is how many decimals tick labels spaced step apart need.
func decimals(step float64) int {
	d := 0
	for step < 1-1e-9 && d < 6 {
		step *= 10
		d++
	}
	return d
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		set(img, x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		set(img, x, y, c)
	}
}

// line draws a 2-pixel-wide segment (Bresenham, with the pixel below each
// step filled as well) from a to b, both ends included.
func line(img *image.RGBA, a, b image.Point, c color.RGBA) {
	dx, dy := abs(b.X-a.X), -abs(b.Y-a.Y)
	sx, sy := sign(b.X-a.X), sign(b.Y-a.Y)
	e := dx + dy
	x, y := a.X, a.Y
	for {
		set(img, x, y, c)
		set(img, x, y+1, c)
		if x == b.X && y == b.Y {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x += sx
		}
		if e2 <= dx {
			e += dx
			y += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// Encode draws c and writes it to w as PNG.
func Encode(w io.Writer, c Chart) error {
	img, _, err := Draw(c)
	if err != nil {
		return err
	}
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("plot: encode png: %w", err)
	}
	return nil
}
