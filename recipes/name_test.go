package recipes

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestRunNameIsOnePathSegment: a recipe's name becomes the run's folder
// runs/NAME-DATE, so one that would leave runs/ is refused.
func TestRunNameIsOnePathSegment(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"my-run", true},
		{"gsm8k.v2_run", true},
		{"..x", true},
		{"../../X", false},
		{"a/b", false},
		{"/tmp/x", false},
		{"..", false},
		{".", false},
		{`a\b`, false},
	}
	for _, c := range cases {
		_, err := Load("grpo_gsm8k", []string{"name=" + c.name})
		var es Errors
		if err != nil && !errors.As(err, &es) {
			t.Fatalf("name %q: %v", c.name, err)
		}
		onName := slices.ContainsFunc(es, func(e *Error) bool { return e.Path == "name" })
		if onName == c.ok {
			t.Errorf("name %q: error %v; want accepted %v", c.name, err, c.ok)
		}
	}
}

// A checkpoint folder whose config.json or tokenizer.json is a pipe is
// refused at validation: the run that read it hung at "starting the
// learner".
func TestModelFilesMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "tokenizer.json"), 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	_, err := Load("quickstart", []string{"models.policy.init=null", "models.policy.path=" + dir})
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json in "+dir+" is not a regular file") {
		t.Errorf("a pipe for tokenizer.json: %v", err)
	}
}
