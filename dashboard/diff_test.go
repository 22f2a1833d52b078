package dashboard

import (
	"reflect"
	"testing"
)

func TestRecipeDiff(t *testing.T) {
	a := "# resolved recipe: builtin:quickstart\nname: quickstart\nseed: 1\nalgorithm:\n  name: grpo\n  clip_high: 0.28\ndata:\n  task:\n    kinds: [arithmetic]\n"
	b := "name: quickstart\nseed: 2\nalgorithm:\n  name: grpo\n  clip_high: 0.2\n  epochs: 2\ndata:\n  task:\n    kinds: [arithmetic, linear]\n"
	for _, c := range []struct {
		name    string
		recipes []string
		want    []DiffRow
	}{
		{"the same recipe", []string{a, a}, []DiffRow{}},
		{"two recipes", []string{a, b}, []DiffRow{
			{"algorithm.clip_high", []string{"0.28", "0.2"}},
			{"algorithm.epochs", []string{"", "2"}},
			{"data.task.kinds", []string{`["arithmetic"]`, `["arithmetic","linear"]`}},
			{"seed", []string{"1", "2"}},
		}},
		{"three, one differing", []string{a, a, b}, []DiffRow{
			{"algorithm.clip_high", []string{"0.28", "0.28", "0.2"}},
			{"algorithm.epochs", []string{"", "", "2"}},
			{"data.task.kinds", []string{`["arithmetic"]`, `["arithmetic"]`, `["arithmetic","linear"]`}},
			{"seed", []string{"1", "1", "2"}},
		}},
		{"a setting absent or empty", []string{"x: \"\"\n", "y: 1\n"}, []DiffRow{
			{"x", []string{"", ""}},
			{"y", []string{"", "1"}},
		}},
	} {
		var in [][]byte
		for _, r := range c.recipes {
			in = append(in, []byte(r))
		}
		got, err := RecipeDiff(in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
	if _, err := RecipeDiff([][]byte{[]byte(a), []byte("seed: [1\n")}); err == nil {
		t.Error("a recipe that is not YAML was compared")
	}
}
