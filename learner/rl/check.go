package rl

import (
	"fmt"
	"math"
)

// tokenField is one named per-token field of a batch, for validation.
type tokenField struct {
	name     string
	data     [][]float32
	optional bool // nil allowed
}

// checkTokens checks that every present field has the shape of mask, that
// mask is 0/1, and that every field is finite at mask-1 tokens.
// Errors name the field, the sequence and the token.
func checkTokens(mask [][]float32, fields ...tokenField) error {
	if mask == nil {
		return fmt.Errorf("mask is nil")
	}
	for i, m := range mask {
		for t, v := range m {
			if v != 0 && v != 1 {
				return fmt.Errorf("mask[%d][%d] = %v, want 0 or 1", i, t, v)
			}
		}
	}
	for _, f := range fields {
		if f.data == nil {
			if f.optional {
				continue
			}
			return fmt.Errorf("%s is nil", f.name)
		}
		if len(f.data) != len(mask) {
			return fmt.Errorf("%s has %d sequences, mask has %d", f.name, len(f.data), len(mask))
		}
		for i, seq := range f.data {
			if len(seq) != len(mask[i]) {
				return fmt.Errorf("%s[%d] has %d tokens, mask[%d] has %d", f.name, i, len(seq), i, len(mask[i]))
			}
			for t, v := range seq {
				if mask[i][t] != 0 && !finite(float64(v)) {
					return fmt.Errorf("%s[%d][%d] = %v", f.name, i, t, v)
				}
			}
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkScalars refuses NaN or ±Inf in a per-sequence field.
func checkScalars(name string, x []float64) error {
	for i, v := range x {
		if !finite(v) {
			return fmt.Errorf("%s[%d] = %v", name, i, v)
		}
	}
	return nil
}

// maskCount is the number of loss tokens of one sequence.
func maskCount(m []float32) float64 {
	var c float64
	for _, v := range m {
		c += float64(v)
	}
	return c
}

// zerosLike allocates a ragged batch shaped like mask.
func zerosLike(mask [][]float32) [][]float32 {
	n := 0
	for _, m := range mask {
		n += len(m)
	}
	flat := make([]float32, n)
	out := make([][]float32, len(mask))
	for i, m := range mask {
		out[i], flat = flat[:len(m):len(m)], flat[len(m):]
	}
	return out
}
