package native

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// seq is one sample being decoded.
type seq struct {
	j     *job
	i     int
	cache *model.KVCache
	next  int32 // the last sampled token, fed at the next step
	rng   *rand.Rand
	det   *detokenizer
}

// draw is one token to sample: for sequence s from a row of logits.
type draw struct {
	s      *seq
	logits []float32
	tok    int
	logp   float32
	top    []TokenLogProb
}

// run is the scheduler: the only goroutine that touches the model, the KV
// caches and the jobs' results. Each turn it drops cancelled requests,
// applies weight swaps once the batch has drained, admits queued requests
// while the batch has room, and runs one step: prompt chunks of admitted
// requests and one token of every decoding sequence, as one forward pass.
func (e *Engine) run() {
	defer close(e.done)
	var (
		prefill []*job // admitted, prompt not fully fed
		running []*seq
		waiting *job // taken from the queue, not yet fitting in the batch
		swaps   []*swap
		smp     = make([]sampler, runtime.GOMAXPROCS(0))
	)
	used := func() int {
		n := len(running)
		for _, j := range prefill {
			n += j.n
		}
		return n
	}
	for {
		// Requests cancelled or failed since the last step leave the batch.
		prefill = slices.DeleteFunc(prefill, func(j *job) bool { return !alive(j) && freeCache(j.cache) })
		running = slices.DeleteFunc(running, func(s *seq) bool { return !alive(s.j) && freeCache(s.cache) })

		idle := len(prefill) == 0 && len(running) == 0
		if idle && len(swaps) > 0 {
			for _, sw := range swaps {
				e.apply(sw)
			}
			swaps = nil
		}
		if idle && waiting == nil {
			select {
			case j := <-e.queue:
				waiting = j
			case sw := <-e.swaps:
				swaps = append(swaps, sw)
				continue
			case op := <-e.scores:
				e.runScore(op)
				continue
			case <-e.closing:
				e.shutdown(prefill, running, waiting, swaps)
				return
			}
		} else {
			select {
			case sw := <-e.swaps:
				swaps = append(swaps, sw)
			case op := <-e.scores:
				e.runScore(op)
			case <-e.closing:
				e.shutdown(prefill, running, waiting, swaps)
				return
			default:
			}
		}
		// Admission stops while a weight swap waits for the batch to drain,
		// so every sample of a result comes from one weight version.
		for len(swaps) == 0 {
			if waiting == nil {
				select {
				case j := <-e.queue:
					waiting = j
				default:
				}
			}
			if waiting == nil {
				break
			}
			if err := waiting.ctx.Err(); err != nil {
				waiting.finish(err)
				waiting = nil
				continue
			}
			if used()+waiting.n > e.cfg.MaxBatch {
				break
			}
			waiting.cache = e.m.NewKVCache()
			waiting.left = waiting.n
			waiting.admitted = time.Now()
			prefill = append(prefill, waiting)
			waiting = nil
		}
		if len(prefill) == 0 && len(running) == 0 {
			continue
		}
		prefill, running = e.step(prefill, running, smp)
	}
}

// freeCache hands a KV cache's backend memory back at once (the engine's
// model may live on a device backend, whose memory the garbage collector
// does not see) and returns true, for use inside DeleteFunc.
func freeCache(c *model.KVCache) bool {
	if c != nil {
		c.Free()
	}
	return true
}

func alive(j *job) bool {
	select {
	case <-j.finished:
		return false
	default:
	}
	if err := j.ctx.Err(); err != nil {
		j.finish(err)
		return false
	}
	return true
}

// step runs one forward pass and samples a token for every row whose
// prompt is complete. It returns the new prefill and running lists.
func (e *Engine) step(prefill []*job, running []*seq, smp []sampler) ([]*job, []*seq) {
	var chunks []model.Chunk
	budget := e.cfg.MaxStepTokens
	var fedJobs []*job
	var fedN []int
	for _, j := range prefill {
		n := min(len(j.req.Prompt)-j.fed, budget)
		if n <= 0 {
			continue
		}
		budget -= n
		chunks = append(chunks, model.Chunk{Cache: j.cache, Tokens: toInt32(j.req.Prompt[j.fed : j.fed+n])})
		fedJobs = append(fedJobs, j)
		fedN = append(fedN, n)
	}
	for _, s := range running {
		chunks = append(chunks, model.Chunk{Cache: s.cache, Tokens: []int32{s.next}})
	}
	logits, err := e.inf.Forward(chunks)
	if err != nil {
		// Requests were validated; this is a bug, reported to every caller.
		err = fmt.Errorf("forward pass: %w", err)
		for _, j := range prefill {
			j.finish(err)
			freeCache(j.cache)
		}
		for _, s := range running {
			s.j.finish(err)
			freeCache(s.cache)
		}
		return nil, nil
	}
	V := e.m.Config.VocabSize
	var draws []draw
	for r, j := range fedJobs {
		j.fed += fedN[r]
		if j.fed < len(j.req.Prompt) {
			continue
		}
		// The prompt is in: its samples fork from the prefilled cache.
		row := logits[r*V : (r+1)*V]
		for i := 0; i < j.n; i++ {
			c := j.cache
			if i < j.n-1 {
				c = j.cache.Clone()
			}
			s := &seq{j: j, i: i, cache: c, rng: newRNG(j, i), det: newDetokenizer(j.req.Params.Stop)}
			draws = append(draws, draw{s: s, logits: row})
		}
		j.cache = nil
	}
	for r, s := range running {
		row := len(fedJobs) + r
		draws = append(draws, draw{s: s, logits: logits[row*V : (row+1)*V]})
	}
	e.sampleAll(draws, smp)
	prefill = slices.DeleteFunc(prefill, func(j *job) bool { return j.cache == nil })
	running = running[:0]
	for _, d := range draws {
		if e.accept(d) {
			running = append(running, d.s)
		} else {
			freeCache(d.s.cache)
		}
	}
	return prefill, running
}

func toInt32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, t := range ids {
		out[i] = int32(t)
	}
	return out
}

// newRNG gives sample i of a seeded request its own reproducible stream.
func newRNG(j *job, i int) *rand.Rand {
	if s := j.req.Params.Seed; s != nil {
		return rand.New(rand.NewPCG(uint64(*s), uint64(i)))
	}
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// sampleAll samples every draw, spreading them over the cores when the
// vocabulary makes it worth it. Each sequence has its own generator, so
// the outcome does not depend on the split.
func (e *Engine) sampleAll(draws []draw, smp []sampler) {
	V := e.m.Config.VocabSize
	one := func(w, i int) {
		d := &draws[i]
		d.tok, d.logp, d.top = smp[w].sample(d.logits, &d.s.j.req.Params, d.s.rng, d.s.j.top)
	}
	workers := min(len(smp), len(draws))
	if workers <= 1 || len(draws)*V < 1<<16 {
		for i := range draws {
			one(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(draws); i = int(next.Add(1) - 1) {
				one(w, i)
			}
		}()
	}
	wg.Wait()
}

// accept records a sampled token and reports whether its sequence goes
// on. A finished sample completes its job once it is the last one.
func (e *Engine) accept(d draw) bool {
	s, j := d.s, d.s.j
	p := &j.req.Params
	out := &j.result.Samples[s.i]
	out.TokenIDs = append(out.TokenIDs, d.tok)
	out.LogProbs = append(out.LogProbs, d.logp)
	finish := ""
	switch {
	case slices.Contains(p.StopTokenIDs, d.tok) || slices.Contains(e.eos, d.tok):
		finish = "stop"
	case !e.tok.IsSpecial(d.tok) && s.det.add(e.tok.DecodeBytes([]int{d.tok})):
		finish = "stop"
	case len(out.TokenIDs) >= p.MaxTokens:
		finish = "length"
	}
	text := s.det.delta(finish != "")
	if j.events != nil {
		j.events.push(Event{Sample: s.i, TokenID: d.tok, LogProb: d.logp, TopLogProbs: d.top, Text: text, FinishReason: finish})
	}
	if finish == "" {
		s.next = int32(d.tok)
		return true
	}
	out.Text = s.det.text()
	out.FinishReason = finish
	out.Started, out.Finished = j.admitted, time.Now()
	j.left--
	if j.left == 0 {
		j.result.WeightVersion = e.version.Load()
		j.finish(nil)
	}
	return false
}

// shutdown fails every request the scheduler holds or that is queued.
func (e *Engine) shutdown(prefill []*job, running []*seq, waiting *job, swaps []*swap) {
	for _, j := range prefill {
		j.finish(ErrClosed)
		freeCache(j.cache)
	}
	for _, s := range running {
		s.j.finish(ErrClosed)
		freeCache(s.cache)
	}
	e.inf.Free()
	if waiting != nil {
		waiting.finish(ErrClosed)
	}
	for _, sw := range swaps {
		sw.answer(ErrClosed)
	}
	for {
		select {
		case j := <-e.queue:
			j.finish(ErrClosed)
		default:
			return
		}
	}
}

// swap is a weight update waiting for the batch to drain.
type swap struct {
	version int64
	params  []*model.Param
	data    [][]float32
	state   atomic.Int32 // swapPending, then swapApplied or swapWithdrawn
	done    chan error
}

const (
	swapPending int32 = iota
	swapApplied
	swapWithdrawn
)

func (sw *swap) answer(err error) {
	select {
	case sw.done <- err:
	default:
	}
}

// apply uploads a swap's tensors unless its caller gave up waiting.
func (e *Engine) apply(sw *swap) {
	if !sw.state.CompareAndSwap(swapPending, swapApplied) {
		return
	}
	for i, p := range sw.params {
		e.m.B.Upload(p.W, sw.data[i])
	}
	e.version.Store(sw.version)
	sw.answer(nil)
}

// SetWeights replaces the named parameters (all or some; names as in the
// Hugging Face checkpoint) and makes version the served weight version.
// The engine stops admitting requests, lets the running batch finish under
// the old weights, swaps, and resumes, so every result comes from one
// version; SetWeights returns once the new weights are in. The caller must
// not modify weights until then. Names, sizes and values are checked first;
// on any error, or if ctx ends before the swap, nothing changes.
func (e *Engine) SetWeights(ctx context.Context, version int64, weights map[string][]float32) error {
	if len(weights) == 0 {
		return fmt.Errorf("native engine: set weights version %d: no tensors", version)
	}
	if cur := e.version.Load(); version < cur {
		return fmt.Errorf("native engine: set weights version %d: older than the served version %d", version, cur)
	}
	names := make([]string, 0, len(weights))
	for name := range weights {
		names = append(names, name)
	}
	sort.Strings(names)
	sw := &swap{version: version, done: make(chan error, 1)}
	for _, name := range names {
		if err := ctx.Err(); err != nil { // checking a large model's values takes a while
			return fmt.Errorf("native engine: set weights version %d: %w", version, err)
		}
		p, ok := e.params[name]
		v := weights[name]
		switch {
		case !ok && name == "lm_head.weight" && e.m.Config.TieWordEmbeddings:
			return fmt.Errorf("native engine: set weights version %d: tensor %q: the model ties it to model.embed_tokens.weight", version, name)
		case !ok:
			return fmt.Errorf("native engine: set weights version %d: tensor %q: not a parameter of the served %s model", version, name, e.m.Config.Architecture)
		case len(v) != p.Len():
			return fmt.Errorf("native engine: set weights version %d: tensor %q: %d values, want %d (shape %v)", version, name, len(v), p.Len(), p.Shape)
		}
		if i := FirstNonFinite(v); i >= 0 {
			return fmt.Errorf("native engine: set weights version %d: tensor %q: value %d is %v: %w", version, name, i, v[i], safetensors.ErrNotFinite)
		}
		sw.params = append(sw.params, p)
		sw.data = append(sw.data, v)
	}
	select {
	case e.swaps <- sw:
	case <-ctx.Done():
		return fmt.Errorf("native engine: set weights version %d: %w", version, ctx.Err())
	case <-e.closing:
		return fmt.Errorf("native engine: set weights version %d: %w", version, ErrClosed)
	}
	select {
	case err := <-sw.done:
		if err != nil {
			return fmt.Errorf("native engine: set weights version %d: %w", version, err)
		}
		return nil
	case <-ctx.Done():
		if sw.state.CompareAndSwap(swapPending, swapWithdrawn) {
			return fmt.Errorf("native engine: set weights version %d: withdrawn before the running batch drained: %w", version, ctx.Err())
		}
		// Applied just now: the answer is on its way.
		if err := <-sw.done; err != nil {
			return fmt.Errorf("native engine: set weights version %d: %w", version, err)
		}
		return nil
	}
}

// FirstNonFinite is the index of v's first NaN or infinity (an exponent
// of all ones), or -1: integer tests, four values a step, at a fraction
// of the cost of math.IsNaN and math.IsInf on a version's every weight.
func FirstNonFinite(v []float32) int {
	const exp = 0x7f800000
	i := 0
	for ; i+4 <= len(v); i += 4 {
		a, b := math.Float32bits(v[i])&exp, math.Float32bits(v[i+1])&exp
		c, d := math.Float32bits(v[i+2])&exp, math.Float32bits(v[i+3])&exp
		if a == exp || b == exp || c == exp || d == exp {
			break
		}
	}
	for ; i < len(v); i++ {
		if math.Float32bits(v[i])&exp == exp {
			return i
		}
	}
	return -1
}
