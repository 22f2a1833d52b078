package rl

import (
	"math"
	"strings"
	"testing"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func assertFloats(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if !near(got[i], want[i], tol) {
			t.Fatalf("%s[%d] = %.9g, want %.9g", what, i, got[i], want[i])
		}
	}
}

func assertTokens(t *testing.T, what string, got, want [][]float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d sequences, want %d", what, len(got), len(want))
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("%s[%d]: %d tokens, want %d", what, i, len(got[i]), len(want[i]))
		}
		for j := range got[i] {
			if !near(float64(got[i][j]), float64(want[i][j]), tol) {
				t.Fatalf("%s[%d][%d] = %.9g, want %.9g", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

func assertErr(t *testing.T, err error, wantSub string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), wantSub) {
		t.Fatalf("err = %v, want it to contain %q", err, wantSub)
	}
}

// ones returns a mask of all-1 sequences of the given lengths.
func ones(lengths ...int) [][]float32 {
	m := make([][]float32, len(lengths))
	for i, n := range lengths {
		m[i] = make([]float32, n)
		for j := range m[i] {
			m[i][j] = 1
		}
	}
	return m
}

func f32(x float64) float32 { return float32(x) }
