package ctxopt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/ctxopt/simlm"
	"github.com/rlnode/rlnode/internal/ctxio"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// LMConfig describes the executor model trained here: a tiny Qwen2 from
// scratch, its own byte-level BPE tokenizer, and the supervised warm-up
// that teaches it the workflow's formats (recipe section executor.lm).
type LMConfig struct {
	Hidden       int     `yaml:"hidden" json:"hidden"`
	Intermediate int     `yaml:"intermediate" json:"intermediate"`
	Layers       int     `yaml:"layers" json:"layers"`
	Heads        int     `yaml:"heads" json:"heads"`
	KVHeads      int     `yaml:"kv_heads" json:"kv_heads"`
	Context      int     `yaml:"context" json:"context"` // max positions: prompt + response
	Vocab        int     `yaml:"vocab" json:"vocab"`     // tokenizer and embedding size
	Episodes     int     `yaml:"episodes" json:"episodes"`
	Steps        int     `yaml:"steps" json:"steps"`
	Batch        int     `yaml:"batch" json:"batch"`
	LR           float64 `yaml:"lr" json:"lr"`
	Seed         uint64  `yaml:"seed" json:"seed"`
	// DecaySteps, when positive, lowers the rate linearly from LR towards
	// zero over the last DecaySteps of Steps (LR·(Steps−s)/DecaySteps at
	// step s); 0 keeps LR constant.
	DecaySteps int `yaml:"decay_steps" json:"decay_steps,omitempty"`
	// AnswerFirst, when positive, makes the first AnswerFirst steps draw
	// only the calls whose response is the final answer line ("#### N",
	// copied from a tool's output, the reasoning or the verification): a
	// curriculum that teaches copying numbers before the full mixture.
	AnswerFirst int `yaml:"answer_first" json:"answer_first,omitempty"`
	// Verbatim makes the teacher send an arithmetic question's expression
	// to a tool as the question writes it (simlm.Engine.Verbatim).
	Verbatim bool `yaml:"verbatim" json:"verbatim,omitempty"`
	// MaskComputed leaves out of the SFT loss the digits of every number
	// in a teacher response that its prompt does not hold (results the
	// teacher worked out in its head), so the loss's digits are the ones
	// copied from the question, a tool's output, the reasoning or the
	// verification.
	MaskComputed bool `yaml:"mask_computed" json:"mask_computed,omitempty"`
	// CopyWeight, when positive, is the SFT weight of every response
	// that calls a tool with numbers all found in its prompt (an
	// expression copied from the question or from earlier results); the
	// rest weigh 1. 0 weighs every response 1.
	CopyWeight float64 `yaml:"copy_weight" json:"copy_weight,omitempty"`
	// Phases are further SFT phases after the first (Steps, LR,
	// DecaySteps, AnswerFirst above), in order; each starts from the
	// previous phase's weights with a fresh AdamW and the sampler's
	// order from its start. None: one phase.
	Phases []LMPhase `yaml:"phases" json:"phases,omitempty"`
}

// LMPhase is one further SFT phase of the warm-up (LMConfig.Phases): its
// steps, its rate, the linear decay to zero over its last DecaySteps (0:
// constant) and its answer-line curriculum steps (0: none).
type LMPhase struct {
	Steps       int     `yaml:"steps" json:"steps"`
	LR          float64 `yaml:"lr" json:"lr"`
	DecaySteps  int     `yaml:"decay_steps" json:"decay_steps,omitempty"`
	AnswerFirst int     `yaml:"answer_first" json:"answer_first,omitempty"`
}

// maxLMPhases bounds LMConfig.Phases.
const maxLMPhases = 8

// phases is every SFT phase of c, the first one's included, each as a
// config whose Steps, LR, DecaySteps and AnswerFirst are the phase's.
func (c LMConfig) phases() []LMConfig {
	first := c
	first.Phases = nil
	out := []LMConfig{first}
	for _, p := range c.Phases {
		ph := first
		ph.Steps, ph.LR, ph.DecaySteps, ph.AnswerFirst = p.Steps, p.LR, p.DecaySteps, p.AnswerFirst
		out = append(out, ph)
	}
	return out
}

// TotalSteps is the SFT steps of every phase together.
func (c LMConfig) TotalSteps() int {
	n := 0
	for _, p := range c.phases() {
		n += p.Steps
	}
	return n
}

// lmFormat versions the warm-up (teacher, data, tokenizer, training);
// bump it when any of them changes what a config trains.
const lmFormat = "ctxopt-lm-1"

// Check reports a configuration that trains no usable model.
func (c LMConfig) Check() error {
	var errs []string
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Sprintf("%s %d must be positive", name, v))
		}
	}
	pos("hidden", c.Hidden)
	pos("intermediate", c.Intermediate)
	pos("layers", c.Layers)
	pos("heads", c.Heads)
	pos("kv_heads", c.KVHeads)
	pos("episodes", c.Episodes)
	pos("steps", c.Steps)
	pos("batch", c.Batch)
	if c.Heads > 0 && c.Hidden%c.Heads != 0 {
		errs = append(errs, fmt.Sprintf("hidden %d is not divisible by heads %d", c.Hidden, c.Heads))
	}
	if c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		errs = append(errs, fmt.Sprintf("kv_heads %d does not divide heads %d", c.KVHeads, c.Heads))
	}
	if c.Context < 128 || c.Context > 8192 {
		errs = append(errs, fmt.Sprintf("context %d not in 128..8192", c.Context))
	}
	if c.Vocab < 300 || c.Vocab > 8192 {
		errs = append(errs, fmt.Sprintf("vocab %d not in 300..8192", c.Vocab))
	}
	if c.Hidden > 1024 || c.Layers > 16 || c.Intermediate > 4096 {
		errs = append(errs, "at most hidden 1024, intermediate 4096, 16 layers (trained on a CPU)")
	}
	if c.Episodes > 200000 || c.Steps > 100000 || c.Batch > 1024 {
		errs = append(errs, "at most 200000 episodes, 100000 steps, batch 1024")
	}
	if c.DecaySteps < 0 || c.DecaySteps > c.Steps {
		errs = append(errs, fmt.Sprintf("decay_steps %d not in 0..steps (%d)", c.DecaySteps, c.Steps))
	}
	if c.AnswerFirst < 0 || c.AnswerFirst > c.Steps {
		errs = append(errs, fmt.Sprintf("answer_first %d not in 0..steps (%d)", c.AnswerFirst, c.Steps))
	}
	if !(c.CopyWeight >= 0 && c.CopyWeight <= 100) {
		errs = append(errs, fmt.Sprintf("copy_weight %v not in 0..100", c.CopyWeight))
	}
	if !(c.LR > 0 && c.LR < 1) {
		errs = append(errs, fmt.Sprintf("lr %v not in (0, 1)", c.LR))
	}
	if len(c.Phases) > maxLMPhases {
		errs = append(errs, fmt.Sprintf("%d phases: at most %d", len(c.Phases), maxLMPhases))
	}
	for i, p := range c.Phases {
		at := fmt.Sprintf("phases[%d]: ", i)
		if p.Steps <= 0 || p.Steps > 100000 {
			errs = append(errs, fmt.Sprintf("%ssteps %d not in 1..100000", at, p.Steps))
		}
		if !(p.LR > 0 && p.LR < 1) {
			errs = append(errs, fmt.Sprintf("%slr %v not in (0, 1)", at, p.LR))
		}
		if p.DecaySteps < 0 || p.DecaySteps > p.Steps {
			errs = append(errs, fmt.Sprintf("%sdecay_steps %d not in 0..steps (%d)", at, p.DecaySteps, p.Steps))
		}
		if p.AnswerFirst < 0 || p.AnswerFirst > p.Steps {
			errs = append(errs, fmt.Sprintf("%sanswer_first %d not in 0..steps (%d)", at, p.AnswerFirst, p.Steps))
		}
	}
	if c.TotalSteps() > 100000 {
		errs = append(errs, fmt.Sprintf("%d SFT steps in all: at most 100000", c.TotalSteps()))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Key is the content hash naming a trained model: the config, the space
// its teacher episodes were drawn from, and the warm-up's version.
func (c LMConfig) Key(sp Space, python bool) string {
	b, _ := json.Marshal(struct {
		Format string
		Config LMConfig
		Space  Space
		Python bool
	}{lmFormat, c, sp, python})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:12])
}

func (c LMConfig) modelConfig() model.Config {
	return model.Config{Architecture: model.Qwen2, HiddenSize: c.Hidden, IntermediateSize: c.Intermediate,
		NumLayers: c.Layers, NumHeads: c.Heads, NumKVHeads: c.KVHeads, HeadDim: c.Hidden / c.Heads,
		VocabSize: c.Vocab, MaxPositions: c.Context, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: true, AttentionBias: true, TorchDType: "float32"}
}

// LMCacheDir is where trained executor models are kept: $RLNODE_CACHE/ctxopt-lm,
// else the user cache directory's rlnode/ctxopt-lm.
func LMCacheDir() (string, error) {
	if d := os.Getenv("RLNODE_CACHE"); d != "" {
		return filepath.Join(d, "ctxopt-lm"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("executor model cache: %w (set RLNODE_CACHE)", err)
	}
	return filepath.Join(d, "rlnode", "ctxopt-lm"), nil
}

// TeacherCall is one model call of a teacher execution: the chat so far and
// what the scripted model wrote (FinishReason "stop" or "length").
type TeacherCall struct {
	Messages     []tokenizer.Message
	Text         string
	FinishReason string
}

// recorder is an engine that forwards to inner and keeps every call.
type recorder struct {
	inner engine.Engine
	mu    sync.Mutex
	calls []TeacherCall
}

func (r *recorder) WeightVersion() int64 { return r.inner.WeightVersion() }
func (r *recorder) Close() error         { return r.inner.Close() }
func (r *recorder) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	res, err := r.inner.Generate(ctx, reqs)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, q := range reqs {
		for _, s := range res[i].Samples {
			r.calls = append(r.calls, TeacherCall{Messages: append([]tokenizer.Message(nil), q.Messages...), Text: s.Text, FinishReason: s.FinishReason})
		}
	}
	return res, nil
}

// RandomConfig draws a configuration uniformly: structure, every agent's
// tools and budget, and 0..MaxAtoms distinct atoms per agent.
func RandomConfig(sp Space, rng *rand.Rand) Config {
	var c Config
	c.Structure = Structure(rng.IntN(int(NumStructures)))
	for r := range c.Agents {
		a := sp.UnpackAgent(rng.IntN(sp.AgentChoices()))
		n := rng.IntN(sp.MaxAtoms + 1)
		a.Atoms = rng.Perm(len(sp.Atoms))[:n]
		c.Agents[r] = a
	}
	return c
}

// TeacherCalls runs c.Episodes executions of random configurations of sp
// on train-split questions (kinds word and arithmetic, levels 1–5; never a
// held-out question) against the scripted model, with x's tools, and
// returns every model call, in a fixed order.
func TeacherCalls(ctx context.Context, c LMConfig, sp Space, python bool, progress func(done int)) ([]TeacherCall, error) {
	qs, err := Questions(c.Seed, task.Train, []string{task.Word, task.Arithmetic}, []int{1, 2, 3, 4, 5}, max(1, c.Episodes/10))
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x7eac4e5))
	cfgs := make([]Config, c.Episodes)
	for i := range cfgs {
		cfgs[i] = RandomConfig(sp, rng)
	}
	var py episode.PythonExecutor
	if python {
		sb, err := verify.NewSandbox(verify.SandboxConfig{})
		if err != nil {
			return nil, fmt.Errorf("teacher episodes: python tool: %w", err)
		}
		py = episode.SandboxPython{Sandbox: sb}
	}
	// Episodes run 4 at a time (the sandbox's processes wait more than
	// they compute); their calls are concatenated in episode order.
	per := make([][]TeacherCall, c.Episodes)
	errs := make([]error, c.Episodes)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rec := &recorder{inner: simlm.Engine{Verbatim: c.Verbatim}}
				x := &Executor{Engine: rec, Verifier: verify.GSM8K{}, Space: sp, CorrectReward: 1, Python: py}
				if _, err := x.Run(ctx, qs[i%len(qs)], cfgs[i], int64(c.Seed)<<20+int64(i)); err != nil {
					errs[i] = fmt.Errorf("teacher episode %d: %w", i, err)
				}
				per[i] = rec.calls
				if progress != nil && (i+1)%500 == 0 {
					progress(i + 1)
				}
			}
		}()
	}
feed:
	for i := range c.Episodes {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("teacher episodes: %w", err)
	}
	// The first failure, and how many there were.
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		return nil, fmt.Errorf("%w (%d of %d teacher episodes failed)", first, failed, c.Episodes)
	}
	var out []TeacherCall
	for _, calls := range per {
		out = append(out, calls...)
	}
	return out, nil
}

// lmSpecials are the tokenizer's added tokens: the chat markers.
var lmSpecials = []string{tokenizer.EndOfText, tokenizer.IMStart, tokenizer.IMEnd}

// sftSample turns a teacher call into prompt and response ids: the chat
// template with the generation prompt, then the text, closed by <|im_end|>
// when the model stopped on its own without a tool call (a segment that
// ends in a tool call stops at "</tool_call>"; a cut one has no end).
func sftSample(tok *tokenizer.Tokenizer, call TeacherCall) (prompt, resp []int32) {
	imEnd := tok.StopIDs()[0]
	p := tok.EncodeChat(call.Messages, true)
	text := call.Text
	r := tok.Encode(text)
	if call.FinishReason == "stop" && !strings.HasSuffix(strings.TrimSpace(text), "</tool_call>") {
		r = append(r, imEnd)
	}
	return toI32(p), toI32(r)
}

func toI32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// TrainLM trains the executor model described by c into dir (config.json,
// model.safetensors, tokenizer.json, warmup.json): teacher episodes from
// the scripted model on sp, a tokenizer fitted to them, then c.Steps SFT
// steps on the calls that fit the context. Progress goes to log.
func TrainLM(ctx context.Context, c LMConfig, sp Space, python bool, dir string, log io.Writer) error {
	if err := c.Check(); err != nil {
		return fmt.Errorf("executor model: %w", err)
	}
	t0 := time.Now()
	calls, err := TeacherCalls(ctx, c, sp, python, func(done int) {
		fmt.Fprintf(log, "executor model: %d/%d teacher episodes (%.0fs)\n", done, c.Episodes, time.Since(t0).Seconds())
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "executor model: %d teacher calls from %d episodes (%.0fs)\n", len(calls), c.Episodes, time.Since(t0).Seconds())
	var corpus []string
	for i, cl := range calls {
		if i%4 == 0 {
			corpus = append(corpus, tokenizer.ChatTemplate(cl.Messages, true)+cl.Text)
		}
	}
	tok, err := tokenizer.Train(corpus, c.Vocab, lmSpecials)
	if err != nil {
		return fmt.Errorf("executor model: tokenizer: %w", err)
	}
	var prompts, resps [][]int32
	var answers []int
	var masks [][]float32
	var weights []float64
	var dropped, tokens, masked, copies int
	for _, cl := range calls {
		p, r := sftSample(tok, cl)
		if len(p)+len(r) > c.Context || len(r) == 0 {
			dropped++
			continue
		}
		if isAnswerLine(cl.Text) {
			answers = append(answers, len(prompts))
		}
		if c.MaskComputed {
			m := computedMask(tok, cl, r)
			for _, v := range m {
				masked += int(1 - v)
			}
			masks = append(masks, m)
		}
		if c.CopyWeight > 0 {
			w := 1.0
			if isToolCopy(cl) {
				w = c.CopyWeight
				copies++
			}
			weights = append(weights, w)
		}
		prompts, resps = append(prompts, p), append(resps, r)
		tokens += len(p) + len(r)
	}
	if len(prompts) == 0 {
		return fmt.Errorf("executor model: no teacher call fits the %d-token context", c.Context)
	}
	fmt.Fprintf(log, "executor model: %d samples, %.0f tokens each on average, %d over the context left out, %d computed digits out of the loss, %d copying tool calls weighted (%.0fs)\n",
		len(prompts), float64(tokens)/float64(len(prompts)), dropped, masked, copies, time.Since(t0).Seconds())
	anyAnswerFirst := false
	for _, ph := range c.phases() {
		anyAnswerFirst = anyAnswerFirst || ph.AnswerFirst > 0
	}
	if anyAnswerFirst && len(answers) == 0 {
		return fmt.Errorf("executor model: answer_first: no teacher call answers with a #### line")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	phases := c.phases()
	prev := "" // the previous phase's weights
	for pi, ph := range phases {
		mc := c.modelConfig()
		lc := learner.DefaultConfig()
		lc.Model, lc.Seed, lc.Algorithm, lc.LR = &mc, c.Seed, learner.SFT, ph.LR
		if prev != "" {
			lc.Model, lc.ModelDir = nil, prev
		}
		lc.MicroBatchSeqs = min(c.Batch, 16)
		l, err := learner.New(lc)
		if err != nil {
			return fmt.Errorf("executor model: phase %d: %w", pi+1, err)
		}
		name := "SFT"
		if len(phases) > 1 {
			name = fmt.Sprintf("SFT phase %d/%d", pi+1, len(phases))
		}
		smp := newSampler(ph, len(prompts), answers)
		for step := range ph.Steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			if lr, ok := ph.stepLR(step); ok {
				if err := l.SetAlgorithm(learner.SFT, lr); err != nil {
					return fmt.Errorf("executor model: %s step %d: %w", name, step, err)
				}
			}
			var b learner.Batch
			for _, i := range smp.batch(step) {
				b.Prompts, b.Responses = append(b.Prompts, prompts[i]), append(b.Responses, resps[i])
				if masks != nil {
					b.Masks = append(b.Masks, masks[i])
				}
				if weights != nil {
					b.Weights = append(b.Weights, weights[i])
				}
			}
			st, err := l.TrainContext(ctx, b)
			if err != nil {
				return fmt.Errorf("executor model: %s step %d: %w", name, step, err)
			}
			if step%25 == 0 || step == ph.Steps-1 {
				fmt.Fprintf(log, "executor model: %s step %d/%d loss %.4f (%.0fs)\n", name, step+1, ph.Steps, st.Loss, time.Since(t0).Seconds())
			}
		}
		if pi < len(phases)-1 {
			// The next phase starts a learner from these weights: a fresh AdamW.
			prev = filepath.Join(dir, fmt.Sprintf("phase-%d", pi+1))
			if err := l.Model().Save(prev, safetensors.F32); err != nil {
				return fmt.Errorf("executor model: save %s: %w", prev, err)
			}
			continue
		}
		if err := l.Model().Save(dir, safetensors.F32); err != nil {
			return fmt.Errorf("executor model: save %s: %w", dir, err)
		}
	}
	for pi := range len(phases) - 1 {
		if err := os.RemoveAll(filepath.Join(dir, fmt.Sprintf("phase-%d", pi+1))); err != nil {
			return err
		}
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("executor model: save %s: %w", dir, err)
	}
	meta, _ := json.MarshalIndent(map[string]any{"format": lmFormat, "config": c, "space": sp,
		"samples": len(prompts), "seconds": time.Since(t0).Seconds()}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "warmup.json"), meta, 0o644)
}

// computedMask is the loss mask of a teacher response encoded as resp:
// 0 on the digits of each number its prompt does not hold, 1 elsewhere.
// The response is encoded piece by piece, split at its numbers; if that
// does not give resp (no split at a number), every token counts.
func computedMask(tok *tokenizer.Tokenizer, call TeacherCall, resp []int32) []float32 {
	have := map[string]bool{}
	for _, m := range call.Messages {
		for _, n := range numberRE.FindAllString(m.Content, -1) {
			have[n] = true
		}
	}
	mask := make([]float32, len(resp))
	for i := range mask {
		mask[i] = 1
	}
	var ids []int32
	var zero []bool
	add := func(piece string, computed bool) {
		for _, id := range tok.Encode(piece) {
			ids, zero = append(ids, int32(id)), append(zero, computed)
		}
	}
	at := 0
	for _, loc := range numberRE.FindAllStringIndex(call.Text, -1) {
		add(call.Text[at:loc[0]], false)
		add(call.Text[loc[0]:loc[1]], !have[call.Text[loc[0]:loc[1]]])
		at = loc[1]
	}
	add(call.Text[at:], false)
	if len(ids) > len(resp) || !slices.Equal(ids, resp[:len(ids)]) {
		return mask
	}
	for i, z := range zero {
		if z {
			mask[i] = 0
		}
	}
	return mask
}

// isToolCopy reports a teacher response that calls a tool with numbers,
// every one of which occurs in its prompt.
func isToolCopy(call TeacherCall) bool {
	i := strings.LastIndex(call.Text, "<tool_call>")
	if i < 0 {
		return false
	}
	nums := numberRE.FindAllString(call.Text[i:], -1)
	if len(nums) == 0 {
		return false
	}
	have := map[string]bool{}
	for _, m := range call.Messages {
		for _, n := range numberRE.FindAllString(m.Content, -1) {
			have[n] = true
		}
	}
	for _, n := range nums {
		if !have[n] {
			return false
		}
	}
	return true
}

// isAnswerLine reports a teacher response that is the final answer line.
func isAnswerLine(text string) bool { return strings.HasPrefix(strings.TrimSpace(text), "####") }

// sampler draws the SFT batches: epochs of seeded permutations of every
// sample, and during the first AnswerFirst steps epochs of the answer
// samples only (their own random stream, so the main order is the same
// with and without the curriculum).
type sampler struct {
	batchSize, answerFirst int
	n                      int   // samples
	ans                    []int // indexes of the answer-line samples
	rng, ansRng            *rand.Rand
	order, ansOrder        []int
	next, ansNext          int
}

func newSampler(c LMConfig, n int, answers []int) *sampler {
	s := &sampler{batchSize: c.Batch, answerFirst: c.AnswerFirst, ans: answers,
		rng: rand.New(rand.NewPCG(c.Seed, 0x5f7)), ansRng: rand.New(rand.NewPCG(c.Seed, 0xa45))}
	s.order, s.n = s.rng.Perm(n), n
	return s
}

// batch returns the sample indexes of step's batch; steps must come in order.
func (s *sampler) batch(step int) []int {
	out := make([]int, 0, s.batchSize)
	for range s.batchSize {
		if step < s.answerFirst {
			if s.ansNext == len(s.ansOrder) {
				s.ansOrder, s.ansNext = s.ansRng.Perm(len(s.ans)), 0
			}
			out = append(out, s.ans[s.ansOrder[s.ansNext]])
			s.ansNext++
			continue
		}
		if s.next == len(s.order) {
			s.order, s.next = s.rng.Perm(s.n), 0
		}
		out = append(out, s.order[s.next])
		s.next++
	}
	return out
}

// stepLR is the rate of SFT step s (0-based) when the decay sets it.
func (c LMConfig) stepLR(s int) (float64, bool) {
	if c.DecaySteps <= 0 || s < c.Steps-c.DecaySteps {
		return 0, false
	}
	return c.LR * float64(c.Steps-s) / float64(c.DecaySteps), true
}

var lmMu sync.Mutex

// lmChecksums lists the SHA-256 of every file of a cache entry
// (sha256sum's format), written last before the entry is renamed into
// place.
const lmChecksums = "checksums.sha256"

// EnsureLM returns the directory of the executor model c trained on sp,
// training it into the cache (LMCacheDir()/<Key>) first when it is not
// there, or when the entry there is torn (a file missing, cut short or
// not the one its checksums name: what a power loss can leave). The
// entry is trained in a temporary directory whose files and directory
// are synced before it is renamed into place. Concurrent callers in one
// process train it once.
func EnsureLM(ctx context.Context, c LMConfig, sp Space, python bool, log io.Writer) (string, error) {
	root, err := LMCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, c.Key(sp, python))
	lmMu.Lock()
	defer lmMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "warmup.json")); err == nil {
		verr := verifyLMEntry(ctx, dir)
		if verr == nil {
			return dir, nil
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("executor model cache: check %s: %w", dir, err)
		}
		fmt.Fprintf(log, "executor model cache: %s is torn (%v): training it again\n", dir, verr)
		if err := removeLMEntry(root, dir); err != nil {
			return "", fmt.Errorf("executor model cache: remove the torn %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("executor model cache %s: %w", root, err)
	}
	removeStaleTrainings(root, time.Now(), log)
	tmp, err := os.MkdirTemp(root, "tmp-")
	if err != nil {
		return "", fmt.Errorf("executor model cache %s: %w", root, err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "executor model %s not in %s: training it\n", c.Key(sp, python), root)
	if err := TrainLM(ctx, c, sp, python, tmp, log); err != nil {
		return "", err
	}
	if err := sealLMEntry(ctx, tmp); err != nil {
		return "", fmt.Errorf("executor model cache %s: %w", root, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "warmup.json")); serr == nil {
			return dir, nil // another process put it there first
		}
		return "", fmt.Errorf("executor model cache: %w", err)
	}
	syncDir(root) // the rename reaches the disk with the cache folder's sync
	return dir, nil
}

// sealLMEntry writes dir's checksums and syncs every file of dir, then
// dir itself, so that once dir is renamed into place its files are on
// disk whole.
func sealLMEntry(ctx context.Context, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var sums strings.Builder
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() == lmChecksums {
			continue
		}
		sum, err := fileSHA256(ctx, filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%s  %s\n", sum, e.Name())
	}
	if err := os.WriteFile(filepath.Join(dir, lmChecksums), []byte(sums.String()), 0o644); err != nil {
		return err
	}
	if ents, err = os.ReadDir(dir); err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			if err := syncPath(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	syncDir(dir)
	return nil
}

// verifyLMEntry checks the cache entry dir: each file its checksums list
// has that SHA-256. An entry from before the checksums were written
// passes when its files are there, not empty, and warmup.json is JSON.
// It gives up once ctx is done (a slow disk), with ctx's error.
func verifyLMEntry(ctx context.Context, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, lmChecksums))
	if errors.Is(err, fs.ErrNotExist) {
		for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "warmup.json"} {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil {
				return err
			}
			if st.Size() == 0 {
				return fmt.Errorf("%s is empty", f)
			}
		}
		if meta, err := os.ReadFile(filepath.Join(dir, "warmup.json")); err != nil || !json.Valid(meta) {
			return fmt.Errorf("warmup.json is not JSON (%v)", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	n := 0
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		want, name, ok := strings.Cut(line, "  ")
		if !ok || name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
			return fmt.Errorf("%s: bad line %q", lmChecksums, line)
		}
		got, err := fileSHA256(ctx, filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s has SHA-256 %s, %s says %s", name, got, lmChecksums, want)
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s lists no file", lmChecksums)
	}
	return nil
}

// removeLMEntry takes the entry dir out of the cache: renamed aside in
// one step (a reader finds it whole or absent), then removed.
func removeLMEntry(root, dir string) error {
	aside, err := os.MkdirTemp(root, "tmp-torn-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(aside, "entry")); err != nil {
		os.Remove(aside)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // another process took it out first
		}
		return err
	}
	return os.RemoveAll(aside)
}

var fileSHA256 = ctxio.FileSHA256

// syncDir flushes the directory at path to disk where the filesystem
// allows: some refuse to sync a directory, and what was written is in
// place either way (as internal/atomicfile does).
func syncDir(path string) {
	if d, err := os.Open(path); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// syncPath flushes the file at path to disk.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// staleTraining is how long a training's directory in the cache may go
// unchanged before another warm-up removes it: a live one writes a
// checkpoint every few minutes, one whose process was killed never again.
const staleTraining = 24 * time.Hour

// removeStaleTrainings removes the tmp-* directories under root that have
// not changed for staleTraining before now, saying so on log.
func removeStaleTrainings(root string, now time.Time, log io.Writer) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "tmp-") {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < staleTraining {
			continue
		}
		p := filepath.Join(root, e.Name())
		if err := os.RemoveAll(p); err == nil {
			fmt.Fprintf(log, "executor model cache: removed %s, a training unchanged since %s\n", p, info.ModTime().UTC().Format(time.RFC3339))
		}
	}
}

// LoadLM starts a native engine over the executor model in dir. It gives
// up once ctx is done (checked while the weights are read), with an error
// wrapping ctx's and the engine's memory given back.
func LoadLM(ctx context.Context, dir string) (*native.Engine, error) {
	e, err := native.LoadContext(ctx, dir, native.Config{MaxBatch: 64})
	if err != nil {
		return nil, fmt.Errorf("executor model: %w", err)
	}
	return e, nil
}

// LMFeatures are the executor model's question features: the mean over a
// text's tokens (no chat template, cut to the context) of the model's
// final hidden states. Safe for concurrent use.
type LMFeatures struct {
	mu  sync.Mutex
	m   *model.Model
	in  *model.Inference
	tok *tokenizer.Tokenizer
}

// LoadLMFeatures loads the executor model in dir for features; it gives
// up once ctx is done, as LoadLM does.
func LoadLMFeatures(ctx context.Context, dir string) (*LMFeatures, error) {
	m, err := model.LoadContext(ctx, dir, cpu.New())
	if err != nil {
		return nil, fmt.Errorf("executor model features: %w", err)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("executor model features: %s: %w", dir, err)
	}
	in, err := m.NewInference()
	if err != nil {
		return nil, fmt.Errorf("executor model features: %w", err)
	}
	return &LMFeatures{m: m, in: in, tok: tok}, nil
}

// Dim implements FeatureSource: the model's hidden size.
func (f *LMFeatures) Dim() int { return f.m.Config.HiddenSize }

// Features implements FeatureSource.
func (f *LMFeatures) Features(texts []string) ([][]float32, error) {
	seqs := make([][]int32, len(texts))
	for i, t := range texts {
		ids := f.tok.Encode(t)
		if len(ids) == 0 {
			ids = []int{0} // an empty text: the first byte token
		}
		seqs[i] = toI32(ids[:min(len(ids), f.m.Config.MaxPositions)])
	}
	f.mu.Lock()
	flat, err := f.in.MeanHidden(seqs)
	f.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("executor model features: %w", err)
	}
	h := f.Dim()
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = flat[i*h : (i+1)*h : (i+1)*h]
	}
	return out, nil
}
