package learner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
)

// micro is one micro-batch: sequences [lo, hi) of the Train batch.
type micro struct {
	lo, hi int
	bt     *model.Batch
}

// prepared is a Train batch checked and laid out, with what the rollout
// phase fixed: masks, advantages, old log probs and values, returns.
type prepared struct {
	masks, sample, adv   [][]float32
	old, oldVal, returns [][]float32 // nil unless a pre-pass ran
	refKL                [][]float32 // KLInReward's per-token KL estimates (PPO)
	seqValues            []float64   // ValueBaseline's pre-pass values at each sequence's last loss token
	pre                  [][]micro   // the micro-batches the pre-pass ran over
	weights              []float64   // SFT / RWSFT
	pgW, klW             []float64   // the batch's per-sequence policy-gradient and KL weights (nil: 1)
	mini                 [][]micro   // this rank's micro-batches of each mini-batch
	miniRange            [][2]int    // each mini-batch's sequences [lo, hi) in the whole batch
}

// Train runs one batch through the configured algorithm: advantages (or
// SFT weights) over the whole batch, then MiniBatches optimizer steps over
// micro-batches of MicroBatchSeqs sequences. A bad batch is refused before
// any weight changes, with an error naming the field and the sequence; a
// non-finite loss or gradient stops the step with the weights untouched.
func (l *Learner) Train(b Batch) (Stats, error) { return l.TrainContext(context.Background(), b) }

// TrainContext is Train that checks ctx before each micro-batch's
// backward pass and each optimizer step, and gives up once it is done,
// with an error wrapping ctx's: a step of many epochs, mini-batches or
// micro-batches takes long, which a stopping run or node should not wait.
// The optimizer step in progress is not taken; those taken before it
// are, so a learner whose step was cancelled after its first optimizer
// step refuses to save (Save) until it loads a checkpoint.
func (l *Learner) TrainContext(ctx context.Context, b Batch) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{Step: l.step}, fmt.Errorf("learner: train step %d: %w", l.step+1, err)
	}
	// The RL phase starts before prepare: its reference is the one
	// prepare's KL reward penalty uses.
	if err := l.startRL(); err != nil {
		return Stats{Step: l.step}, err
	}
	p, err := l.prepare(ctx, b)
	if err != nil {
		if l.shard != nil && ctx.Err() != nil {
			// This rank alone may be stopping: the others must not wait
			// for it in the step's collectives.
			l.shard.Abort(l.step+1, err)
		}
		return Stats{Step: l.step}, fmt.Errorf("learner: train step %d: %w", l.step+1, err)
	}
	if err := l.maybeLoRA(); err != nil {
		return Stats{Step: l.step}, err
	}
	var st Stats
	var ps rl.PolicyStats
	var entSum, valLoss, valClipped, valTokens float64
	passes := len(p.mini) * l.cfg.epochs()
	for pass := range passes {
		if err := ctx.Err(); err != nil {
			if pass > 0 {
				l.partial = fmt.Sprintf("a train call was cancelled after %d of its %d optimizer steps (at step %d)", pass, passes, l.step)
			}
			if l.shard != nil {
				l.shard.Abort(l.step+1, err)
			}
			return Stats{Step: l.step}, fmt.Errorf("learner: train step %d (optimizer step %d of the batch's %d): %w", l.step+1, pass+1, passes, err)
		}
		k := pass % len(p.mini)
		mini := p.mini[k]
		lossCfg := l.cfg.Loss
		if b.EntropyCoef != nil {
			lossCfg.EntropyCoef = *b.EntropyCoef // checked by prepare
		}
		if l.cfg.KLInReward {
			lossCfg.KLCoef = 0 // in the rewards instead
		}
		// The whole mini-batch's counts, also on a rank that trains on a
		// slice of it.
		norm := rl.CountNorm(p.masks[p.miniRange[k][0]:p.miniRange[k][1]])
		if l.cfg.Algorithm == DrGRPO {
			lossCfg.Aggregation = rl.SeqMeanTokenSumNorm
		}
		if lossCfg.Aggregation == rl.SeqMeanTokenSumNorm {
			// Dr.GRPO's constant, whichever algorithm asks for its sum.
			norm.Const = float64(l.cfg.MaxResponseLen)
		}
		bts := make([]*model.Batch, len(mini))
		for i, mb := range mini {
			bts[i] = mb.bt
		}
		// The objective sees micro-batch i of this mini-batch.
		policy := func(i int, logp, ent []float32) (float64, rl.PolicyLossResult, error) {
			if err := ctx.Err(); err != nil {
				return 0, rl.PolicyLossResult{}, err // before this micro-batch's backward pass
			}
			mb := mini[i]
			lp, en := mb.bt.Split(logp), mb.bt.Split(ent)
			masks := p.masks[mb.lo:mb.hi]
			for s, m := range masks {
				for t, v := range m {
					entSum += float64(v) * float64(en[s][t])
				}
			}
			if !l.cfg.policyGradient() {
				loss, d, err := rl.WeightedSFTLoss(lp, masks, p.weights[mb.lo:mb.hi], lossCfg.Aggregation, norm)
				return loss, rl.PolicyLossResult{Loss: loss, DLogProbs: d}, err
			}
			pb := rl.PolicyBatch{LogProbs: lp, OldLogProbs: lp, Entropy: en, Advantages: p.adv[mb.lo:mb.hi], Mask: masks}
			if p.old != nil {
				pb.OldLogProbs = p.old[mb.lo:mb.hi]
			}
			if lossCfg.TISCap > 0 {
				pb.SampleLogProbs = p.sample[mb.lo:mb.hi]
			}
			if p.pgW != nil {
				pb.PGWeights = p.pgW[mb.lo:mb.hi]
			}
			if p.klW != nil {
				pb.KLWeights = p.klW[mb.lo:mb.hi]
			}
			if l.ref != nil && lossCfg.KLCoef > 0 {
				ref, _, err := l.ref.Forward(mb.bt)
				if err != nil {
					return 0, rl.PolicyLossResult{}, fmt.Errorf("reference policy: %w", err)
				}
				pb.RefLogProbs = mb.bt.Split(ref)
			}
			res, err := rl.PolicyLoss(lossCfg, pb, norm)
			ps = ps.Add(res.Stats)
			return res.Loss, res, err
		}
		lr := l.lr(l.step)
		var ss model.StepStats
		if l.cfg.Algorithm == PPO || (l.cfg.ValueBaseline != nil && l.cfg.policyGradient()) {
			vb := l.cfg.ValueBaseline
			ss, err = l.trainer.StepActorCritic(bts, lr, func(i int, bt *model.Batch, s model.Scores) (float64, model.ScoreGrads, error) {
				loss, res, err := policy(i, s.LogProbs, s.Entropy)
				if err != nil {
					return 0, model.ScoreGrads{}, err
				}
				mb := mini[i]
				var dValues [][]float32
				coef := l.cfg.VFCoef
				if vb != nil {
					coef = vb.LossCoef
					vr, err := rl.SquaredValueLoss(bt.Split(s.Values), b.Rewards[mb.lo:mb.hi], p.masks[mb.lo:mb.hi], norm)
					if err != nil {
						return 0, model.ScoreGrads{}, err
					}
					valLoss += vr.Loss
					dValues = vr.DValues
					loss += coef * vr.Loss
				} else {
					vbt := rl.ValueBatch{Values: bt.Split(s.Values), OldValues: p.oldVal[mb.lo:mb.hi], Returns: p.returns[mb.lo:mb.hi], Mask: p.masks[mb.lo:mb.hi]}
					vr, err := rl.ValueLoss(vbt, l.cfg.valueClip(), lossCfg.Aggregation, norm)
					if err != nil {
						return 0, model.ScoreGrads{}, err
					}
					valLoss += vr.Loss
					valClipped, valTokens = valClipped+vr.Clipped, valTokens+vr.Tokens
					dValues = vr.DValues
					loss += coef * vr.Loss
				}
				for _, d := range dValues {
					for t := range d {
						d[t] *= float32(coef)
					}
				}
				var g model.ScoreGrads
				if g.Values, err = bt.Join(dValues); err != nil {
					return 0, g, err
				}
				if vb != nil && vb.ValueOnly {
					return loss - res.Loss, g, nil
				}
				if g.LogProbs, err = bt.Join(res.DLogProbs); err != nil {
					return 0, g, err
				}
				if res.DEntropy != nil {
					if g.Entropy, err = bt.Join(res.DEntropy); err != nil {
						return 0, g, err
					}
				}
				return loss, g, nil
			})
		} else {
			ss, err = l.trainer.Step(bts, lr, func(i int, bt *model.Batch, logp, ent []float32) (float64, []float32, []float32, error) {
				loss, res, err := policy(i, logp, ent)
				if err != nil {
					return 0, nil, nil, err
				}
				dl, err := bt.Join(res.DLogProbs)
				if err != nil {
					return 0, nil, nil, err
				}
				var de []float32
				if res.DEntropy != nil {
					if de, err = bt.Join(res.DEntropy); err != nil {
						return 0, nil, nil, err
					}
				}
				return loss, dl, de, nil
			})
		}
		if err != nil {
			if pass > 0 && ctx.Err() != nil {
				l.partial = fmt.Sprintf("a train call was cancelled after %d of its %d optimizer steps (at step %d)", pass, passes, l.step)
			}
			if l.shard != nil {
				l.shard.Abort(l.step+1, err)
			}
			return Stats{Step: l.step}, fmt.Errorf("learner: %w%s", err, l.memoryHint(err))
		}
		l.step++
		st.Loss += ss.Loss / float64(passes)
		st.GradNorm, st.LR = ss.GradNorm, lr
	}
	st.Step = l.step
	if l.shard != nil {
		// Every rank reports the batch's sums, not its slice's.
		v := []float64{st.Loss, entSum, valLoss, valClipped, valTokens,
			ps.Tokens, ps.ClippedLow, ps.ClippedHigh, ps.DualClipped, ps.RatioSum, ps.ApproxKLSum,
			ps.RefKLSum, ps.EntropySum, ps.TISWeightSum, ps.TISTruncated, ps.PGLoss, ps.KLLoss, ps.EntropyLoss}
		if err := l.shard.SumStats(v); err != nil {
			return Stats{Step: l.step}, fmt.Errorf("learner: train step %d: statistics: %w", l.step, err)
		}
		st.Loss, entSum, valLoss, valClipped, valTokens = v[0], v[1], v[2], v[3], v[4]
		ps = rl.PolicyStats{Tokens: v[5], ClippedLow: v[6], ClippedHigh: v[7], DualClipped: v[8], RatioSum: v[9], ApproxKLSum: v[10],
			RefKLSum: v[11], EntropySum: v[12], TISWeightSum: v[13], TISTruncated: v[14], PGLoss: v[15], KLLoss: v[16], EntropyLoss: v[17]}
	}
	for _, m := range p.masks {
		st.Seqs++
		for _, v := range m {
			st.Tokens += int(v)
		}
	}
	st.ClipFrac, st.ClipFracLow, st.ClipFracHigh = ps.ClipFrac(), ps.ClipFracLow(), ps.ClipFracHigh()
	st.ApproxKL, st.RefKL = ps.ApproxKL(), ps.RefKL()
	if p.refKL != nil && st.Tokens > 0 {
		// Every rank holds it for the whole batch (PPO's pre-pass,
		// shared).
		var s float64
		for i, k := range p.refKL {
			for t, v := range k {
				s += float64(v) * float64(p.masks[i][t])
			}
		}
		st.RefKL = s / float64(st.Tokens)
		st.KLPenalty = l.cfg.Loss.KLCoef * st.RefKL
	}
	if st.Tokens > 0 { // every pass saw every token
		st.Entropy = entSum / float64(st.Tokens*l.cfg.epochs())
	}
	st.ValueLoss = valLoss / float64(passes)
	if l.cfg.Algorithm == PPO {
		st.ExplainedVar = explainedVar(p.returns, p.oldVal, p.masks)
	}
	st.Values = p.seqValues
	if valTokens > 0 {
		st.ValueClipFrac = valClipped / valTokens
	}
	if len(b.Rewards) > 0 {
		for _, r := range b.Rewards {
			st.RewardMean += r / float64(len(b.Rewards))
		}
	}
	if p.adv != nil && st.Tokens > 0 {
		var s float64
		for i, a := range p.adv {
			for t, v := range a {
				s += float64(v) * float64(p.masks[i][t])
			}
		}
		st.AdvantageMean = s / float64(st.Tokens)
	}
	return st, nil
}

// epochs is the passes over a batch (Epochs, 0 meaning 1).
func (c Config) epochs() int { return max(1, c.Epochs) }

// explainedVar is 1 − Var(returns − values)/Var(returns) over the masked
// tokens; 0 when the returns do not vary.
func explainedVar(returns, values, masks [][]float32) float64 {
	var n, sr, srr, sd, sdd float64
	for i, m := range masks {
		for t, w := range m {
			if w == 0 {
				continue
			}
			r, d := float64(returns[i][t]), float64(returns[i][t]-values[i][t])
			n, sr, srr, sd, sdd = n+1, sr+r, srr+r*r, sd+d, sdd+d*d
		}
	}
	if n == 0 {
		return 0
	}
	vr := srr/n - (sr/n)*(sr/n)
	if vr <= 1e-12 {
		return 0
	}
	return 1 - (sdd/n-(sd/n)*(sd/n))/vr
}

// valueClip is the value loss's clip; 0 in the config means no clipping.
func (c Config) valueClip() float64 {
	if c.ValueClip == 0 {
		return math.MaxFloat32
	}
	return c.ValueClip
}

// prepare checks b and computes everything fixed before the first step.
func (l *Learner) prepare(ctx context.Context, b Batch) (*prepared, error) {
	n := len(b.Prompts)
	if n == 0 {
		return nil, fmt.Errorf("batch: no sequences")
	}
	if len(b.Responses) != n {
		return nil, fmt.Errorf("batch: %d responses for %d prompts", len(b.Responses), n)
	}
	p := &prepared{masks: b.Masks}
	if p.masks == nil {
		p.masks = make([][]float32, n)
		for i, r := range b.Responses {
			p.masks[i] = ones(len(r))
		}
	}
	perToken := func(field string, v [][]float32, required bool) error {
		if v == nil {
			if required {
				return fmt.Errorf("batch: %s: missing", field)
			}
			return nil
		}
		if len(v) != n {
			return fmt.Errorf("batch: %s: %d sequences, want %d", field, len(v), n)
		}
		for i := range v {
			if len(v[i]) != len(b.Responses[i]) {
				return fmt.Errorf("batch: %s[%d]: %d values for %d response tokens", field, i, len(v[i]), len(b.Responses[i]))
			}
			for t, x := range v[i] {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					return fmt.Errorf("batch: %s[%d][%d] is %v", field, i, t, x)
				}
			}
		}
		return nil
	}
	cfg := l.cfg
	if err := perToken("masks", p.masks, true); err != nil {
		return nil, err
	}
	// The losses refuse any other mask value too, but only when they
	// reach the sequence's micro-batch: after the optimizer steps of the
	// mini-batches before it.
	for i, m := range p.masks {
		for t, x := range m {
			if x != 0 && x != 1 {
				return nil, fmt.Errorf("batch: masks[%d][%d] is %v, want 0 or 1", i, t, x)
			}
		}
	}
	if err := perToken("sample_logprobs", b.SampleLogProbs, cfg.policyGradient() && cfg.Loss.TISCap > 0); err != nil {
		return nil, err
	}
	if err := perToken("advantages", b.Advantages, false); err != nil {
		return nil, err
	}
	p.sample, p.adv = b.SampleLogProbs, b.Advantages
	for _, f := range []struct {
		name string
		w    []float64
	}{{"pg_weights", b.PGWeights}, {"kl_weights", b.KLWeights}} {
		if f.w == nil {
			continue
		}
		if !cfg.policyGradient() {
			return nil, fmt.Errorf("batch: %s: only policy-gradient algorithms take them (algorithm %s)", f.name, cfg.Algorithm)
		}
		if len(f.w) != n {
			return nil, fmt.Errorf("batch: %s: %d values for %d sequences", f.name, len(f.w), n)
		}
		for i, w := range f.w {
			if !(w >= 0) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("batch: %s[%d] is %v, want finite and ≥ 0", f.name, i, w)
			}
		}
	}
	p.pgW, p.klW = b.PGWeights, b.KLWeights
	if c := b.EntropyCoef; c != nil {
		switch {
		case !cfg.policyGradient():
			return nil, fmt.Errorf("batch: entropy_coef: only policy-gradient algorithms have an entropy bonus (algorithm %s)", cfg.Algorithm)
		case !(*c >= 0 && *c <= MaxEntropyCoef):
			return nil, fmt.Errorf("batch: entropy_coef %v: want a value in [0, %v]", *c, MaxEntropyCoef)
		}
	}
	needRewards := cfg.Algorithm != SFT && (p.adv == nil || cfg.Algorithm == RWSFT || cfg.Algorithm == PPO || cfg.ValueBaseline != nil)
	if needRewards || b.Rewards != nil {
		if len(b.Rewards) != n {
			return nil, fmt.Errorf("batch: rewards: %d values for %d sequences", len(b.Rewards), n)
		}
		for i, r := range b.Rewards {
			if math.IsNaN(r) || math.IsInf(r, 0) {
				return nil, fmt.Errorf("batch: rewards[%d] is %v", i, r)
			}
		}
	}

	// Lay out the micro-batches (the model checks the token ids).
	vocab := l.model.Config.VocabSize
	mbs := cfg.MiniBatches
	if mbs > n {
		return nil, fmt.Errorf("batch: %d sequences cannot make %d mini-batches", n, mbs)
	}
	layout := func(lo, hi int) ([]micro, error) {
		var out []micro
		for s := lo; s < hi; s += cfg.MicroBatchSeqs {
			e := min(s+cfg.MicroBatchSeqs, hi)
			seqs := make([]model.Sequence, e-s)
			for i := range seqs {
				seqs[i] = model.Sequence{Prompt: b.Prompts[s+i], Response: b.Responses[s+i]}
			}
			bt, err := model.NewBatch(seqs, 0, true, vocab)
			if err != nil {
				return nil, fmt.Errorf("sequences %d..%d: %w", s, e-1, err)
			}
			out = append(out, micro{lo: s, hi: e, bt: bt})
		}
		return out, nil
	}
	rank, ranks := 0, 1
	if l.shard != nil {
		rank, ranks = l.shard.Rank, l.shard.Ranks
	}
	if ranks > 1 {
		// Every rank checks every sequence, so a bad one fails the step on
		// all ranks alike, not only on the rank that trains on it.
		if _, err := layout(0, n); err != nil {
			return nil, err
		}
	}
	for k := range mbs {
		lo, hi := k*n/mbs, (k+1)*n/mbs
		if hi-lo < ranks {
			return nil, fmt.Errorf("batch: mini-batch %d has %d sequences for %d shards (want at least one per shard)", k, hi-lo, ranks)
		}
		p.miniRange = append(p.miniRange, [2]int{lo, hi})
		mini, err := layout(lo+rank*(hi-lo)/ranks, lo+(rank+1)*(hi-lo)/ranks)
		if err != nil {
			return nil, err
		}
		p.mini = append(p.mini, mini)
	}

	// Old log probs (and values) by a forward pass when the ratio can
	// differ from 1 or the critic's values are needed. Each rank runs it
	// on its own sequences. Under a critic every rank needs every
	// sequence's (PPO whitens its advantages over the whole batch; a
	// value baseline shapes every reward of a group): the ranks then add
	// up what each computed, zeros elsewhere, so every rank holds the same
	// bits for 1/ranks of a whole-batch pass's cost. (They are not the
	// bits of a whole-batch pass: a sequence's forward pass depends, at
	// float32 rounding, on the micro-batch it is packed in.)
	critic := cfg.Algorithm == PPO || (cfg.ValueBaseline != nil && cfg.policyGradient())
	if cfg.policyGradient() && (mbs > 1 || cfg.epochs() > 1 || critic) {
		p.old, p.oldVal = make([][]float32, n), make([][]float32, n)
		p.pre = p.mini
		for _, mini := range p.pre {
			for _, mb := range mini {
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("old log probs: %w", err)
				}
				var logp, val []float32
				var err error
				if critic {
					logp, _, val, err = l.model.ForwardWithValues(mb.bt)
				} else {
					logp, _, err = l.model.Forward(mb.bt)
				}
				if err != nil {
					return nil, l.rankFailed(fmt.Errorf("old log probs: %w", err), ranks > 1 && critic)
				}
				copy(p.old[mb.lo:], clone2(mb.bt.Split(logp)))
				if val != nil {
					copy(p.oldVal[mb.lo:], clone2(mb.bt.Split(val)))
				}
			}
		}
		if ranks > 1 && critic {
			if err := l.shareSequences(b.Responses, p.old, p.oldVal); err != nil {
				return nil, fmt.Errorf("old log probs: %w", err)
			}
		}
	}

	var err error
	rewards := b.Rewards
	if cfg.ValueBaseline != nil && cfg.policyGradient() {
		if p.seqValues, err = rl.LastValues(p.oldVal, p.masks); err != nil {
			return nil, err
		}
		if cfg.ValueBaseline.Shaping != 0 {
			if rewards, err = rl.ShapedRewards(b.Rewards, p.seqValues, cfg.ValueBaseline.Shaping); err != nil {
				return nil, err
			}
		}
	}
	if b.Weights != nil && cfg.Algorithm != SFT && cfg.Algorithm != RWSFT {
		return nil, fmt.Errorf("batch: weights: only SFT and RWSFT take them (algorithm %s)", cfg.Algorithm)
	}
	switch cfg.Algorithm {
	case SFT:
		p.weights = make([]float64, n)
		for i := range p.weights {
			p.weights[i] = 1
		}
		if b.Weights != nil {
			if err := checkWeights(b.Weights, n); err != nil {
				return nil, err
			}
			copy(p.weights, b.Weights)
		}
	case RWSFT:
		if b.Weights != nil { // the caller's, instead of the rewards'
			if err := checkWeights(b.Weights, n); err != nil {
				return nil, err
			}
			p.weights = slices.Clone(b.Weights)
			break
		}
		if cfg.RWFilter {
			p.weights, err = rl.FilterWeights(b.Rewards, cfg.RWThreshold)
		} else {
			p.weights, err = rl.RewardWeights(b.Rewards, cfg.RWBeta)
		}
		if err != nil {
			return nil, err
		}
	case PPO:
		var kl [][]float32
		beta := 0.0
		if cfg.KLInReward {
			if kl, err = l.rewardKL(ctx, p, b); err != nil {
				return nil, err
			}
			p.refKL, beta = kl, cfg.Loss.KLCoef
		}
		rewards, err := rl.TokenRewards(b.Rewards, kl, p.masks, beta)
		if err != nil {
			return nil, err
		}
		var adv [][]float32
		if adv, p.returns, err = rl.GAE(rewards, p.oldVal, p.masks, cfg.Gamma, cfg.Lambda); err != nil {
			return nil, err
		}
		if p.adv, err = rl.MaskedWhiten(adv, p.masks); err != nil {
			return nil, err
		}
	default:
		if p.adv != nil {
			break
		}
		if cfg.Algorithm == ReinforcePP {
			rewards, err := rl.TokenRewards(rewards, nil, p.masks, 0)
			if err != nil {
				return nil, err
			}
			if p.adv, _, err = rl.ReinforcePPAdvantages(rewards, p.masks, cfg.Gamma); err != nil {
				return nil, err
			}
			break
		}
		g, err := groupSize(b.GroupIDs, n)
		if err != nil {
			return nil, err
		}
		var seqAdv []float64
		switch cfg.Algorithm {
		case GRPO:
			seqAdv, err = rl.GRPOAdvantages(rewards, g)
		case DrGRPO:
			seqAdv, err = rl.DrGRPOAdvantages(rewards, g)
		case RLOO:
			seqAdv, err = rl.RLOOAdvantages(rewards, g)
		}
		if err != nil {
			return nil, err
		}
		if p.adv, err = rl.TokenAdvantages(seqAdv, p.masks); err != nil {
			return nil, err
		}
	}
	if err := p.checkFinite(); err != nil {
		// A rank's own pre-pass may hold the non-finite value alone: the
		// others would wait for it in the step's first collective.
		return nil, l.rankFailed(err, ranks > 1)
	}
	return p, nil
}

// checkFinite refuses a prepared batch whose per-token numbers are not
// finite at a loss token: the pre-pass's old log probs and values (a
// diverged model), the advantages, returns and weights. The losses would
// refuse them too, but at the micro-batch that holds them, after the
// optimizer steps of the mini-batches before it; here no weight has
// changed yet.
func (p *prepared) checkFinite() error {
	for _, f := range []struct {
		name string
		v    [][]float32
	}{{"old log probs", p.old}, {"old values", p.oldVal}, {"advantages", p.adv}, {"returns", p.returns}} {
		for i, seq := range f.v {
			for t, x := range seq {
				if p.masks[i][t] != 0 && (math.IsNaN(float64(x)) || math.IsInf(float64(x), 0)) {
					return fmt.Errorf("batch: %s[%d][%d] is %v at a loss token", f.name, i, t, x)
				}
			}
		}
	}
	for i, w := range p.weights {
		if math.IsNaN(w) || math.IsInf(w, 0) {
			return fmt.Errorf("batch: sequence weights[%d] is %v", i, w)
		}
	}
	return nil
}

// rewardKL is KLInReward's per-token KL of the pre-pass's log probabilities
// (the policy that sampled, on-policy) to the reference's, over the same
// micro-batches: under PPO every sequence of the batch.
func (l *Learner) rewardKL(ctx context.Context, p *prepared, b Batch) ([][]float32, error) {
	ref := make([][]float32, len(b.Prompts))
	for _, mini := range p.pre {
		for _, mb := range mini {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("reference policy: %w", err)
			}
			logp, _, err := l.ref.Forward(mb.bt)
			if err != nil {
				return nil, l.rankFailed(fmt.Errorf("reference policy: %w", err), l.shard != nil && l.shard.Ranks > 1)
			}
			copy(ref[mb.lo:], clone2(mb.bt.Split(logp)))
		}
	}
	if l.shard != nil && l.shard.Ranks > 1 {
		// The pre-pass covered this rank's sequences (prepare).
		if err := l.shareSequences(b.Responses, ref); err != nil {
			return nil, fmt.Errorf("reference policy: %w", err)
		}
	}
	kl, err := rl.KLPenalty(l.cfg.Loss.KL, p.old, ref, p.masks)
	if err != nil {
		return nil, err
	}
	return kl, nil
}

// shareSequences gives every rank every sequence's per-token values in
// each of vs: a rank holds those of its own sequences (nil elsewhere),
// and the ranks add up theirs, zeros elsewhere, in one collective (in
// float64, so each value comes back with its bits: x + 0 is x).
func (l *Learner) shareSequences(responses [][]int32, vs ...[][]float32) error {
	total := 0
	for _, r := range responses {
		total += len(r)
	}
	flat := make([]float64, 0, total*len(vs))
	for _, v := range vs {
		for i, r := range responses {
			if v[i] == nil {
				flat = append(flat, make([]float64, len(r))...)
				continue
			}
			for _, x := range v[i] {
				flat = append(flat, float64(x))
			}
		}
	}
	if err := l.shard.SumStats(flat); err != nil {
		return fmt.Errorf("sharing the ranks' sequences: %w", err)
	}
	for _, v := range vs {
		for i, r := range responses {
			v[i] = make([]float32, len(r))
			for t := range v[i] {
				v[i][t] = float32(flat[t])
			}
			flat = flat[len(r):]
		}
	}
	return nil
}

// rankFailed is err, told to the other ranks first when shared (they
// wait for this rank's part in a collective of the pre-pass, and would
// otherwise wait out its timeout).
func (l *Learner) rankFailed(err error, shared bool) error {
	if shared {
		l.shard.Abort(l.step+1, err)
	}
	return err
}

// groupSize checks that ids form contiguous groups of one size and
// returns it.
func groupSize(ids []int64, n int) (int, error) {
	if len(ids) != n {
		return 0, fmt.Errorf("batch: group_ids: %d values for %d sequences", len(ids), n)
	}
	size := 0
	seen := map[int64]bool{}
	for i := 0; i < n; {
		j := i
		for j < n && ids[j] == ids[i] {
			j++
		}
		if seen[ids[i]] {
			return 0, fmt.Errorf("batch: group_ids[%d]: group %d appears again after other groups (samples of a group must sit together)", i, ids[i])
		}
		seen[ids[i]] = true
		if size == 0 {
			size = j - i
		} else if j-i != size {
			return 0, fmt.Errorf("batch: group_ids[%d]: group %d has %d samples, the first group %d", i, ids[i], j-i, size)
		}
		i = j
	}
	return size, nil
}

func ones(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}

func clone2(v [][]float32) [][]float32 {
	out := make([][]float32, len(v))
	for i := range v {
		out[i] = append([]float32(nil), v[i]...)
	}
	return out
}

// checkWeights checks a batch's sequence weights: n of them, each finite
// and ≥ 0.
func checkWeights(w []float64, n int) error {
	if len(w) != n {
		return fmt.Errorf("batch: weights: %d for %d sequences", len(w), n)
	}
	for i, x := range w {
		if !(x >= 0) || math.IsInf(x, 0) {
			return fmt.Errorf("batch: weights[%d] is %v, want a finite number ≥ 0", i, x)
		}
	}
	return nil
}

// memoryHint is what to change when err is the device running out of
// memory: the recipe settings that make a step need less of it, those not
// already set first.
func (l *Learner) memoryHint(err error) string {
	if !errors.Is(err, cuda.ErrOutOfMemory) {
		return ""
	}
	tips := []string{fmt.Sprintf("fewer sequences per pass (algorithm.micro_batch, now %d)", l.cfg.MicroBatchSeqs)}
	if !l.cfg.CheckpointActivations {
		tips = append(tips, "algorithm.activation_checkpointing: true")
		if !l.cfg.ActivationsBF16 {
			tips = append(tips, "algorithm.activations_bf16: true")
		}
	}
	tips = append(tips, "more learner shards (placement.learner_shards: ZeRO-1 splits the optimizer state)")
	return "; the step does not fit in the GPU's memory, and each of these makes it need less: " + strings.Join(tips, ", ")
}
