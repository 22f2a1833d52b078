package train

import (
	"slices"
	"testing"

	"github.com/rlnode/rlnode/rollout/offline"
)

// Each pass over the samples draws every one once, in an order that
// follows from the seed and the draw's number alone.
func TestTrajectoryOrder(t *testing.T) {
	mk := func() *trajectorySamples {
		s := &trajectorySamples{pass: -1}
		for i := range 5 {
			s.samples = append(s.samples, offline.Sample{Step: i})
		}
		return s
	}
	a := mk()
	var passes [][]int
	for p := range 3 {
		var got []int
		for i := range 5 {
			got = append(got, a.at(7, p*5+i).Step)
		}
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if !slices.Equal(sorted, []int{0, 1, 2, 3, 4}) {
			t.Fatalf("pass %d drew %v", p, got)
		}
		passes = append(passes, got)
	}
	if slices.Equal(passes[0], passes[1]) && slices.Equal(passes[1], passes[2]) {
		t.Fatalf("three passes in the same order %v", passes[0])
	}
	b := mk()
	for _, j := range []int{12, 3, 14, 0, 7} {
		if got, want := b.at(7, j).Step, passes[j/5][j%5]; got != want {
			t.Fatalf("draw %d out of order: %d, want %d", j, got, want)
		}
	}
	if c := mk(); c.at(8, 0).Step == passes[0][0] && c.at(8, 1).Step == passes[0][1] && c.at(8, 2).Step == passes[0][2] {
		t.Fatal("seeds 7 and 8 draw the same first three samples")
	}
}
