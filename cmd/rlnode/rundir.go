package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/rlnode/rlnode/internal/rundir"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
)

// runFiles are what a run writes into its directory; any of them there
// means the directory holds a run.
var runFiles = []string{recipes.ResolvedFile, "metrics.jsonl", "checkpoints", "curves.png", "vllm-weights", "traces"}

// heldRunFiles are the runFiles dir holds.
func heldRunFiles(dir string) []string {
	var held []string
	for _, f := range runFiles {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			held = append(held, f)
		}
	}
	return held
}

// resumableChanges are the recipe sections a resumed run may change: how
// long it runs and how often it evaluates and saves, how it evaluates,
// where its actors go, and its description. Anything else would continue
// a checkpoint under a different run's settings.
var resumableChanges = []string{"description", "schedule", "eval", "placement", "checkpoint", "trace"}

// checkRunDir refuses to mix two runs in dir. A directory holding a run
// takes a new one only with overwrite (its run files are removed) or
// resume (when the resolved recipe differs from the one saved there only
// where resumableChanges allow). resolved is the new run's resolved
// recipe (Loaded.WriteResolved).
func checkRunDir(dir string, resolved []byte, resume, overwrite bool) error {
	if resume && overwrite {
		return errors.New("--resume and --overwrite: pick one")
	}
	held := heldRunFiles(dir)
	if len(held) == 0 {
		return nil
	}
	switch {
	case overwrite:
		for _, f := range held {
			if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
				return fmt.Errorf("--overwrite: %w", err)
			}
		}
		return nil
	case !resume:
		if cks, err := train.Checkpoints(dir); err == nil && len(cks) == 0 {
			// A run that stopped before its first checkpoint (a placement
			// no node could take, say): --resume has nothing to continue.
			return fmt.Errorf("--out %s holds another run (%s) that wrote no checkpoint, so --resume cannot continue it: replace it with --overwrite, or choose another folder",
				dir, strings.Join(held, ", "))
		}
		return fmt.Errorf("--out %s holds another run (%s): continue it with --resume, replace it with --overwrite, or choose another folder",
			dir, strings.Join(held, ", "))
	}
	saved, err := os.ReadFile(filepath.Join(dir, recipes.ResolvedFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // a run from before recipes were saved: the checkpoint's own checks apply
		}
		return fmt.Errorf("--resume: %w", err)
	}
	changed, err := recipeChanges(saved, resolved)
	if err != nil {
		return fmt.Errorf("--resume: %s: %w", filepath.Join(dir, recipes.ResolvedFile), err)
	}
	var refused []string
	for _, path := range changed {
		section, _, _ := strings.Cut(path, ".")
		ok := false
		for _, s := range resumableChanges {
			ok = ok || section == s
		}
		if !ok {
			refused = append(refused, path)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("--resume: the recipe differs from the run in %s at %s (a resume may change only %s); resume with %s, or start a new run with --overwrite or another --out",
			dir, strings.Join(refused, ", "), strings.Join(resumableChanges, ", "), filepath.Join(dir, recipes.ResolvedFile))
	}
	return nil
}

// recipeChanges lists the dotted paths at which two resolved recipes
// differ, sorted.
func recipeChanges(a, b []byte) ([]string, error) {
	var ma, mb map[string]any
	if err := yaml.Unmarshal(a, &ma); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &mb); err != nil {
		return nil, err
	}
	var out []string
	diffValues("", ma, mb, &out)
	sort.Strings(out)
	return out, nil
}

func diffValues(path string, a, b any, out *[]string) {
	ma, aok := a.(map[string]any)
	mb, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, path)
		}
		return
	}
	keys := map[string]bool{}
	for k := range ma {
		keys[k] = true
	}
	for k := range mb {
		keys[k] = true
	}
	for k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		diffValues(p, ma[k], mb[k], out)
	}
}

// reserveRunDir makes the folder of a run given no --out: base, or base-2,
// base-3... when that exists, each made with one mkdir so that runs
// started in the same second (base names the second) get one each.
var reserveRunDir = rundir.Reserve
