package shard

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

func tinyModel() *model.Config {
	return &model.Config{Architecture: model.Qwen2, HiddenSize: 16, IntermediateSize: 32, NumLayers: 2, NumHeads: 2,
		NumKVHeads: 1, HeadDim: 8, VocabSize: 12, MaxPositions: 32, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

func tinyConfig(alg string, shards, stage int) learner.Config {
	c := learner.DefaultConfig()
	c.Model, c.Seed, c.Algorithm = tinyModel(), 3, alg
	c.LR = 1e-3
	c.MicroBatchSeqs = 3
	c.MaxResponseLen = 4
	c.Shards, c.ZeROStage = shards, stage
	return c
}

// groupBatch is two groups of four samples (step varies the rewards).
func groupBatch(step int) learner.Batch {
	b := learner.Batch{PolicyID: "solver"}
	resp := [][]int32{{5, 6, 7}, {8, 6}, {5, 9, 9, 1}, {2, 3}, {5, 1}, {4, 4, 4}, {8, 8}, {5, 5, 5}}
	for i, r := range resp {
		b.Prompts = append(b.Prompts, []int32{1, int32(2 + i/4), 3})
		b.Responses = append(b.Responses, r)
		var rew float64
		if r[(step)%len(r)] == 5 || (i+step)%3 == 0 {
			rew = 1
		}
		b.Rewards = append(b.Rewards, rew)
		b.GroupIDs = append(b.GroupIDs, int64(i/4))
	}
	return b
}

func newLearner(t testing.TB, c learner.Config) *learner.Learner {
	t.Helper()
	l, err := learner.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// memGroup joins n fresh learners over in-process transports.
func memGroup(t testing.TB, c learner.Config, o Options) []*Rank {
	t.Helper()
	return memGroupOf(t, c, o, false)
}

// memGroupOf is memGroup whose ranks, with shared, reduce through shared
// buffers (closed when the test ends).
func memGroupOf(t testing.TB, c learner.Config, o Options, shared bool) []*Rank {
	t.Helper()
	ts := memTransports(c.Shards, shared)
	ranks := make([]*Rank, c.Shards)
	errs := make([]error, c.Shards)
	var wg sync.WaitGroup
	for i := range ranks {
		l := newLearner(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks[i], errs[i] = Join(l, ts[i], 1, o)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("join rank %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range ranks {
			r.Close()
		}
	})
	return ranks
}

// switchAll switches every rank's learner to alg at once (each waits for
// the others in the switch's collective).
func switchAll(t testing.TB, ranks []*Rank, alg string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ranks))
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Learner().SetAlgorithm(alg, 0)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: switch to %s: %v", r, alg, err)
		}
	}
}

// wantAborted waits for done's collective error: ErrAborted carrying cause.
func wantAborted(t *testing.T, done <-chan error, cause string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), cause) {
			t.Errorf("got %v, want ErrAborted with the cause", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("abort did not end the collective")
	}
}

// trainAll runs one Train on every rank at once.
func trainAll(ranks []*Rank, b learner.Batch) ([]learner.Stats, []error) {
	st := make([]learner.Stats, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st[i], errs[i] = r.Learner().Train(b)
		}()
	}
	wg.Wait()
	return st, errs
}

func maxDiff(a, b map[string][]float32) (float64, string) {
	var d float64
	var at string
	for name, x := range a {
		for i := range x {
			if e := math.Abs(float64(x[i] - b[name][i])); e > d || math.IsNaN(e) {
				d, at = e, name
			}
		}
	}
	return d, at
}
