package train

import (
	"math"
	"reflect"
	"testing"
)

// groupEvals: accuracy per value (mean@n over a group's answers), turn-1
// accuracy for multi-turn episodes, pass@k from each problem's correct
// count, values in numeric order before text.
func TestGroupEvals(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	for _, tc := range []struct {
		name         string
		groups       [][]string
		final, first []float64
		n            int
		passK        []int
		want         []GroupEval
	}{
		{"greedy", [][]string{{"Algebra", "5"}, {"Geometry", "10"}, {"Algebra", "2"}}, []float64{1, 0, 0}, nil, 1, nil, []GroupEval{
			{Column: "subject", Value: "Algebra", Problems: 2, Accuracy: 0.5},
			{Column: "subject", Value: "Geometry", Problems: 1, Accuracy: 0},
			{Column: "level", Value: "2", Problems: 1, Accuracy: 0},
			{Column: "level", Value: "5", Problems: 1, Accuracy: 1},
			{Column: "level", Value: "10", Problems: 1, Accuracy: 0},
		}},
		{"sampled with pass@k", [][]string{{"a", "x"}, {"a", "1"}}, []float64{1, 0, 0, 0, 1, 1, 0, 0}, nil, 4, []int{1, 4}, []GroupEval{
			// Problem 0: 1 of 4 right; problem 1: 2 of 4.
			{Column: "subject", Value: "a", Problems: 2, Accuracy: 0.375, PassAt: map[int]float64{1: 0.375, 4: 1}},
			{Column: "level", Value: "1", Problems: 1, Accuracy: 0.5, PassAt: map[int]float64{1: 0.5, 4: 1}},
			{Column: "level", Value: "x", Problems: 1, Accuracy: 0.25, PassAt: map[int]float64{1: 0.25, 4: 1}},
		}},
		{"multi-turn", [][]string{{"a", "1"}, {"b", "1"}}, []float64{1, 1}, []float64{0, 1}, 1, nil, []GroupEval{
			{Column: "subject", Value: "a", Problems: 1, Accuracy: 1, Turn1: f(0)},
			{Column: "subject", Value: "b", Problems: 1, Accuracy: 1, Turn1: f(1)},
			{Column: "level", Value: "1", Problems: 2, Accuracy: 1, Turn1: f(0.5)},
		}},
		{"partial reward", [][]string{{"a", "1"}}, []float64{0.5, 1}, nil, 2, []int{1}, []GroupEval{
			// A reward of 0.5 counts in the mean, not as a correct answer.
			{Column: "subject", Value: "a", Problems: 1, Accuracy: 0.75, PassAt: map[int]float64{1: 0.5}},
			{Column: "level", Value: "1", Problems: 1, Accuracy: 0.75, PassAt: map[int]float64{1: 0.5}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := groupEvals([]string{"subject", "level"}, tc.groups, tc.final, tc.first, tc.n, tc.passK)
			for i := range got {
				for k, v := range got[i].PassAt {
					got[i].PassAt[k] = math.Round(v*1e12) / 1e12
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
	if got := groupEvals([]string{"subject"}, nil, []float64{1}, nil, 1, nil); got != nil {
		t.Errorf("no groups: %+v, want nil", got)
	}
}
