package optim

import (
	"fmt"
	"sort"
	"strings"
)

// Tensor is one named flat float32 tensor of optimizer state, ready to be
// written to a safetensors file.
type Tensor struct {
	Name string
	Data []float32
}

// State prefixes: AdamW's first and second moments of param "x" are stored
// as "exp_avg.x" and "exp_avg_sq.x" (torch's state keys).
const (
	ExpAvgPrefix   = "exp_avg."
	ExpAvgSqPrefix = "exp_avg_sq."
)

// AdamWState is what a checkpoint keeps of an AdamW: its step count and
// moments. Hyperparameters are not part of it; they come from the recipe.
type AdamWState struct {
	Step    int
	Tensors []Tensor
}

// State returns the step count and the moments of every param stepped so
// far, sorted by param name ("exp_avg.<name>" then "exp_avg_sq.<name>"). The
// tensors share memory with the optimizer: write them out before the next
// Step and do not modify them.
func (o *AdamW) State() AdamWState {
	names := make([]string, 0, len(o.moments))
	for name := range o.moments {
		names = append(names, name)
	}
	sort.Strings(names)
	s := AdamWState{Step: o.step, Tensors: make([]Tensor, 0, 2*len(names))}
	for _, name := range names {
		m := o.moments[name]
		s.Tensors = append(s.Tensors,
			Tensor{Name: ExpAvgPrefix + name, Data: m.expAvg},
			Tensor{Name: ExpAvgSqPrefix + name, Data: m.expAvgSq})
	}
	return s
}

// LoadState replaces the optimizer's step count and moments with s, which
// must hold exactly the two moment tensors of every param in params, each
// with the param's size, and nothing else; a state at step 0 may instead
// hold no tensors (a fresh optimizer). On error nothing is changed. The data
// is copied.
func (o *AdamW) LoadState(params []*Param, s AdamWState) error {
	if s.Step < 0 {
		return fmt.Errorf("adamw load state: negative step %d", s.Step)
	}
	if err := checkShapes(params); err != nil {
		return fmt.Errorf("adamw load state: %w", err)
	}
	if s.Step == 0 && len(s.Tensors) == 0 {
		o.step, o.moments = 0, nil
		return nil
	}
	byName := make(map[string][]float32, len(s.Tensors))
	for _, t := range s.Tensors {
		if _, dup := byName[t.Name]; dup {
			return fmt.Errorf("adamw load state: tensor %q appears twice", t.Name)
		}
		byName[t.Name] = t.Data
	}
	loaded := make(map[string]*moments, len(params))
	for _, p := range params {
		var m moments
		for _, f := range []struct {
			prefix string
			dst    *[]float32
		}{{ExpAvgPrefix, &m.expAvg}, {ExpAvgSqPrefix, &m.expAvgSq}} {
			name := f.prefix + p.Name
			data, ok := byName[name]
			if !ok {
				return fmt.Errorf("adamw load state: tensor %q missing", name)
			}
			if len(data) != len(p.Data) {
				return fmt.Errorf("adamw load state: tensor %q has %d elements, param %q has %d", name, len(data), p.Name, len(p.Data))
			}
			if i := firstNonFinite(data); i >= 0 {
				return fmt.Errorf("adamw load state: tensor %q: %v at index %d", name, data[i], i)
			}
			if f.prefix == ExpAvgSqPrefix {
				// A mean of squares is never below 0; the square root
				// of one that is made the next update NaN, and the
				// checkpoint after it held NaN weights.
				for i, x := range data {
					if x < 0 {
						return fmt.Errorf("adamw load state: tensor %q: %v at index %d, below 0 (a mean of squared gradients)", name, x, i)
					}
				}
			}
			*f.dst = append([]float32(nil), data...)
			delete(byName, name)
		}
		loaded[p.Name] = &m
	}
	for name := range byName {
		what := "unknown tensor"
		if strings.HasPrefix(name, ExpAvgPrefix) || strings.HasPrefix(name, ExpAvgSqPrefix) {
			what = "moments of a param not being trained"
		}
		return fmt.Errorf("adamw load state: tensor %q: %s", name, what)
	}
	o.step = s.Step
	o.moments = loaded
	return nil
}
