package ctxopt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// smallLM is the CI variant of the executor model: it trains in seconds
// and follows the format only roughly.
var smallLM = LMConfig{Hidden: 32, Intermediate: 64, Layers: 1, Heads: 2, KVHeads: 1, Context: 1024,
	Vocab: 512, Episodes: 120, Steps: 4, Batch: 8, LR: 1e-3, Seed: 1}

func TestLMTrainCacheRun(t *testing.T) {
	t.Setenv("RLNODE_CACHE", t.TempDir())
	sp := testSpace()
	var log bytes.Buffer
	dir, err := EnsureLM(context.Background(), smallLM, sp, false, &log)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "warmup.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("trained model: %v", err)
		}
	}
	if filepath.Base(dir) != smallLM.Key(sp, false) || !strings.Contains(log.String(), "SFT step 4/4") {
		t.Errorf("dir %s, log:\n%s", dir, log.String())
	}
	log.Reset()
	again, err := EnsureLM(context.Background(), smallLM, sp, false, &log)
	if err != nil || again != dir || log.Len() != 0 {
		t.Errorf("second EnsureLM: %s, %v, log %q: want the cached %s without training", again, err, log.String(), dir)
	}
	other := smallLM
	other.Seed = 2
	if other.Key(sp, false) == smallLM.Key(sp, false) || smallLM.Key(sp, true) == smallLM.Key(sp, false) {
		t.Error("the cache key ignores the seed or the python tool")
	}

	eng, err := LoadLM(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	x := &Executor{Engine: eng, Verifier: verify.GSM8K{}, Space: sp, CorrectReward: 5, Cost: CostWeights{ModelCall: 0.1}}
	qs, err := Questions(1, task.HeldOut, []string{task.Word}, []int{2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	c.Structure = ReasonAnswer
	o, err := x.Run(context.Background(), qs[0], c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if o.Usage.ModelCalls < 2 || o.Usage.PromptTokens == 0 || o.Usage.CompletionTokens == 0 || o.Usage.CompletionTokens > 2*sp.Budgets[0] {
		t.Errorf("usage %+v: want a reasoner and an answerer call within the %d-token budgets", o.Usage, sp.Budgets[0])
	}
}
