package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/traces"
)

// TraceData makes a run train on recorded model calls from a trace store
// (recipe data.traces): the SFT warm-up instead of on reference answers
// and, with RL, the RL steps instead of on generated episodes.
type TraceData struct {
	Store string
	// Filter selects the traces; Reward names the reward MinReward bounds,
	// the warm-up's weighting reads and offline RL's advantages come from
	// ("" sums all).
	Filter    traces.Filter
	Reward    string
	MinReward float64 // NaN: every call
	// Weighting is the warm-up's, as WarmupTrajectories': none (or ""),
	// exp (exp(reward/Beta), normalized to mean 1 over the batch) or
	// filter (only calls rewarded at least Threshold).
	Weighting       string
	Beta, Threshold float64
	// RL makes each RL step offline: PromptsPerStep groups of GroupSize
	// traces with the same first prompt, every call of a trace credited
	// with the group-relative advantage of the trace's reward.
	RL bool
	// SkipRefused leaves out the traces traces.Trajectories refuses (the
	// run says how many and the first one's reason) instead of failing.
	SkipRefused bool
	// PerCall trains every call as its own row (recipe
	// data.traces.merge_calls: false) instead of merging the calls of a
	// conversation whose prompts extend each other (traces.Build).
	PerCall bool
}

func (d *TraceData) check() error {
	switch {
	case d.Store == "":
		return fmt.Errorf("train config: traces: no store")
	case !slices.Contains([]string{"", "none", "exp", "filter"}, d.Weighting):
		return fmt.Errorf("train config: traces: weighting %q: want none, exp or filter", d.Weighting)
	case d.Weighting == "exp" && !(d.Beta > 0):
		return fmt.Errorf("train config: traces: beta %v: want > 0", d.Beta)
	}
	return nil
}

// traceError is a problem with data.traces and the recipe field it is on.
type traceError struct {
	field string
	err   error
}

func (e *traceError) Error() string { return e.err.Error() }
func (e *traceError) Unwrap() error { return e.err }

func traceErr(field, format string, a ...any) error {
	return &traceError{field: field, err: fmt.Errorf(format, a...)}
}

// traceField is the recipe field err is about (data.traces if none).
func traceField(err error) string {
	var te *traceError
	if errors.As(err, &te) {
		return te.field
	}
	return "data.traces"
}

// loadedTraces are a store's calls as a run trains on them.
type loadedTraces struct {
	warmup      []data.Turn  // the warm-up's rows, shuffled; nil without a warm-up
	groups      *traceGroups // offline RL's; nil without RL
	calls       int          // calls read
	retokenized int          // of them, re-tokenized (no token ids recorded)
	rows        int          // the rows they make (fewer where calls merged)
	// splits count the calls that started a row of their own although
	// calls of their trace came before them: one per reason, in the order
	// the reasons first occur, each naming its first call.
	splits []TraceSplit
	// refused traces left out (TraceData.SkipRefused), and the first's
	// reason.
	refused      int
	firstRefused string
}

// TraceSplit counts the calls of data.traces that started a row of their
// own although calls of their trace came before them, for one reason
// (traces.SplitReason), and names the first.
type TraceSplit = traces.SplitSummary

// loadTraces reads d's store for a run with warmup warm-up steps and
// groupSize × perStep RL batches: the calls as trajectory rows (recorded
// token ids where the calls carried them, else tok re-tokenizes), each
// within the policy's context. Errors name the recipe field (traceField):
// an empty store, no trace that passes the filters, a reward no trace
// carries, no call left, no group of groupSize traces.
func loadTraces(d *TraceData, tok *tokenizer.Tokenizer, pc *policyContext, seed uint64, warmup bool, groupSize, perStep int) (*loadedTraces, error) {
	all, skipped, err := traces.Load(d.Store, traces.Any())
	if err != nil {
		return nil, traceErr("data.traces.store", "%w", err)
	}
	if len(skipped) > 0 {
		return nil, traceErr("data.traces.store", "%s cannot be read (%d files or lines in all)", skipped[0], len(skipped))
	}
	if len(all) == 0 {
		return nil, traceErr("data.traces.store", "%s holds no traces", d.Store)
	}
	var ts []traces.Trace
	for i := range all {
		if d.Filter.Match(&all[i]) {
			ts = append(ts, all[i])
		}
	}
	if len(ts) == 0 {
		return nil, traceErr("data.traces", "none of the %d traces in %s passes the filters (%s)", len(all), d.Store, filterText(d.Filter))
	}
	if d.Reward != "" && !slices.ContainsFunc(ts, func(t traces.Trace) bool { _, ok := t.Reward(d.Reward); return ok }) {
		return nil, traceErr("data.traces.reward", "%q: no trace of the %d that pass the filters carries it (rewards there: %s)",
			d.Reward, len(ts), rewardNames(ts))
	}
	keepUnrewarded := !d.RL && math.IsNaN(d.MinReward) && d.Weighting != "exp" && d.Weighting != "filter"
	// Only a warm-up that filters or weighs by reward reads a row's own
	// reward: offline RL credits the trace's, plain SFT none.
	readsRowRewards := warmup && (!math.IsNaN(d.MinReward) || d.Weighting == "exp" || d.Weighting == "filter")
	built, err := traces.Build(ts, traces.TrajectoryOptions{Policy: "solver", Reward: d.Reward, Model: d.Filter.Model,
		Tokenizer: tok, KeepUnrewarded: keepUnrewarded, SkipRefused: d.SkipRefused, PerCall: d.PerCall, MergeRewards: !readsRowRewards})
	if err != nil {
		var ae *traces.AlignmentError
		if errors.As(err, &ae) && ae.Models != nil {
			return nil, traceErr("data.traces.model", "%w: name the policy's model here", err)
		}
		return nil, traceErr("data.traces", "%w", err)
	}
	rows, dropped := built.Turns, built.Dropped
	if len(rows) == 0 {
		why := "none of their spans is a model call with an answer"
		if len(dropped) > 0 {
			why = fmt.Sprintf("trace %s: %s", dropped[0].Trace, dropped[0].Why)
		}
		return nil, traceErr("data.traces", "%d traces pass the filters, but no model call of them can be trained on (%d dropped; %s)",
			len(ts), len(dropped), why)
	}
	lt := &loadedTraces{calls: built.Calls, retokenized: built.Retokenized, rows: len(rows)}
	lt.splits = traces.SummarizeSplits(built.Splits)
	for _, dr := range dropped {
		if dr.Refused {
			if lt.refused == 0 {
				lt.firstRefused = fmt.Sprintf("trace %s span %s: %s", dr.Trace, dr.Span, strings.TrimPrefix(dr.Why, "refused: "))
			}
			lt.refused++
		}
	}
	for _, r := range rows {
		if n := len(r.PromptIDs) + len(r.ResponseIDs); n > pc.positions {
			return nil, traceErr("data.traces", "trace %s row %d: %d tokens exceed the policy's context %d (%s)",
				r.EpisodeID, r.Turn, n, pc.positions, pc.field)
		}
		if math.Abs(r.Reward) > env.MaxEpisodeReward {
			// Two such rewards in a group overflow its mean and spread:
			// every advantage would be NaN, and the learner would refuse
			// the batch naming no trace.
			return nil, traceErr("data.traces.reward", "trace %s row %d: reward %g: want at most %g in magnitude (env.MaxEpisodeReward, the bound on an environment episode's rewards)",
				r.EpisodeID, r.Turn, r.Reward, env.MaxEpisodeReward)
		}
	}
	if warmup {
		if lt.warmup, err = warmupRows(rows, built.Calls, d, seed); err != nil {
			return nil, err
		}
	}
	if d.RL {
		if lt.groups, err = newTraceGroups(rows, groupSize, perStep, seed); err != nil {
			return nil, err
		}
	}
	return lt, nil
}

// warmupRows are the rows (of calls model calls) the warm-up trains on:
// those rewarded at least MinReward (and Threshold under filter
// weighting), shuffled with seed.
func warmupRows(rows []data.Turn, calls int, d *TraceData, seed uint64) ([]data.Turn, error) {
	var kept []data.Turn
	for _, r := range rows {
		if !math.IsNaN(d.MinReward) && r.Reward < d.MinReward || d.Weighting == "filter" && r.Reward < d.Threshold {
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		field, bound := "data.traces.min_reward", d.MinReward
		if d.Weighting == "filter" && (math.IsNaN(bound) || d.Threshold > bound) {
			field, bound = "sft.threshold", d.Threshold
		}
		return nil, traceErr(field, "%v: none of the %d model calls is rewarded that much (reward %s)", bound, calls, rewardLabel(d.Reward))
	}
	rand.New(rand.NewPCG(seed, 0x7472616365)).Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	return kept, nil
}

// warmupBatchFromTraces is warm-up step k's batch: batch rows taken in
// turn from the shuffled rows, so a resumed run at step k takes the same,
// each with its loss mask (tokens the model did not write carry no loss);
// exp weighting weighs them by their rewards.
func warmupBatchFromTraces(rows []data.Turn, k, batch int, d *TraceData) (learner.Batch, error) {
	var b learner.Batch
	var rewards []float64
	masked := false
	for i := range batch {
		r := &rows[(k*batch+i)%len(rows)]
		b.Prompts = append(b.Prompts, slices.Clone(r.PromptIDs))
		b.Responses = append(b.Responses, slices.Clone(r.ResponseIDs))
		b.Masks = append(b.Masks, slices.Clone(r.LossMask))
		rewards = append(rewards, r.Reward)
		masked = masked || slices.ContainsFunc(r.LossMask, func(m float32) bool { return m != 1 })
	}
	if !masked {
		b.Masks = nil // all ones, as the learner takes nil
	}
	if d.Weighting == "exp" {
		w, err := rl.RewardWeights(rewards, d.Beta)
		if err != nil {
			return learner.Batch{}, fmt.Errorf("warm-up step %d on data.traces: %w", k+1, err)
		}
		b.Weights = w
	}
	return b, nil
}

// traceGroups are offline RL's groups: the traces (episodes) of one first
// prompt, those with at least size traces.
type traceGroups struct {
	rows          []data.Turn
	groups        [][]episodeRows // in order of first appearance
	size, perStep int
	seed          uint64
	perm          []int // the group order of the current pass
	pass          int
}

// episodeRows are one trace's rows, rows[lo:hi].
type episodeRows struct{ lo, hi int }

// newTraceGroups groups rows (traces.Trajectories's, one trace's calls
// next to each other) by their GroupID; groups of fewer than size traces
// are left out, and none left is an error.
func newTraceGroups(rows []data.Turn, size, perStep int, seed uint64) (*traceGroups, error) {
	g := &traceGroups{rows: rows, size: size, perStep: perStep, seed: seed, pass: -1}
	byID := map[int64]int{}
	var all [][]episodeRows
	for i := range rows {
		if i > 0 && rows[i].EpisodeID == rows[i-1].EpisodeID {
			all[byID[rows[i].GroupID]][len(all[byID[rows[i].GroupID]])-1].hi = i + 1
			continue
		}
		k, ok := byID[rows[i].GroupID]
		if !ok {
			k = len(all)
			byID[rows[i].GroupID] = k
			all = append(all, nil)
		}
		all[k] = append(all[k], episodeRows{i, i + 1})
	}
	largest := 0
	for _, eps := range all {
		largest = max(largest, len(eps))
		if len(eps) >= size {
			g.groups = append(g.groups, eps)
		}
	}
	if len(g.groups) == 0 {
		return nil, traceErr("algorithm.group_size", "%d: no prompt of data.traces has that many traces (offline RL groups traces by their first prompt): the %d prompts have at most %d",
			size, len(all), largest)
	}
	return g, nil
}

// batch is the j-th offline RL batch: perStep groups, taken in passes
// over the groups in an order shuffled from the seed and the pass, each
// with size of its traces (all when it has size; else size picked by
// the seed and the slot), so that a batch follows from j alone. Each
// slot is a group of its own (GroupID the slot's number); the rows carry
// the trace's reward and their group-relative advantages (algorithm:
// grpo, drgrpo or rloo), as agent episodes' returns do.
func (g *traceGroups) batch(j int, algorithm string) ([]data.Turn, error) {
	n := len(g.groups)
	var turns []data.Turn
	for q := j * g.perStep; q < (j+1)*g.perStep; q++ {
		if pass := q / n; pass != g.pass {
			g.perm = rand.New(rand.NewPCG(g.seed, 0x67727000+uint64(pass))).Perm(n)
			g.pass = pass
		}
		eps := g.groups[g.perm[q%n]]
		pick := make([]int, len(eps))
		for i := range pick {
			pick[i] = i
		}
		if len(eps) > g.size {
			pick = rand.New(rand.NewPCG(g.seed, 0x73616d70+uint64(q))).Perm(len(eps))[:g.size]
			sort.Ints(pick)
		}
		for k, e := range pick {
			ep := eps[e]
			for i := ep.lo; i < ep.hi; i++ {
				t := g.rows[i]
				t.GroupID, t.Sample = int64(q), int32(k)
				t.Reward = 0
				if i == ep.hi-1 {
					t.Reward = t.FinalReward // the trace's: the episode's return
				}
				turns = append(turns, t)
			}
		}
	}
	return agentTraining(turns, algorithm, &AgentConfig{Returns: ReturnsEpisode})
}

// startTraceGroups is offline RL's pipeline start (startEpisodes's
// place): the next batch of trace groups, ready at once. Its rows count
// as on-policy (the learner's own log-probabilities at the step are the
// ratio's old ones; the recorded ones are not used).
func (r *run) startTraceGroups(_ context.Context, onPolicy int64, _ <-chan struct{}) (*episodeBatch, error) {
	turns, err := r.traces.groups.batch(r.traceDrawn, r.cfg.Learner.Algorithm)
	if err != nil {
		return nil, fmt.Errorf("data.traces: offline batch %d: %w", r.traceDrawn+1, err)
	}
	r.traceDrawn++
	for i := range turns {
		turns[i].WeightVersion = onPolicy
	}
	b := &episodeBatch{onPolicy: onPolicy, done: make(chan struct{}), turns: turns, offline: true}
	close(b.done)
	return b, nil
}

// readTraces loads cfg.Traces as a run does, with the solver's tokenizer
// (train.Check reads the store with it too).
func readTraces(cfg Config) (*loadedTraces, error) {
	sl := cfg.Learner
	sl.Model, sl.ModelDir = cfg.Model, cfg.ModelDir
	pc, err := contextOf(sl, "models.policy")
	if err != nil {
		return nil, fmt.Errorf("data.traces: %w", err)
	}
	return loadTraces(cfg.Traces, pc.tok, pc, cfg.Seed, cfg.WarmupSteps > 0, cfg.GroupSize, cfg.PromptsPerStep)
}

// traceData is the recipe's data.traces section (with sft's weighting)
// as a TraceData.
func traceData(tr *recipes.TracesData, sft recipes.SFT) *TraceData {
	f := traces.Any()
	f.Agent, f.Model, f.Run, f.Source = tr.Agent, tr.Model, tr.Run, tr.Source
	d := &TraceData{Store: tr.Store, Filter: f, Reward: tr.Reward, MinReward: math.NaN(),
		Weighting: sft.Weighting, Beta: sft.Beta, Threshold: sft.Threshold, RL: tr.Train == "rl", SkipRefused: tr.SkipRefused,
		PerCall: tr.MergeCalls != nil && !*tr.MergeCalls}
	if tr.MinReward != nil {
		d.MinReward = *tr.MinReward
	}
	return d
}

func filterText(f traces.Filter) string {
	var parts []string
	for _, p := range [][2]string{{"agent", f.Agent}, {"model", f.Model}, {"run", f.Run}, {"source", f.Source}, {"tool", f.Tool}, {"trace", f.TraceID}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rewardNames lists the reward names the traces carry, sorted.
func rewardNames(ts []traces.Trace) string {
	seen := map[string]bool{}
	for _, t := range ts {
		for _, s := range t.Spans {
			for _, r := range s.Rewards {
				seen[r.Name] = true
			}
		}
	}
	if len(seen) == 0 {
		return "none"
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func rewardLabel(name string) string {
	if name == "" {
		return "the sum of all"
	}
	return name
}
