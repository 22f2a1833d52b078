package episode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Policy is one trainable policy taking part in episodes: the engine that
// serves it and how it samples. ID is recorded in every Turn it produced.
// Tokenizer turns text prompts (Prompt.Text) into token ids; prompts given
// as chat messages need none. Model names the model the engine serves in
// the turns' traces (data.Call.Model).
type Policy struct {
	ID        string
	Engine    engine.Engine
	Params    engine.SamplingParams
	Tokenizer Tokenizer
	Model     string
}

// Tokenizer turns text into token ids of a policy's vocabulary.
// *tokenizer.Tokenizer implements it.
type Tokenizer interface {
	Encode(text string) []int
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

// call is one request to an engine with its prompt as written, which the
// turn it makes records for traces.
type call struct {
	engine.Request
	prompt Prompt
}

// request is the request id asking p for prompt with params.
func (p Policy) request(id string, prompt Prompt, params engine.SamplingParams) (call, error) {
	req := engine.Request{ID: id, Params: params}
	switch {
	case prompt.Messages != nil:
		req.Messages = prompt.Messages
	case p.Tokenizer == nil:
		return call{}, fmt.Errorf("policy %q: request %s: a text prompt needs the policy's tokenizer", p.ID, id)
	default:
		req.Prompt = p.Tokenizer.Encode(prompt.Text)
	}
	return call{Request: req, prompt: prompt}, nil
}

// Batch is the input of one rollout step: N episodes (a GRPO group) per
// example; example i gets group id FirstGroupID+i.
type Batch struct {
	Examples     []data.Example
	N            int
	FirstGroupID int64
	// Seeds, when set, gives each request its sampling seed (nil:
	// unseeded) in place of the policies' Params.Seed. Stage is what the
	// request asks for (StageFirst, StageFeedback, StageFinal, or
	// StageFinal+k: the k-th continuation after a tool call); index is
	// the example (StageFirst: one request of N samples per example) or
	// the episode, example×N + sample (later stages).
	Seeds func(stage, index int) *int64
}

// Stages of an episode's requests, for Batch.Seeds.
const (
	StageFirst    = 0 // the solver's first answer
	StageFeedback = 1 // MLMT's feedback
	StageFinal    = 2 // the final answer of MLMT and SCoRe; tools: StageFinal+k after call k; agent: StageFinal+k for step k
)

// params is how the request of stage for example i (sample s; turn is
// the row's turn index) samples on p: with the batch's Seeds, or with
// p's seed spread over episodes and turns.
func (b Batch) params(p engine.SamplingParams, stage, i, s, turn, n int) engine.SamplingParams {
	g := b.FirstGroupID + int64(i)
	if b.Seeds != nil {
		index := i
		if stage != StageFirst {
			index = i*b.N + s
		}
		p.Seed = b.Seeds(stage, index)
	} else if p.Seed != nil {
		seed := *p.Seed + g*1_000_003 + int64(s)*1_009 + int64(turn)
		p.Seed = &seed
	}
	p.N = n
	p.Stop = append([]string(nil), p.Stop...)
	p.StopTokenIDs = append([]int(nil), p.StopTokenIDs...)
	return p
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
	// the feedback and refine prompts, tool output) is cut to this size
	// (at a character boundary), and CutMark is appended to it.
	MaxQuoteBytes int
	CutMark       string
}

// DefaultLimits: answers up to 256 KiB are verified; quotes are cut at 16
// KiB and marked. The zero Limits means these.
var DefaultLimits = Limits{MaxAnswerBytes: 256 << 10, MaxQuoteBytes: 16 << 10, CutMark: "\n[... cut]"}

func (l Limits) withDefaults() Limits {
	if l == (Limits{}) {
		return DefaultLimits
	}
	if l.MaxAnswerBytes <= 0 {
		l.MaxAnswerBytes = DefaultLimits.MaxAnswerBytes
	}
	if l.MaxQuoteBytes <= 0 {
		l.MaxQuoteBytes = DefaultLimits.MaxQuoteBytes
	}
	return l
}

// Answer is one answer to score against its reference.
type Answer struct {
	Text string
	Ref  verify.Reference
}

// ScoreAll scores answers with v, up to workers at once (0: one), results
// in order, with a note each where there is one. It guards the verifier contract: empty and oversized answers
// are not sent to the verifier, rewards outside [0, 1] or NaN become 0;
// each comes with a note. A nil v scores nothing (rewards 0). Only ctx
// ending is an error.
func ScoreAll(ctx context.Context, v verify.Verifier, workers int, lim Limits, jobs []Answer) ([]float64, []string, error) {
	lim = lim.withDefaults()
	rewards, notes := make([]float64, len(jobs)), make([]string, len(jobs))
	if v == nil || len(jobs) == 0 {
		return rewards, notes, nil
	}
	one := func(i int) {
		rewards[i], notes[i] = score(ctx, v, lim, jobs[i].Text, jobs[i].Ref)
	}
	if workers <= 1 {
		for i := range jobs {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			one(i)
		}
		return rewards, notes, nil
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				one(i)
			}
		}()
	}
	var err error
feed:
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err != nil {
		return nil, nil, err
	}
	return rewards, notes, nil
}

// score verifies one answer (see ScoreAll).
func score(ctx context.Context, v verify.Verifier, lim Limits, answer string, ref verify.Reference) (float64, string) {
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
	return r.Reward, r.Error
}

// Quote cuts an answer for use inside a later prompt (MaxQuoteBytes, at a
// character boundary, then CutMark) and makes it valid UTF-8; cut says
// whether it was cut.
func (l Limits) Quote(s string) (q string, cut bool) {
	l = l.withDefaults()
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= l.MaxQuoteBytes {
		return s, false
	}
	end := l.MaxQuoteBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + l.CutMark, true
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

// outcome is what one request produced: a result, or why it failed; the
// prompt it was asked with and when the engine call that carried it ran.
type outcome struct {
	res        engine.Result
	err        error
	prompt     Prompt
	start, end time.Time
}

// generate runs calls on p's engine. An engine refusing the batch as bad
// (engine.ErrBadRequest) is retried request by request, so one bad prompt
// fails only its own episode; any other error fails the whole call.
func generate(ctx context.Context, p Policy, calls []call) ([]outcome, error) {
	out := make([]outcome, len(calls))
	if len(calls) == 0 {
		return out, nil
	}
	reqs := make([]engine.Request, len(calls))
	for i := range calls {
		reqs[i] = calls[i].Request
	}
	start := time.Now()
	res, err := p.Engine.Generate(ctx, reqs)
	end := time.Now()
	for i := range out {
		out[i].prompt, out[i].start, out[i].end = calls[i].prompt, start, end
	}
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
	for i := range calls {
		one, err := generate(ctx, p, calls[i:i+1])
		if err != nil {
			return nil, err
		}
		out[i] = one[0]
	}
	return out, nil
}

// turnOf records sample s of outcome o's result as a turn of policy p.
func turnOf(p Policy, o outcome, s engine.Sample) data.Turn {
	r := o.res
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
		Call:          callOf(p, o, &s),
	}
}

// failedTurn records a request (outcome o) that produced nothing.
func failedTurn(p Policy, o outcome, why string) data.Turn {
	return data.Turn{
		PolicyID: p.ID, WeightVersion: p.Engine.WeightVersion(),
		PromptIDs: []int32{}, ResponseIDs: []int32{}, LogProbs: []float32{}, LossMask: []float32{},
		FinishReason: "error", Note: why, Call: callOf(p, o, nil),
	}
}

// callOf is what a turn's trace records of sample s of outcome o (nil:
// none came): the model, when s's request was begun and when s was done,
// and the prompt (cut to data.MaxPromptBytes).
func callOf(p Policy, o outcome, s *engine.Sample) data.Call {
	c := data.Call{Model: p.Model, Start: o.start, End: o.end, EndShared: true}
	if s != nil {
		c.End, c.EndShared = endOf(o, *s)
		c.Start = startOf(o, *s, c.End)
	}
	var msgs []data.Message
	if o.prompt.Messages != nil {
		msgs = make([]data.Message, len(o.prompt.Messages))
		for i, m := range o.prompt.Messages {
			msgs[i] = data.Message{Role: m.Role, Content: m.Content}
		}
	}
	c.CutPrompt(o.prompt.Text, msgs)
	return c
}

// endOf is when sample s of outcome o was done: the engine's word
// (Sample.Finished) where it falls inside the engine call, else the
// call's end, which the batch's requests share (shared true). An engine
// on another node has another clock: its word outside the call is not
// taken.
func endOf(o outcome, s engine.Sample) (end time.Time, shared bool) {
	if f := s.Finished; !f.IsZero() && !f.Before(o.start) && !f.After(o.end) {
		return f, false
	}
	return o.end, true
}

// startOf is when sample s of outcome o was begun: the engine's word
// (Sample.Started: admitted to its batch, its HTTP request sent) where it
// falls inside the engine call and not after the sample's end, else when
// the call was sent, which the batch's requests share.
func startOf(o outcome, s engine.Sample, end time.Time) time.Time {
	if b := s.Started; !b.IsZero() && !b.Before(o.start) && !b.After(end) {
		return b
	}
	return o.start
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
// of N samples per example, the prompt of prompt (the Prompter's Solver or
// ToolSolver). It returns, per example, the outcome.
func first(ctx context.Context, solver Policy, prompt func(data.Example) (Prompt, error), b Batch, id string) ([]outcome, error) {
	reqs := make([]call, len(b.Examples))
	for i, ex := range b.Examples {
		pr, err := prompt(ex)
		if err != nil {
			return nil, err
		}
		g := b.FirstGroupID + int64(i)
		if reqs[i], err = solver.request(fmt.Sprintf("g%d-%s", g, id), pr, b.params(solver.Params, StageFirst, i, 0, 0, b.N)); err != nil {
			return nil, err
		}
	}
	return generate(ctx, solver, reqs)
}

// firstScored runs the solver's first turn (first) and scores every
// sample the engine returned, in order: rewards and notes hold one entry
// per sample of the examples whose request succeeded.
func firstScored(ctx context.Context, solver Policy, prompt func(data.Example) (Prompt, error), v verify.Verifier, workers int, lim Limits, b Batch) ([]outcome, []float64, []string, error) {
	outs, err := first(ctx, solver, prompt, b, "t0")
	if err != nil {
		return nil, nil, nil, err
	}
	var jobs []Answer
	for i, ex := range b.Examples {
		if outs[i].err == nil {
			for _, smp := range outs[i].res.Samples {
				jobs = append(jobs, Answer{smp.Text, ex.Ref})
			}
		}
	}
	rewards, notes, err := ScoreAll(ctx, v, workers, lim, jobs)
	if err != nil {
		return nil, nil, nil, err
	}
	return outs, rewards, notes, nil
}

// setEpisode stamps the episode identity on a turn.
func setEpisode(t *data.Turn, group int64, sample, turn int) {
	t.EpisodeID = episodeID(group, sample)
	t.GroupID = group
	t.Sample = int32(sample)
	t.Turn = int32(turn)
}
