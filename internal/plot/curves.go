package plot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// CurveFields are the metrics.jsonl fields Curves plots, in legend order;
// the i-th is drawn in Palette[i]. reward_mean and eval_accuracy are
// required of a run (at least one must have a value); turn1_accuracy and
// turn3_accuracy (and turn3_accuracy_static, the static-feedback
// baseline) appear in MLMT three-turn runs, turn2_accuracy in SCoRe runs.
var CurveFields = []string{"reward_mean", "eval_accuracy", "turn1_accuracy", "turn2_accuracy", "turn3_accuracy", "turn3_accuracy_static"}

// Curves reads metrics.jsonl lines from r (name is the file, for errors)
// and returns the chart of CurveFields against step. A field that is
// absent or null on a line is skipped there (warm-up steps have no
// reward); a later line for the same step replaces an earlier one (a
// resumed run appends steps it had already written before the kill).
// Malformed lines, a missing or non-integer step, and non-finite values
// are errors naming name:line.
func Curves(name string, r io.Reader) (Chart, error) {
	type row struct {
		step int
		vals map[string]float64
	}
	rows := map[int]row{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return Chart{}, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		raw, ok := m["step"]
		if !ok {
			return Chart{}, fmt.Errorf("%s:%d: no \"step\" field", name, line)
		}
		var stepF float64
		if err := json.Unmarshal(raw, &stepF); err != nil || stepF != math.Trunc(stepF) || stepF < 0 {
			return Chart{}, fmt.Errorf("%s:%d: step %s is not a non-negative integer", name, line, raw)
		}
		rw := row{step: int(stepF), vals: map[string]float64{}}
		for _, f := range CurveFields {
			raw, ok := m[f]
			if !ok || string(raw) == "null" {
				continue
			}
			var v float64
			if err := json.Unmarshal(raw, &v); err != nil {
				return Chart{}, fmt.Errorf("%s:%d: %s: %s is not a number", name, line, f, raw)
			}
			rw.vals[f] = v
		}
		rows[rw.step] = rw
	}
	if err := sc.Err(); err != nil {
		return Chart{}, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	steps := make([]int, 0, len(rows))
	for s := range rows {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	c := Chart{Title: "training curves", XLabel: "step", YLabel: "reward / accuracy", Width: 800, Height: 480, XFromZero: true}
	for i, f := range CurveFields {
		s := Series{Name: f, Color: Palette[i%len(Palette)]}
		for _, st := range steps {
			if v, ok := rows[st].vals[f]; ok {
				s.X = append(s.X, float64(st))
				s.Y = append(s.Y, v)
			}
		}
		// Accuracies come at evaluation steps: mark them while sparse.
		s.Markers = f != "reward_mean" && len(s.X) <= 60
		if len(s.X) > 0 {
			c.Series = append(c.Series, s)
		}
	}
	if len(c.Series) == 0 {
		return Chart{}, fmt.Errorf("%s: %d lines, none with reward_mean or eval_accuracy: %w", name, line, ErrNoData)
	}
	return c, nil
}

// WriteCurves reads the metrics.jsonl at metricsPath and writes its chart
// to pngPath (through a temporary file, so a reader never sees half a PNG).
func WriteCurves(metricsPath, pngPath string) error {
	f, err := os.Open(metricsPath)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	defer f.Close()
	c, err := Curves(metricsPath, f)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := Encode(&buf, c); err != nil {
		return fmt.Errorf("plot %s: %w", metricsPath, err)
	}
	tmp := pngPath + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := os.Rename(tmp, pngPath); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}
