package recipes

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

//go:embed builtin/*.yaml builtin/data
var builtinFS embed.FS

// variants are built-in names that are another built-in recipe with
// overrides: the documented --set switches, under a name of their own.
var variants = map[string]struct {
	base string
	sets []string
}{
	"mlmt_math_stopgrad": {"mlmt_math", []string{"name=mlmt_math_stopgrad",
		"description=mlmt_math, stop-gradient variant (the solver's refine turn gets no gradient)",
		"algorithm.mlmt.stop_gradient=true"}},
	"mlmt_math_static": {"mlmt_math", []string{"name=mlmt_math_static",
		"description=mlmt_math with static feedback, the baseline (only the solver trains)",
		"algorithm.mlmt.static_feedback=true", "models.feedback=null", "engines.feedback=null", "algorithm.mlmt.train=[solver]"}},
	"bi_level_score_stopgrad": {"bi_level_score", []string{"name=bi_level_score_stopgrad",
		"description=bi_level_score, stop-grad variant (the value loss trains the value head alone, not the feedback model's trunk)",
		"algorithm.bi_level.stop_value_gradients=true"}},
	"ppo_math": {"quickstart", []string{"name=ppo_math",
		"description=quickstart with PPO (the value head on the policy's trunk as critic, GAE), 600 RL steps",
		"algorithm.name=ppo", "models.policy.value_head=true", "schedule.steps=600", "schedule.eval_every=50"}},
	// SFT'd base + LoRA RL: the warm-up trains every weight, GRPO only
	// rank-8 adapters (lr 1e-3: 2e-3 learned less in a trial run).
	"quickstart_lora": {"quickstart", []string{"name=quickstart_lora",
		"description=quickstart with GRPO training rank-8 LoRA adapters on the SFT-warmed base, 600 RL steps",
		"models.policy.lora={rank: 8, alpha: 16}", "algorithm.lr=1e-3", "schedule.steps=600", "schedule.eval_every=50"}},
}

type builtinRecipe struct {
	file string // e.g. mlmt_math.yaml
	src  []byte
	sets []string
}

func builtin(name string) (builtinRecipe, bool) {
	base, sets := name, []string(nil)
	if v, ok := variants[name]; ok {
		base, sets = v.base, v.sets
	}
	if strings.ContainsAny(base, "/.") {
		return builtinRecipe{}, false
	}
	src, err := builtinFS.ReadFile("builtin/" + base + ".yaml")
	if err != nil {
		return builtinRecipe{}, false
	}
	return builtinRecipe{file: base + ".yaml", src: src, sets: sets}, true
}

// IsBuiltin says whether name is a built-in recipe's (Load takes it as
// one before any file of that name).
func IsBuiltin(name string) bool {
	_, ok := builtin(name)
	return ok
}

// BuiltinNames lists the built-in recipes, variants included, sorted.
func BuiltinNames() []string {
	var names []string
	entries, _ := builtinFS.ReadDir("builtin")
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	for n := range variants {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// BuiltinSource returns the YAML of a built-in recipe and, for a variant,
// the overrides that make it.
func BuiltinSource(name string) (src []byte, sets []string, ok bool) {
	b, ok := builtin(name)
	return b.src, b.sets, ok
}

// builtinDataDir is where the built-in recipes' data files are written so
// that they are ordinary files for the dataset loader: a directory under
// $RLNODE_HOME named by the content's hash, written once.
func builtinDataDir() (string, error) {
	h := sha256.New()
	var files []string
	err := fs.WalkDir(builtinFS, "builtin/data", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := builtinFS.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, p)
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	dir := filepath.Join(rlnodeHome(), "recipes", hex.EncodeToString(h.Sum(nil))[:16])
	for _, p := range files {
		dst := filepath.Join(dir, strings.TrimPrefix(p, "builtin/"))
		want, _ := builtinFS.ReadFile(p)
		if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, want) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("built-in recipe data: %w", err)
		}
		tmp := fmt.Sprintf("%s.%d.tmp", dst, os.Getpid())
		if err := os.WriteFile(tmp, want, 0o644); err != nil {
			return "", fmt.Errorf("built-in recipe data: %w", err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			return "", fmt.Errorf("built-in recipe data: %w", err)
		}
	}
	return dir, nil
}

// rlnodeHome is cluster.Home: $RLNODE_HOME, else ~/.rlnode (train's tests
// check that the built-in data lands under cluster.Home).
func rlnodeHome() string {
	if h := os.Getenv("RLNODE_HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".rlnode")
	}
	return ".rlnode"
}
