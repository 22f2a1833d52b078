package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/recipes"
)

// README's short try ("For a short try, `--set …`") is accepted by every
// built-in recipe, with the extra overrides README gives for a recipe
// ("`NAME` also takes `--set …`"): agent_rwsft refused the short try alone
// (its sft.base_steps, 200, must stay below sft.steps) and README did not
// say so.
func TestReadmeShortTryValidatesEveryRecipe(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	_, after, ok := strings.Cut(text, "For a short try, `")
	if !ok {
		t.Fatal("README has no short try")
	}
	common, _, _ := strings.Cut(after, "`")
	if !strings.HasPrefix(common, "--set ") {
		t.Fatalf("README's short try is %q, want --set overrides", common)
	}
	extra := map[string]string{}
	for _, m := range regexp.MustCompile("`(\\w+)` also takes `(--set [^`]+)`").FindAllStringSubmatch(after, -1) {
		extra[m[1]] = m[2]
	}
	names := recipes.BuiltinNames()
	if len(names) < 20 {
		t.Fatalf("only %d built-in recipes", len(names))
	}
	for _, name := range names {
		args := append([]string{"recipe", "validate", name}, strings.Fields(common+" "+extra[name])...)
		if code, stdout, stderr := run(t, args...); code != 0 {
			t.Errorf("rlnode %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		delete(extra, name)
	}
	for name := range extra {
		t.Errorf("README gives short-try overrides for %q, which is not a built-in recipe", name)
	}
}
