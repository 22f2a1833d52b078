package native

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
)

// countingBackend is the cpu backend seen only through backend.Backend
// (no HostMemory, as with a device backend), counting tensors allocated
// and freed. The scheduler goroutine and the test read the counts.
type countingBackend struct {
	backend.Backend
	mu            sync.Mutex
	allocs, frees int
}

func (c *countingBackend) Alloc(n int) backend.Tensor {
	c.mu.Lock()
	c.allocs++
	c.mu.Unlock()
	return c.Backend.Alloc(n)
}

func (c *countingBackend) Free(t backend.Tensor) {
	c.mu.Lock()
	c.frees++
	c.mu.Unlock()
	c.Backend.Free(t)
}

func (c *countingBackend) live() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allocs - c.frees
}

// TestEngineOnDeviceBackend runs the engine on a backend whose memory the
// model cannot read in place: greedy and seeded samples (several per
// prompt, so prefills fork) equal those of the engine on the cpu backend,
// and once the engine is closed every KV cache and scratch tensor it
// allocated has been freed, which a device backend depends on.
func TestEngineOnDeviceBackend(t *testing.T) {
	ref := nativetest.Model(t, nativetest.Config(), 3)
	dev := &countingBackend{Backend: cpu.New()}
	m, err := model.New(nativetest.Config(), dev)
	if err != nil {
		t.Fatal(err)
	}
	w := ref.Weights()
	for _, p := range m.Params() {
		m.B.Upload(p.W, w[p.Name])
	}
	params := dev.live()
	sameGenerations(t, ref, m, forkingRequests(40, 25, 60), 1e-5)
	if n := dev.live(); n != params {
		t.Errorf("after Close, %d tensors live, want the model's %d (%d allocated, %d freed)", n, params, dev.allocs, dev.frees)
	}
}

// forkingRequests are a greedy request and two of seeded samples (several
// per prompt, so prefills fork), of at most a, b and c tokens. The second
// one's caches, sized for its 17-token prompt, grow at the first new
// token.
func forkingRequests(a, b, c int) []engine.Request {
	tok := tokenizer.Builtin()
	seed := int64(5)
	return []engine.Request{
		{Prompt: tok.Encode("The answer is"), Params: engine.SamplingParams{MaxTokens: a}},
		{Prompt: tok.Encode("Let's think step by step about 12 * 7."), Params: engine.SamplingParams{N: 3, MaxTokens: b, Temperature: 0.9, Seed: &seed}},
		{Prompt: tok.Encode("Hi"), Params: engine.SamplingParams{N: 2, MaxTokens: c, Temperature: 1.2, TopK: 30, Seed: &seed}},
	}
}

// sameGenerations runs reqs on engines over ref and over m, whose weights
// equal ref's, and fails t unless the tokens are the same and the log
// probs within tol. Each engine runs a second round, reusing its
// scratch and starting new caches, and is closed before it returns.
func sameGenerations(t *testing.T, ref, m *model.Model, reqs []engine.Request, tol float32) {
	t.Helper()
	tok := tokenizer.Builtin()
	generate := func(m *model.Model) []engine.Result {
		t.Helper()
		e, err := New(m, tok, Config{MaxBatch: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		// A hang guard of many minutes, not testCtx's 30 s: the emulated
		// device runs each block's 32 lanes as OS threads that meet at
		// barriers, so on a loaded machine every barrier waits for the
		// scheduler (4.5 min beside 3 CPU hogs on 2 cores; 4 s without).
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		res, err := e.Generate(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Generate(ctx, reqs[:1]); err != nil {
			t.Fatal(err)
		}
		return res
	}
	want := generate(ref)
	got := generate(m)
	for i := range want {
		for k := range want[i].Samples {
			g, w := got[i].Samples[k], want[i].Samples[k]
			if !slices.Equal(g.TokenIDs, w.TokenIDs) {
				t.Fatalf("request %d sample %d: tokens %v on the device backend, %v on cpu", i, k, g.TokenIDs, w.TokenIDs)
			}
			for j := range w.LogProbs {
				if d := g.LogProbs[j] - w.LogProbs[j]; d > tol || d < -tol {
					t.Fatalf("request %d sample %d token %d: log prob %v on the device backend, %v on cpu", i, k, j, g.LogProbs[j], w.LogProbs[j])
				}
			}
		}
	}
}
