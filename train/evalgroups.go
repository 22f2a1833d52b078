package train

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/rlnode/rlnode/rollout/task"
)

// GroupEval is the evaluation of the held-out problems that share one
// value of an eval.group_by column (MATH-500's subject "Algebra", level
// "5").
type GroupEval struct {
	Column   string `json:"column"`
	Value    string `json:"value"`
	Problems int    `json:"problems"`
	// Accuracy is the mean reward of the final answers (sampled: over all
	// n answers of each problem, mean@n).
	Accuracy float64 `json:"accuracy"`
	// Turn1 is a multi-turn episode's first-answer accuracy (nil: single
	// turn).
	Turn1 *float64 `json:"turn1_accuracy,omitempty"`
	// PassAt[k] is pass@k over the group's problems (sampled only).
	PassAt map[int]float64 `json:"pass_at,omitempty"`
}

// problemGroups are the group_by values of probs, nil when the run has
// none (no group_by, or problems not from a dataset).
func problemGroups(src problemSource, probs []task.Problem) [][]string {
	ds, ok := src.(*datasetSource)
	if !ok || ds.groups == nil {
		return nil
	}
	out := make([][]string, len(probs))
	for i, p := range probs {
		out[i] = ds.groups[p.ID]
	}
	return out
}

// groupEvals breaks an evaluation down by columns: groups[i] are problem
// i's values, final (and first, for multi-turn episodes; else nil) its n
// episodes' rewards at i*n … i*n+n−1 (evalEpisodes' order). passK is
// empty when greedy. Groups come out by column, then value (numbers in
// numeric order).
func groupEvals(columns []string, groups [][]string, final, first []float64, n int, passK []int) []GroupEval {
	if len(groups) == 0 || n < 1 {
		return nil
	}
	type key struct {
		col int
		val string
	}
	acc := map[key]*GroupEval{}
	for i, vals := range groups {
		c, sum, sum1 := 0, 0.0, 0.0
		for j := i * n; j < (i+1)*n; j++ {
			sum += final[j]
			if final[j] == 1 {
				c++
			}
			if first != nil {
				sum1 += first[j]
			}
		}
		for col, v := range vals {
			g := acc[key{col, v}]
			if g == nil {
				g = &GroupEval{Column: columns[col], Value: v}
				if first != nil {
					g.Turn1 = new(float64)
				}
				if len(passK) > 0 {
					g.PassAt = map[int]float64{}
				}
				acc[key{col, v}] = g
			}
			g.Problems++
			g.Accuracy += sum / float64(n)
			if first != nil {
				*g.Turn1 += sum1 / float64(n)
			}
			for _, k := range passK {
				g.PassAt[k] += passAtK(n, c, k)
			}
		}
	}
	keys := make([]key, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.col != b.col {
			return a.col - b.col
		}
		return compareValues(a.val, b.val)
	})
	out := make([]GroupEval, 0, len(keys))
	for _, k := range keys {
		g := acc[k]
		p := float64(g.Problems)
		g.Accuracy /= p
		if g.Turn1 != nil {
			*g.Turn1 /= p
		}
		for kk := range g.PassAt {
			g.PassAt[kk] /= p
		}
		out = append(out, *g)
	}
	return out
}

// compareValues orders group values: numbers numerically and before
// text, text by bytes.
func compareValues(a, b string) int {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Or(cmp.Compare(x, y), cmp.Compare(a, b))
	case errA == nil:
		return -1
	case errB == nil:
		return 1
	}
	return cmp.Compare(a, b)
}
