package train

import (
	"github.com/rlnode/rlnode/recipes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/data"
)

// grpo_gsm8k and mbpp map onto the driver: the verifier, the verify
// workers, and mbpp's dataset with its embedded file resolved to an
// absolute path whatever the working directory.
func TestFromRecipeDataAndVerifier(t *testing.T) {
	for _, c := range []struct {
		recipe   string
		sets     []string
		verifier string
		workers  int
		dataset  bool
		verifyOn string
	}{
		{"quickstart", nil, "", 0, false, ""},
		{"grpo_gsm8k", nil, VerifierGSM8K, 0, false, ""},
		{"mbpp", nil, VerifierCode, 0, true, ""},
		{"mbpp", []string{"data.verify_workers=3"}, VerifierCode, 3, true, ""},
		{"mbpp", []string{"data.verify_on=cluster"}, VerifierCode, 0, true, VerifyOnCluster},
	} {
		t.Run(c.recipe, func(t *testing.T) {
			t.Chdir(t.TempDir())
			l, err := recipes.Load(c.recipe, c.sets)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := FromRecipe(l, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Verifier != c.verifier || cfg.VerifyWorkers != c.workers || cfg.VerifyOn != c.verifyOn {
				t.Errorf("verifier %q workers %d on %q, want %q %d %q", cfg.Verifier, cfg.VerifyWorkers, cfg.VerifyOn, c.verifier, c.workers, c.verifyOn)
			}
			if (cfg.Dataset != nil) != c.dataset {
				t.Fatalf("dataset %+v, want set: %v", cfg.Dataset, c.dataset)
			}
			if cfg.Dataset == nil {
				return
			}
			if !filepath.IsAbs(cfg.Dataset.Train) {
				t.Errorf("train %q is not absolute", cfg.Dataset.Train)
			}
			ex, err := data.Load(cfg.Dataset.Train, cfg.Dataset.Mapping)
			if err != nil {
				t.Fatal(err)
			}
			if len(ex) == 0 || len(ex[0].Ref.Tests) == 0 {
				t.Errorf("loaded %d examples, first %+v: want tests", len(ex), ex)
			}
		})
	}
}

// An SFT warm-up with verifier code needs the reference programs' column.
func TestCodeWarmupNeedsReferenceColumn(t *testing.T) {
	_, err := recipes.Load("mbpp", []string{`data.dataset.columns.answer=""`})
	if err == nil || !strings.Contains(err.Error(), "sft.steps") || !strings.Contains(err.Error(), "columns.answer") {
		t.Errorf("error %v, want one naming sft.steps and the answer column", err)
	}
	if _, err := recipes.Load("mbpp", []string{`data.dataset.columns.answer=""`, "sft.steps=0"}); err != nil {
		t.Errorf("no warm-up, no answer column: %v", err)
	}
}

// data.verify_workers within the recipe's bound but past what this host
// runs at once in the driver's sandbox is refused by name; on the cluster
// it counts tasks in flight, and is not held to this host's bound.
func TestVerifyWorkersHostBound(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"data.verify_workers=4096"}, "verify_workers 4096: at most"},
		{[]string{"data.verify_workers=4096", "data.verify_on=cluster"}, ""},
	} {
		l, err := recipes.Load("mbpp", c.sets)
		if err != nil {
			t.Fatal(err)
		}
		// FromRecipe checks the config it makes.
		_, err = FromRecipe(l, t.TempDir())
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%v: %v, want %q", c.sets, err, c.want)
		}
	}
}
