package native

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
)

// Score gives the sampling logprobs back at temperature 1 (the same
// tokens scored by the training forward), for several requests in one
// call while other requests generate.
func TestScoreMatchesSampling(t *testing.T) {
	e, m := testEngine(t, Config{})
	weights := m.Weights()
	tok := tokenizer.Builtin()
	seed := int64(5)
	req := engine.Request{ID: "s", Prompt: tok.Encode("Pick: 17 42 8"), Params: engine.SamplingParams{MaxTokens: 12, Temperature: 1, Seed: &seed, N: 3}}
	res, err := e.Generate(testCtx(t), []engine.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []engine.ScoreRequest
	for _, s := range res[0].Samples {
		reqs = append(reqs, engine.ScoreRequest{Prompt: res[0].PromptTokenIDs, Response: s.TokenIDs})
	}
	// A request of another prompt, checked against the training forward.
	other := engine.ScoreRequest{Prompt: tok.Encode("5 + 7 ="), Response: tok.Encode(" 12")}
	reqs = append(reqs, other)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // generation going on beside the scoring
		defer wg.Done()
		if _, err := e.Generate(testCtx(t), []engine.Request{{ID: "busy", Prompt: tok.Encode("Tom has"), Params: engine.SamplingParams{MaxTokens: 24}}}); err != nil {
			t.Error(err)
		}
	}()
	got, err := e.Score(testCtx(t), reqs)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("%d scored, want %d", len(got), len(reqs))
	}
	for i, s := range res[0].Samples {
		if len(got[i]) != len(s.LogProbs) {
			t.Fatalf("sample %d: %d scores for %d tokens", i, len(got[i]), len(s.LogProbs))
		}
		for k := range s.LogProbs {
			if d := math.Abs(float64(got[i][k] - s.LogProbs[k])); d > logpTol {
				t.Errorf("sample %d token %d: score %v, sampling logprob %v", i, k, got[i][k], s.LogProbs[k])
			}
		}
	}
	z := referenceLogits(t, weights, other.Prompt, other.Response)
	for k, id := range other.Response {
		if want := logSoftmaxT(z[k], 1, id); math.Abs(float64(got[3][k])-want) > logpTol {
			t.Errorf("token %d: score %v, training forward %v", k, got[3][k], want)
		}
	}
}

func TestScoreRefusals(t *testing.T) {
	e, _ := testEngine(t, Config{})
	long := make([]int, e.m.Config.MaxPositions)
	for _, c := range []struct {
		name string
		req  engine.ScoreRequest
		want string
	}{
		{"no response", engine.ScoreRequest{Prompt: []int{1}}, "0 response tokens"},
		{"no prompt", engine.ScoreRequest{Response: []int{1}}, "0 prompt"},
		{"vocabulary", engine.ScoreRequest{Prompt: []int{1}, Response: []int{e.m.Config.VocabSize}}, "outside the vocabulary"},
		{"negative", engine.ScoreRequest{Prompt: []int{-1}, Response: []int{1}}, "outside the vocabulary"},
		{"context", engine.ScoreRequest{Prompt: long, Response: []int{1}}, "the context is"},
	} {
		_, err := e.Score(testCtx(t), []engine.ScoreRequest{{Prompt: []int{1}, Response: []int{2}}, c.req})
		if !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "request 1") {
			t.Errorf("%s: %v, want a bad request naming request 1: %q", c.name, err, c.want)
		}
	}
	e.Close()
	if _, err := e.Score(testCtx(t), []engine.ScoreRequest{{Prompt: []int{1}, Response: []int{2}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed engine: %v", err)
	}
}
