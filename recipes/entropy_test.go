package recipes

import (
	"errors"
	"strings"
	"testing"
)

// algorithm.entropy_target and its companions: refused with an error
// naming the field, alone.
func TestEntropyTargetValidation(t *testing.T) {
	for _, tc := range []struct {
		recipe string // a built-in recipe; "" is load_test's base
		sets   []string
		want   string
	}{
		{"", []string{"algorithm.entropy_target=0"}, "algorithm.entropy_target: 0: want a finite mean token entropy > 0"},
		{"", []string{"algorithm.entropy_target=-0.3"}, "algorithm.entropy_target: -0.3: want a finite mean token entropy > 0"},
		{"", []string{"algorithm.entropy_target=.inf"}, "algorithm.entropy_target: want a finite number"},
		{"", []string{"algorithm.entropy_target=0.3", "algorithm.entropy_coef_step=-0.005"}, "algorithm.entropy_coef_step: -0.005: want a finite value ≥ 0"},
		{"", []string{"algorithm.entropy_target=0.3", "algorithm.entropy_coef_max=-1"}, "algorithm.entropy_coef_max: -1: want a value in [0, 1]"},
		{"", []string{"algorithm.entropy_target=0.3", "algorithm.entropy_coef_max=2"}, "algorithm.entropy_coef_max: 2: want a value in [0, 1]"},
		{"", []string{"algorithm.entropy_target=0.3", "algorithm.entropy_coef=0.1"}, "algorithm.entropy_coef: 0.1: the adapted coefficient starts here, so it must be at most algorithm.entropy_coef_max 0.05"},
		{"", []string{"algorithm.entropy_coef_step=0.01"}, "algorithm.entropy_coef_step: 0.01: only with algorithm.entropy_target"},
		{"", []string{"algorithm.entropy_coef_max=0.1"}, "algorithm.entropy_coef_max: 0.1: only with algorithm.entropy_target"},
		{"", []string{"algorithm.entropy_target=0.3", "algorithm.name=rw_sft"}, `algorithm.entropy_target: 0.3: no policy this run trains has an entropy term to adapt (algorithm.name "rw_sft")`},
		{"mlmt_math", []string{"algorithm.entropy_target=0.3", "algorithm.name=rw_sft", "algorithm.mlmt.feedback_algorithm=rw_sft"},
			`no policy this run trains has an entropy term to adapt (algorithm.name "rw_sft", algorithm.mlmt.feedback_algorithm "rw_sft", algorithm.mlmt.train [solver feedback])`},
		{"mlmt_math", []string{"algorithm.entropy_target=0.3", "algorithm.name=rw_sft", "algorithm.mlmt.train=[solver]", "algorithm.mlmt.feedback_algorithm=grpo"},
			"algorithm.entropy_target: 0.3: no policy this run trains has an entropy term"},
	} {
		t.Run(strings.Join(tc.sets, " "), func(t *testing.T) {
			var err error
			if tc.recipe == "" {
				_, err = Parse("base.yaml", []byte(base), t.TempDir(), tc.sets)
			} else {
				_, err = Load(tc.recipe, tc.sets)
			}
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 {
				t.Fatalf("want exactly one error containing %q, got:\n%v", tc.want, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// A target alone gets the default step and ceiling; no target leaves all
// three absent (the fixed bonus, and the resolved recipe as before).
func TestEntropyTargetDefaults(t *testing.T) {
	l, err := Parse("base.yaml", []byte(base), t.TempDir(), []string{"algorithm.entropy_target=0.3", "algorithm.entropy_coef=0.01"})
	if err != nil {
		t.Fatal(err)
	}
	a := l.Algorithm
	if a.EntropyTarget == nil || *a.EntropyTarget != 0.3 || a.EntropyCoefStep == nil || *a.EntropyCoefStep != DefaultEntropyCoefStep ||
		a.EntropyCoefMax == nil || *a.EntropyCoefMax != DefaultEntropyCoefMax {
		t.Errorf("target %v, step %v, max %v: want 0.3 and the defaults", a.EntropyTarget, a.EntropyCoefStep, a.EntropyCoefMax)
	}
	// Both policies of an mlmt run with the feedback policy's own
	// algorithm: accepted while one has an entropy term.
	for _, sets := range [][]string{
		{"algorithm.entropy_target=0.3", "algorithm.name=rw_sft", "algorithm.mlmt.feedback_algorithm=grpo"},
		{"algorithm.entropy_target=0.3", "algorithm.mlmt.feedback_algorithm=rw_sft"},
	} {
		if _, err := Load("mlmt_math", sets); err != nil {
			t.Errorf("%v: %v", sets, err)
		}
	}
	l, err = Parse("base.yaml", []byte(base), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := l.Algorithm; a.EntropyTarget != nil || a.EntropyCoefStep != nil || a.EntropyCoefMax != nil {
		t.Errorf("no target: target %v, step %v, max %v: want all absent", a.EntropyTarget, a.EntropyCoefStep, a.EntropyCoefMax)
	}
}
