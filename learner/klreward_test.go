package learner

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
)

// KL in the reward (PPO): the returns GAE gives are those of per-token
// rewards −β·k1 plus the score at the last token, worked here by hand
// from the policy's values and log probabilities and the reference's.
func TestKLInRewardReturns(t *testing.T) {
	policy, ref, _ := refModels(t)
	const beta, gamma, lambda = 0.2, 0.9, 0.8
	c := tinyConfig(PPO)
	c.Model, c.ModelDir, c.RefModelDir = nil, policy, ref
	c.Loss.KLCoef, c.Loss.KL, c.KLInReward = beta, rl.K1, true
	c.Gamma, c.Lambda = gamma, lambda
	l := newLearner(t, c)
	b := groupBatch()
	p, err := l.prepare(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}

	seqs := make([]model.Sequence, len(b.Prompts))
	for i := range seqs {
		seqs[i] = model.Sequence{Prompt: b.Prompts[i], Response: b.Responses[i]}
	}
	bt, err := model.NewBatch(seqs, 0, true, 300)
	if err != nil {
		t.Fatal(err)
	}
	lp, _, val, err := l.model.ForwardWithValues(bt)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := model.Load(ref, cpu.New())
	if err != nil {
		t.Fatal(err)
	}
	rlp, _, err := rm.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	logp, refLogp, values := bt.Split(lp), bt.Split(rlp), bt.Split(val)
	var klSum, n float64
	for i := range b.Responses {
		T := len(b.Responses[i])
		r := make([]float64, T)
		for k := range T {
			d := float64(logp[i][k]) - float64(refLogp[i][k])
			r[k] = -beta * d
			klSum, n = klSum+d, n+1
		}
		r[T-1] += b.Rewards[i]
		adv, next := 0.0, 0.0
		for k := T - 1; k >= 0; k-- {
			v := float64(values[i][k])
			adv = r[k] + gamma*next - v + gamma*lambda*adv
			next = v
			if got := float64(p.returns[i][k]); math.Abs(got-(adv+v)) > 1e-5 {
				t.Errorf("sequence %d token %d: return %v, by hand %v", i, k, got, adv+v)
			}
		}
	}
	st, err := l.Train(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := klSum / n; math.Abs(st.RefKL-want) > 1e-5 || math.Abs(st.KLPenalty-beta*want) > 1e-5 || math.Abs(want) < 1e-3 {
		t.Errorf("ref KL %v penalty %v, by hand %v and %v", st.RefKL, st.KLPenalty, want, beta*want)
	}
}

// A tiny PPO run with the KL in the reward (the default reference, the
// initial policy): the penalty is 0 at the first step, then β·KL > 0, and
// every statistic stays finite; the SFT warm-up takes the setting too.
func TestKLInRewardPPORun(t *testing.T) {
	c := tinyConfig(PPO)
	c.Loss.KLCoef, c.Loss.KL, c.KLInReward = 0.5, rl.K3, true
	c.MiniBatches, c.Epochs = 2, 2
	l := newLearner(t, c)
	if err := l.SetAlgorithm(SFT, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Train(sftBatch()); err != nil {
		t.Fatal(err)
	}
	if err := l.SetAlgorithm(PPO, 0); err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		st, err := l.Train(groupBatch())
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]float64{"loss": st.Loss, "value loss": st.ValueLoss, "ref KL": st.RefKL, "penalty": st.KLPenalty} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("step %d: %s %v", k, name, v)
			}
		}
		switch {
		case k == 0 && st.KLPenalty != 0:
			t.Errorf("first step's penalty %v, want 0 (the policy is the reference)", st.KLPenalty)
		case k > 0 && !(st.KLPenalty > 0):
			t.Errorf("step %d: penalty %v, want > 0", k, st.KLPenalty)
		}
		if math.Abs(st.KLPenalty-0.5*st.RefKL) > 1e-12 {
			t.Errorf("step %d: penalty %v is not β·KL (%v)", k, st.KLPenalty, st.RefKL)
		}
	}
}

func TestKLInRewardValidated(t *testing.T) {
	for _, tc := range []struct {
		alg  string
		coef float64
		want string
	}{
		{GRPO, 0.1, `only PPO takes a per-token reward (its GAE); algorithm is "grpo"`},
		{PPO, 0, "kl_in_reward true: needs loss.kl_coef > 0"},
	} {
		c := tinyConfig(tc.alg)
		c.Loss.KLCoef, c.Loss.KL, c.KLInReward = tc.coef, rl.K3, true
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s kl_coef %v: %v, want %q", tc.alg, tc.coef, err, tc.want)
		}
	}
}
