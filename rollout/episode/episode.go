package episode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Policy is one trainable policy taking part in episodes: the engine that
// serves it and how it samples. ID is recorded in every Turn it produced.
type Policy struct {
	ID     string
	Engine engine.Engine
	Params engine.SamplingParams
}

func (p Policy) check(role string) error {
	switch {
	case p.ID == "":
		return fmt.Errorf("%s policy: empty id", role)
	case p.Engine == nil:
		return fmt.Errorf("%s policy %q: no engine", role, p.ID)
	case p.Params.MaxTokens <= 0:
		return fmt.Errorf("%s policy %q: MaxTokens %d must be > 0", role, p.ID, p.Params.MaxTokens)
	}
	return nil
}

// Batch is the input of one rollout step: N episodes (a GRPO group) per
// example; example i gets group id FirstGroupID+i.
type Batch struct {
	Examples     []data.Example
	N            int
	FirstGroupID int64
}

func (b Batch) check() error {
	if len(b.Examples) == 0 {
		return errors.New("batch: no examples")
	}
	if b.N <= 0 {
		return fmt.Errorf("batch: %d samples per example, want > 0", b.N)
	}
	return nil
}

// Runner runs one kind of episode over a batch and returns its turns
// (episode after episode, in group and sample order) in the trajectory
// schema. Bad model output never fails a run: it scores 0 with a Note. Run
// fails only when an engine fails as a whole (unreachable, ctx done).
type Runner interface {
	Run(ctx context.Context, b Batch) ([]data.Turn, error)
}

// Limits bound what a model answer may carry into scoring and into later
// prompts.
type Limits struct {
	// MaxAnswerBytes: a longer answer scores 0 with a note, unverified.
	MaxAnswerBytes int
	// MaxQuoteBytes: an answer quoted inside a later prompt (attempt in
	// the feedback and refine prompts, tool output) is cut to this size.
	MaxQuoteBytes int
}

// DefaultLimits: answers up to 256 KiB are verified; quotes are cut at 16 KiB.
var DefaultLimits = Limits{MaxAnswerBytes: 256 << 10, MaxQuoteBytes: 16 << 10}

func (l Limits) withDefaults() Limits {
	if l.MaxAnswerBytes <= 0 {
		l.MaxAnswerBytes = DefaultLimits.MaxAnswerBytes
	}
	if l.MaxQuoteBytes <= 0 {
		l.MaxQuoteBytes = DefaultLimits.MaxQuoteBytes
	}
	return l
}

// score verifies an answer, guarding the verifier contract: empty and
// oversized answers are not sent to the verifier, rewards outside [0, 1]
// or NaN become 0 with a note.
func score(ctx context.Context, v verify.Verifier, lim Limits, answer string, ref verify.Reference) (float32, string) {
	switch {
	case strings.TrimSpace(answer) == "":
		return 0, "empty answer"
	case len(answer) > lim.MaxAnswerBytes:
		return 0, fmt.Sprintf("answer of %d bytes is over the %d-byte limit", len(answer), lim.MaxAnswerBytes)
	}
	r := v.Verify(ctx, answer, ref)
	if math.IsNaN(r.Reward) || r.Reward < 0 || r.Reward > 1 {
		return 0, fmt.Sprintf("verifier returned reward %v outside [0, 1]; %s", r.Reward, r.Error)
	}
	return float32(r.Reward), r.Error
}

// quote cuts s for use inside a later prompt and makes it valid UTF-8.
func quote(s string, max int) (string, bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s, false
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n[... cut]", true
}

func toInt32(x []int) []int32 {
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

// episodeID names episode s of group g.
func episodeID(g int64, s int) string { return fmt.Sprintf("g%d-s%d", g, s) }

// seeded gives each request of a seeded policy its own seed, so later
// turns of different episodes do not share their randomness.
func seeded(p engine.SamplingParams, group int64, sample, turn int) engine.SamplingParams {
	if p.Seed != nil {
		s := *p.Seed + group*1_000_003 + int64(sample)*1_009 + int64(turn)
		p.Seed = &s
	}
	p.Stop = append([]string(nil), p.Stop...)
	p.StopTokenIDs = append([]int(nil), p.StopTokenIDs...)
	return p
}

// outcome is what one request produced: a result, or why it failed.
type outcome struct {
	res engine.Result
	err error
}

// generate runs reqs on p's engine. An engine refusing the batch as bad
// (engine.ErrBadRequest) is retried request by request, so one bad prompt
// fails only its own episode; any other error fails the whole call.
func generate(ctx context.Context, p Policy, reqs []engine.Request) ([]outcome, error) {
	out := make([]outcome, len(reqs))
	if len(reqs) == 0 {
		return out, nil
	}
	res, err := p.Engine.Generate(ctx, reqs)
	if err == nil {
		if len(res) != len(reqs) {
			return nil, fmt.Errorf("policy %q: engine returned %d results for %d requests", p.ID, len(res), len(reqs))
		}
		for i := range res {
			out[i].res = res[i]
			if len(res[i].Samples) != max(reqs[i].Params.N, 1) {
				out[i].err = fmt.Errorf("engine returned %d samples, want %d", len(res[i].Samples), max(reqs[i].Params.N, 1))
			}
		}
		return out, nil
	}
	if !errors.Is(err, engine.ErrBadRequest) {
		return nil, fmt.Errorf("policy %q: generate: %w", p.ID, err)
	}
	if len(reqs) == 1 {
		out[0].err = err
		return out, nil
	}
	for i := range reqs {
		one, err := generate(ctx, p, reqs[i:i+1])
		if err != nil {
			return nil, err
		}
		out[i] = one[0]
	}
	return out, nil
}

// turnOf records sample s of result r as a turn of policy p.
func turnOf(p Policy, r engine.Result, s engine.Sample) data.Turn {
	lp := append([]float32(nil), s.LogProbs...)
	if len(lp) != len(s.TokenIDs) { // an engine breaking its contract: keep the row consistent
		lp = make([]float32, len(s.TokenIDs))
	}
	return data.Turn{
		PolicyID:      p.ID,
		WeightVersion: r.WeightVersion,
		PromptIDs:     toInt32(r.PromptTokenIDs),
		ResponseIDs:   toInt32(s.TokenIDs),
		LogProbs:      lp,
		LossMask:      ones(len(s.TokenIDs)),
		FinishReason:  s.FinishReason,
		ResponseText:  strings.ToValidUTF8(s.Text, "\uFFFD"),
	}
}

// failedTurn records a request that produced nothing.
func failedTurn(p Policy, why string) data.Turn {
	return data.Turn{
		PolicyID: p.ID, WeightVersion: p.Engine.WeightVersion(),
		PromptIDs: []int32{}, ResponseIDs: []int32{}, LogProbs: []float32{}, LossMask: []float32{},
		FinishReason: "error", Note: why,
	}
}

func userMessage(text string) []tokenizer.Message {
	return []tokenizer.Message{{Role: "user", Content: text}}
}

func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// first runs the solver's first turn for every example of b: one request
// of N samples per example. It returns, per example, the outcome.
func first(ctx context.Context, solver Policy, tpl *compiled, b Batch) ([]outcome, error) {
	reqs := make([]engine.Request, len(b.Examples))
	for i, ex := range b.Examples {
		prompt, err := tpl.render("solver", TemplateData{Problem: ex.Prompt})
		if err != nil {
			return nil, err
		}
		p := seeded(solver.Params, b.FirstGroupID+int64(i), 0, 0)
		p.N = b.N
		reqs[i] = engine.Request{ID: fmt.Sprintf("g%d-t0", b.FirstGroupID+int64(i)), Messages: userMessage(prompt), Params: p}
	}
	return generate(ctx, solver, reqs)
}

// setEpisode stamps the episode identity on a turn.
func setEpisode(t *data.Turn, group int64, sample, turn int) {
	t.EpisodeID = episodeID(group, sample)
	t.GroupID = group
	t.Sample = int32(sample)
	t.Turn = int32(turn)
}
