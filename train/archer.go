package train

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/data"
)

// Archer configures ArCHer (recipes.Archer): an utterance-level critic in
// the driver's process, Q(s, a) and V(s) as the value heads of two models
// of the policy's shape, with target copies; the solver trains on each of
// its turns' advantage Q(s, a) − V(s), broadcast to the turn's tokens.
type Archer struct {
	CriticLR, Tau, Gamma float64
	// BufferSize bounds the replay buffer in turns; CriticUpdates are the
	// critic's optimizer steps per RL step, each on CriticBatch turns.
	BufferSize, CriticUpdates, CriticBatch int
	// WarmupSteps are RL steps that train the critic alone.
	WarmupSteps int
	// InitFromPolicy starts both critic models from the solver's weights
	// at the first RL step (else random, seeded Seed+2).
	InitFromPolicy bool
}

func (a *Archer) validate(c *Config) error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("train config: archer: %s %v: %s", field, v, want)
	}
	switch {
	case c.Episode != "" && c.Episode != EpisodeSingle && c.Episode != EpisodeSCoRe && c.Episode != EpisodeMLMT:
		return bad("episode", c.Episode, "archer runs single, score and mlmt episodes")
	case c.BiLevel != nil || c.StopGradient || c.ShapeRefine || c.FreezeSolver:
		return fmt.Errorf("train config: archer: the solver trains every turn on its critic's advantage (one of bi_level, stop_gradient, shape_refine, freeze_solver is set)")
	case c.Learner.Algorithm == learner.PPO || c.Learner.Algorithm == learner.RWSFT:
		return bad("learner algorithm", c.Learner.Algorithm, "archer's actor is a policy gradient on given advantages (grpo)")
	case !(a.CriticLR > 0) || math.IsInf(a.CriticLR, 0):
		return bad("critic_lr", a.CriticLR, "want a finite value > 0")
	case !(a.Tau > 0 && a.Tau <= 1):
		return bad("tau", a.Tau, "want (0, 1]")
	case !(a.Gamma >= 0 && a.Gamma <= 1):
		return bad("gamma", a.Gamma, "want [0, 1]")
	case a.BufferSize < 1 || a.BufferSize > 1_000_000:
		return bad("buffer_size", a.BufferSize, "want 1 to 1000000")
	case a.CriticUpdates < 1 || a.CriticUpdates > 1000:
		return bad("critic_updates", a.CriticUpdates, "want 1 to 1000")
	case a.CriticBatch < 1 || a.CriticBatch > 4096:
		return bad("critic_batch", a.CriticBatch, "want 1 to 4096")
	case a.WarmupSteps < 0:
		return bad("warmup_steps", a.WarmupSteps, "want ≥ 0")
	case c.Resume != "":
		return fmt.Errorf("train config: archer: resuming is not supported: the critic and its replay buffer are not in checkpoints")
	}
	return nil
}

// Resumable says whether a run of c can be continued from its checkpoints
// with --resume: not with ArCHer, whose critic and replay buffer are not in
// them.
func (c Config) Resumable() bool { return c.Archer == nil }

// transition is one solver turn as the critic sees it: state s (the
// turn's prompt, history included), action a (its response), reward r,
// next state s' (the next solver turn's prompt) unless done.
type transition struct {
	state, action, next []int32
	reward              float64
	done                bool
}

// transitions are the solver's turns of one step's episodes as a chain per
// episode, in turn order: every turn but the last leads to the next with
// reward 0; the last is done with the episode's final reward (the
// verifier's score of its last answer). They come out in the order of
// trajectoryRows, the order of the solver's learner batch.
func transitions(solver string, turns []data.Turn) ([]transition, error) {
	rows, _, err := trajectoryRows(solver, turns, nil)
	if err != nil {
		return nil, err
	}
	byEpisode := map[string][]int{}
	for _, i := range rows {
		byEpisode[turns[i].EpisodeID] = append(byEpisode[turns[i].EpisodeID], i)
	}
	for _, idx := range byEpisode {
		slices.SortFunc(idx, func(a, b int) int { return int(turns[a].Turn) - int(turns[b].Turn) })
	}
	out := make([]transition, 0, len(rows))
	for _, i := range rows {
		t := &turns[i]
		if len(t.PromptIDs) == 0 {
			return nil, fmt.Errorf("archer: episode %s turn %d has an empty prompt", t.EpisodeID, t.Turn)
		}
		chain := byEpisode[t.EpisodeID]
		k := slices.Index(chain, i)
		tr := transition{state: t.PromptIDs, action: t.ResponseIDs}
		if k == len(chain)-1 {
			tr.reward, tr.done = t.FinalReward, true
		} else {
			tr.next = turns[chain[k+1]].PromptIDs
		}
		out = append(out, tr)
	}
	return out, nil
}

// replayBuffer is a bounded buffer of transitions: once full, each new one
// replaces the oldest.
type replayBuffer struct {
	items []transition
	next  int
	cap   int
}

func (b *replayBuffer) add(ts ...transition) {
	for _, t := range ts {
		if len(b.items) < b.cap {
			b.items = append(b.items, t)
			continue
		}
		b.items[b.next] = t
		b.next = (b.next + 1) % b.cap
	}
}

// sample draws n transitions uniformly with replacement.
func (b *replayBuffer) sample(rng *rand.Rand, n int) []transition {
	out := make([]transition, n)
	for i := range out {
		out[i] = b.items[rng.IntN(len(b.items))]
	}
	return out
}

// critic is ArCHer's utterance-level critic: online Q and V models and
// their frozen target copies, each read at one position of the sequence
// state ⧺ action ⧺ [0]: V(s) at the output after the state's last token,
// Q(s, a) at the output after the action's last token (the extra token is
// never scored, it only makes room for that output).
type critic struct {
	cfg        Archer
	q, v       *model.Model
	qT, vT     *model.Model
	qOpt, vOpt *model.Trainer
	buf        replayBuffer
	rng        *rand.Rand
	steps      int // RL steps seen
}

// newCritic builds the critic on the cpu backend from the solver's model
// config, its trunks from weights (nil: random, seeded).
func newCritic(a Archer, cfg model.Config, weights map[string][]float32, seed uint64) (*critic, error) {
	c := &critic{cfg: a, buf: replayBuffer{cap: a.BufferSize}, rng: rand.New(rand.NewPCG(seed, 0x61726368))}
	build := func(headSeed uint64) (*model.Model, *model.Model, *model.Trainer, error) {
		m, err := model.New(cfg, cpu.New())
		if err != nil {
			return nil, nil, nil, err
		}
		if weights == nil {
			m.InitRandom(seed)
		} else {
			for _, p := range m.Params() {
				w, ok := weights[p.Name]
				if !ok || len(w) != p.Len() {
					return nil, nil, nil, fmt.Errorf("the policy's weights have no tensor %q of %d values", p.Name, p.Len())
				}
				m.B.Upload(p.W, w)
			}
		}
		if err := m.AddValueHead(headSeed); err != nil {
			return nil, nil, nil, err
		}
		t, err := m.Clone()
		if err != nil {
			return nil, nil, nil, err
		}
		opt := &model.Trainer{Model: m, Opt: optim.NewAdamW(0.9, 0.999, 1e-8, 0), MaxGradNorm: 1}
		return m, t, opt, nil
	}
	var err error
	if c.q, c.qT, c.qOpt, err = build(seed + 1); err != nil {
		return nil, fmt.Errorf("archer critic: Q: %w", err)
	}
	if c.v, c.vT, c.vOpt, err = build(seed + 2); err != nil {
		return nil, fmt.Errorf("archer critic: V: %w", err)
	}
	return c, nil
}

// layout is the batch state ⧺ action ⧺ [0] of each transition (the state
// cut from the left to fit the model's positions) and, per transition,
// the output indices where V(s) and Q(s, a) are read.
func (c *critic) layout(ts []transition, next bool) (*model.Batch, []int, []int, error) {
	maxPos := c.q.Config.MaxPositions
	seqs := make([]model.Sequence, len(ts))
	for i, t := range ts {
		state, action := t.state, append(slices.Clone(t.action), 0)
		if next {
			state, action = t.next, []int32{0}
		}
		if len(action) >= maxPos {
			return nil, nil, nil, fmt.Errorf("archer critic: a turn of %d tokens does not fit the model's %d positions", len(action), maxPos)
		}
		if over := len(state) + len(action) - maxPos; over > 0 {
			state = state[over:]
		}
		seqs[i] = model.Sequence{Prompt: state, Response: action}
	}
	bt, err := model.NewBatch(seqs, 0, false, c.q.Config.VocabSize)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("archer critic: %w", err)
	}
	vAt, qAt := make([]int, len(ts)), make([]int, len(ts))
	for _, sp := range bt.Spans {
		vAt[sp.Seq], qAt[sp.Seq] = sp.Off, sp.Off+sp.N-1
	}
	return bt, vAt, qAt, nil
}

// values reads m's value head at the given outputs of bt.
func values(m *model.Model, bt *model.Batch, at []int) ([]float64, error) {
	_, _, vals, err := m.ForwardWithValues(bt)
	if err != nil {
		return nil, fmt.Errorf("archer critic: %w", err)
	}
	out := make([]float64, len(at))
	for i, k := range at {
		out[i] = float64(vals[k])
	}
	return out, nil
}

// criticStats report one RL step's critic updates (means over them).
type criticStats struct {
	QLoss, VLoss float64
	Replay       int
}

// update adds the step's transitions to the buffer and takes the critic's
// CriticUpdates steps on batches drawn from it, each followed by the
// Polyak update of the targets. It checks ctx before each (up to 1,000
// a step, minutes on a large model, which a stop should not wait) and
// gives up, with an error wrapping ctx's, once it is done.
func (c *critic) update(ctx context.Context, ts []transition) (criticStats, error) {
	c.buf.add(ts...)
	var st criticStats
	for k := range c.cfg.CriticUpdates {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("critic update %d of %d: %w", k+1, c.cfg.CriticUpdates, err)
		}
		batch := c.buf.sample(c.rng, c.cfg.CriticBatch)
		bt, vAt, qAt, err := c.layout(batch, false)
		if err != nil {
			return st, err
		}
		// Targets: y_Q = r + γ(1 − done)V'(s'), y_V = Q'(s, a).
		yV, err := values(c.qT, bt, qAt)
		if err != nil {
			return st, err
		}
		next := make([]float64, len(batch))
		var live []transition
		var liveAt []int
		for i, t := range batch {
			if !t.done {
				live, liveAt = append(live, t), append(liveAt, i)
			}
		}
		if len(live) > 0 {
			nb, nAt, _, err := c.layout(live, true)
			if err != nil {
				return st, err
			}
			nv, err := values(c.vT, nb, nAt)
			if err != nil {
				return st, err
			}
			for k, i := range liveAt {
				next[i] = nv[k]
			}
		}
		rewards, done := make([]float64, len(batch)), make([]bool, len(batch))
		for i, t := range batch {
			rewards[i], done[i] = t.reward, t.done
		}
		yQ, err := rl.TDTargets(rewards, next, done, c.cfg.Gamma)
		if err != nil {
			return st, fmt.Errorf("archer critic: %w", err)
		}
		var res rl.CriticLossResult
		step := func(m *model.Model, tr *model.Trainer, at []int, which string) error {
			_, err := tr.StepActorCritic([]*model.Batch{bt}, c.cfg.CriticLR, func(_ int, _ *model.Batch, s model.Scores) (float64, model.ScoreGrads, error) {
				cur := make([]float64, len(at))
				for i, k := range at {
					cur[i] = float64(s.Values[k])
				}
				var q, v []float64
				if which == "q" {
					q, v = cur, yV // V's term is constant here
				} else {
					q, v = yQ, cur
				}
				var err error
				if res, err = rl.CriticLoss(q, v, yQ, yV); err != nil {
					return 0, model.ScoreGrads{}, err
				}
				d := make([]float32, len(s.Values))
				loss, grad := res.QLoss, res.DQ
				if which == "v" {
					loss, grad = res.VLoss, res.DV
				}
				for i, k := range at {
					d[k] = float32(grad[i])
				}
				return loss, model.ScoreGrads{Values: d}, nil
			})
			if err != nil {
				return fmt.Errorf("archer critic: %s step: %w", which, err)
			}
			return nil
		}
		if err := step(c.q, c.qOpt, qAt, "q"); err != nil {
			return st, err
		}
		st.QLoss += res.QLoss / float64(c.cfg.CriticUpdates)
		if err := step(c.v, c.vOpt, vAt, "v"); err != nil {
			return st, err
		}
		st.VLoss += res.VLoss / float64(c.cfg.CriticUpdates)
		if err := polyak(c.qT, c.q, c.cfg.Tau); err != nil {
			return st, err
		}
		if err := polyak(c.vT, c.v, c.cfg.Tau); err != nil {
			return st, err
		}
	}
	st.Replay = len(c.buf.items)
	return st, nil
}

// polyak moves every weight of target toward online's (rl.Polyak).
func polyak(target, online *model.Model, tau float64) error {
	tp, op := target.Params(), online.Params()
	if len(tp) != len(op) {
		return fmt.Errorf("archer critic: target has %d tensors, online %d", len(tp), len(op))
	}
	for i, p := range op {
		w, tw := make([]float32, p.Len()), make([]float32, p.Len())
		online.B.Download(w, p.W)
		target.B.Download(tw, tp[i].W)
		if err := rl.Polyak(tw, w, tau); err != nil {
			return fmt.Errorf("archer critic: %s: %w", p.Name, err)
		}
		target.B.Upload(tp[i].W, tw)
	}
	return nil
}

// advantages are the online critic's Q(s, a) − V(s) of each transition.
func (c *critic) advantages(ts []transition) ([]float64, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	bt, vAt, qAt, err := c.layout(ts, false)
	if err != nil {
		return nil, err
	}
	q, err := values(c.q, bt, qAt)
	if err != nil {
		return nil, err
	}
	v, err := values(c.v, bt, vAt)
	if err != nil {
		return nil, err
	}
	adv, err := rl.UtteranceAdvantages(q, v)
	if err != nil {
		return nil, fmt.Errorf("archer critic: %w", err)
	}
	return adv, nil
}

// archerStep is ArCHer's part of an RL step: it starts the critic at the
// first one, trains it on the step's solver turns and the buffer, and
// sets sb's advantages to the critic's. It reports whether the solver
// trains this step (false during the critic's warm-up).
func (r *run) archerStep(ctx context.Context, sb *learner.Batch, turns []data.Turn, m *Metrics) (bool, error) {
	a := r.cfg.Archer
	if r.critic == nil {
		mc := r.cfg.Model
		if mc == nil {
			var err error
			if mc, err = model.ReadConfig(filepath.Join(r.cfg.ModelDir, "config.json")); err != nil {
				return false, fmt.Errorf("archer critic: %w", err)
			}
		}
		var w map[string][]float32
		if a.InitFromPolicy {
			var err error
			if _, w, err = r.source(r.solver).fetch(ctx, learner.WeightsPolicy); err != nil {
				return false, fmt.Errorf("archer critic: %w", err)
			}
		}
		var err error
		if r.critic, err = newCritic(*a, *mc, w, r.cfg.Seed+2); err != nil {
			return false, err
		}
	}
	ts, err := transitions(r.solver.id, turns)
	if err != nil {
		return false, err
	}
	st, err := r.critic.update(ctx, ts)
	if err != nil {
		return false, err
	}
	r.critic.steps++
	m.CriticQLoss, m.CriticVLoss, m.ReplaySize = &st.QLoss, &st.VLoss, &st.Replay
	if r.critic.steps <= a.WarmupSteps {
		return false, nil
	}
	adv, err := r.critic.advantages(ts)
	if err != nil {
		return false, err
	}
	if len(adv) != len(sb.Responses) {
		return false, fmt.Errorf("archer: %d solver turns for a batch of %d", len(adv), len(sb.Responses))
	}
	var mean float64
	sb.Advantages = make([][]float32, len(adv))
	for k, x := range adv {
		a := make([]float32, len(sb.Responses[k]))
		for j := range a {
			a[j] = float32(x)
		}
		sb.Advantages[k] = a
		mean += x / float64(len(adv))
	}
	m.CriticAdvantageMean = &mean
	return true, nil
}
