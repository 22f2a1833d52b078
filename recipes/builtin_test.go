package recipes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"text/template"
)

// Every built-in recipe loads and validates, and its resolved form loads
// back to the same recipe (train's tests run the rest of the checks and
// read the datasets).
func TestBuiltinsLoadAndRoundTrip(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	names := BuiltinNames()
	want := []string{"agent_equations", "agent_game", "agent_rwsft", "agent_tools", "archer", "archer_code", "archer_multiturn", "archer_multiturn_code", "bi_level_score", "bi_level_score_code", "bi_level_score_stopgrad", "grpo_gsm8k", "mbpp", "mlmt_gsm8k", "mlmt_math", "mlmt_math_static", "mlmt_math_stopgrad", "ppo_math", "quickstart", "quickstart_lora", "rl_guided_score", "rl_guided_score_code", "score_code", "score_math", "score_two_stage", "textual_ac", "textual_ac_shared"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("BuiltinNames() = %v, want %v", names, want)
	}
	descriptions := map[string]string{}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			l, err := Load(name, nil)
			if err != nil {
				t.Fatalf("Load(%q):\n%v", name, err)
			}
			if l.Name != name {
				t.Errorf("name = %q, want %q", l.Name, name)
			}
			if other, dup := descriptions[l.Description]; dup || l.Description == "" {
				t.Errorf("description %q is empty or also %s's", l.Description, other)
			}
			descriptions[l.Description] = name
			if l.Engines.Policy.Kind != "native" {
				t.Errorf("engines.policy.kind = %q; built-in recipes run on the native engine", l.Engines.Policy.Kind)
			}
			var b bytes.Buffer
			if err := l.WriteResolved(&b); err != nil {
				t.Fatal(err)
			}
			back, err := Parse("resolved.yaml", b.Bytes(), "", nil)
			if err != nil {
				t.Fatalf("resolved recipe does not load back:\n%v\n%s", err, b.String())
			}
			if d := diffValues("", reflect.ValueOf(back.Recipe), reflect.ValueOf(l.Recipe)); d != nil {
				t.Errorf("resolved recipe loads back different:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// On the pick task only the feedback policy sees the hint, and what RL
// proves is that it learns to pass the hint on. A built-in recipe whose
// warm-up target for the feedback policy names the hint would have SFT
// teach that instead (turn 3 near 1.0 with no RL step): the target may
// name only a position drawn apart from the answer (.AnyHint), while the
// solver's refine prompts may show the hint (sft.refine_feedback).
func TestBuiltinPickWarmupsLeaveTheHintToRL(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	checked := 0
	for _, name := range BuiltinNames() {
		l, err := Load(name, nil)
		if err != nil {
			t.Fatalf("Load(%q): %v", name, err)
		}
		if l.Data.Task == nil || !slices.Contains(l.Data.Task.Kinds, "pick") || l.SFT.FeedbackResponse == "" {
			continue
		}
		checked++
		if strings.Contains(l.SFT.FeedbackResponse, ".Hint") {
			t.Errorf("%s: sft.feedback_response %q names the hint: the warm-up, not RL, would teach the feedback policy to pass it on", name, l.SFT.FeedbackResponse)
		}
		// What the target says must not depend on the hint or the answer:
		// rendered for two problems that differ only in those, it is the same.
		render := func(hint, answer string) string {
			tpl, err := template.New(name).Parse(l.SFT.FeedbackResponse)
			if err != nil {
				t.Fatalf("%s: sft.feedback_response: %v", name, err)
			}
			var b strings.Builder
			fields := map[string]string{"Problem": "Pick: 17 42 8", "Question": "Pick: 17 42 8", "Attempt": "\\boxed{42}", "AnyHint": "3rd", "Hint": hint, "Answer": answer}
			if err := tpl.Execute(&b, fields); err != nil {
				t.Fatalf("%s: sft.feedback_response: %v", name, err)
			}
			return b.String()
		}
		if a, b := render("1st", "17"), render("2nd", "42"); a != b {
			t.Errorf("%s: sft.feedback_response %q renders %q for hint 1st (answer 17) and %q for hint 2nd (answer 42): the warm-up would teach what only RL should", name, l.SFT.FeedbackResponse, a, b)
		}
		if !strings.Contains(l.SFT.FeedbackResponse, ".AnyHint") || !strings.Contains(l.SFT.RefineFeedback, ".Hint") {
			t.Errorf("%s: sft.feedback_response %q, sft.refine_feedback %q: want the form with .AnyHint and the solver shown .Hint", name, l.SFT.FeedbackResponse, l.SFT.RefineFeedback)
		}
	}
	// mlmt_math(_static, _stopgrad), bi_level_score(_stopgrad), rl_guided_score,
	// archer_multiturn, textual_ac(_shared).
	if checked < 9 {
		t.Errorf("checked %d pick recipes with a feedback warm-up, want at least 9", checked)
	}
}

func TestBuiltinVariants(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	st, err := Load("mlmt_math_static", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Algorithm.MLMT.StaticFeedback || st.Models.Feedback != nil || st.Engines.Feedback != nil ||
		!reflect.DeepEqual(st.Algorithm.MLMT.Train, []string{"solver"}) {
		t.Errorf("mlmt_math_static: %+v, feedback model %v, engine %v", st.Algorithm.MLMT, st.Models.Feedback, st.Engines.Feedback)
	}
	sg, err := Load("mlmt_math_stopgrad", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !sg.Algorithm.MLMT.StopGradient || sg.Models.Feedback == nil {
		t.Errorf("mlmt_math_stopgrad: %+v", sg.Algorithm.MLMT)
	}
	// The variants are the documented switches on the base recipe.
	src, sets, ok := BuiltinSource("mlmt_math_static")
	if !ok || len(src) == 0 || len(sets) == 0 {
		t.Fatalf("BuiltinSource(mlmt_math_static) = %d bytes, %v, %v", len(src), sets, ok)
	}
	viaSet, err := Load("mlmt_math", sets)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(viaSet.Recipe, st.Recipe) {
		t.Errorf("mlmt_math with %v differs from mlmt_math_static", sets)
	}
}

// diffValues lists where two values differ, by field path.
func diffValues(path string, a, b reflect.Value) []string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return []string{fmt.Sprintf("%s: nil %v vs %v", path, a.IsNil(), b.IsNil())}
			}
			return nil
		}
		return diffValues(path, a.Elem(), b.Elem())
	case reflect.Struct:
		var out []string
		for i := 0; i < a.NumField(); i++ {
			out = append(out, diffValues(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))...)
		}
		return out
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		return []string{fmt.Sprintf("%s: %#v vs %#v", path, a.Interface(), b.Interface())}
	}
	return nil
}

// The built-in recipe files also load by path (from a checkout), their
// relative paths resolved against their directory.
func TestBuiltinsLoadByPath(t *testing.T) {
	files, err := filepath.Glob("builtin/*.yaml")
	if err != nil || len(files) != len(BuiltinNames())-len(variants) {
		t.Fatalf("built-in files: %v %v; want one for each built-in that is not a variant", files, err)
	}
	for _, f := range files {
		l, err := Load(f, nil)
		if err != nil {
			t.Errorf("%s:\n%v", f, err)
			continue
		}
		if ds := l.Data.Dataset; ds != nil {
			dir, _ := filepath.Abs("builtin/data")
			if _, err := os.Stat(ds.Train); filepath.Dir(ds.Train) != dir || err != nil {
				t.Errorf("%s: train = %s (%v), want a file in %s", f, ds.Train, err, dir)
			}
		}
	}
}
