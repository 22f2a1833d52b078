package ctxopt

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Method is one formulation of context optimization: it picks a
// configuration per question and learns from the executions' rewards.
type Method interface {
	// Choose picks a configuration for every question (the most likely
	// one when greedy) and returns what Learn needs to learn from them.
	Choose(qs []Question, rng *rand.Rand, greedy bool) ([]Config, []Record, error)
	// Learn runs a PPO update from the records of one batch and the
	// execution rewards (one per record).
	Learn(recs []Record, rewards []float64) (map[string]UpdateStats, error)
	// Learners names the method's learners, for saving and loading.
	Learners() map[string]*Learner
}

// Record is one question's decisions: an episode per learner.
type Record map[string][]Step

// obsOf is the question embedding followed by extra features.
func obsOf(emb []float32, extra ...float32) []float32 {
	return append(slices.Clone(emb), extra...)
}

func oneHot(n, i int) []float32 {
	v := make([]float32, n)
	if i >= 0 && i < n {
		v[i] = 1
	}
	return v
}

// --- single-step: a contextual bandit over the whole configuration ---

// Bandit picks the whole configuration in one MultiDiscrete action:
// [structure, per role (tools, budget), per role atom-or-none]; heads of
// roles the structure does not run are inactive. γ = 0.
type Bandit struct {
	Space Space
	Emb   *Embedder
	L     *Learner
}

// NewBandit builds the bandit's learner.
func NewBandit(sp Space, emb *Embedder, cfg PPOConfig, rng *rand.Rand) (*Bandit, error) {
	heads := []int{int(NumStructures)}
	for range NumRoles {
		heads = append(heads, sp.ToolSets(), len(sp.Budgets))
	}
	for range NumRoles {
		heads = append(heads, len(sp.Atoms)+1)
	}
	cfg.Gamma = 0
	l, err := NewLearner("bandit", cfg, emb.Size(), heads, rng)
	if err != nil {
		return nil, err
	}
	return &Bandit{Space: sp, Emb: emb, L: l}, nil
}

// Learners implements Method.
func (b *Bandit) Learners() map[string]*Learner { return map[string]*Learner{"bandit": b.L} }

func banditActive(s Structure) []bool {
	act := []bool{true}
	for r := Role(0); r < NumRoles; r++ {
		act = append(act, s.Uses(r), s.Uses(r))
	}
	for r := Role(0); r < NumRoles; r++ {
		act = append(act, s.Uses(r))
	}
	return act
}

// Choose implements Method.
func (b *Bandit) Choose(qs []Question, rng *rand.Rand, greedy bool) ([]Config, []Record, error) {
	cs, recs := make([]Config, len(qs)), make([]Record, len(qs))
	for i, q := range qs {
		obs := b.Emb.Embed(q.Text)
		st, err := b.L.Decide(obs, Act{}, rng, greedy)
		if err != nil {
			return nil, nil, fmt.Errorf("bandit: %w", err)
		}
		a := st.Actions
		var c Config
		c.Structure = Structure(a[0])
		for r := Role(0); r < NumRoles; r++ {
			c.Agents[r] = Agent{Tools: a[1+2*r], Budget: a[2+2*r]}
			if at := a[1+2*int(NumRoles)+int(r)]; at > 0 {
				c.Agents[r].Atoms = []int{at - 1}
			}
		}
		// The logprob counts only the heads the chosen structure uses.
		st.Act = Act{Active: banditActive(c.Structure)}
		if st.LogProb, _, _, err = b.L.Policy.Evaluate(obs, st.Act, a); err != nil {
			return nil, nil, fmt.Errorf("bandit: %w", err)
		}
		cs[i], recs[i] = c, Record{"bandit": {st}}
	}
	return cs, recs, nil
}

// Learn implements Method.
func (b *Bandit) Learn(recs []Record, rewards []float64) (map[string]UpdateStats, error) {
	eps := make([][]Step, len(recs))
	for i, r := range recs {
		ep := slices.Clone(r["bandit"])
		ep[len(ep)-1].Reward = rewards[i]
		eps[i] = ep
	}
	st, err := b.L.Update(eps)
	return map[string]UpdateStats{"bandit": st}, err
}

// --- multi-step MDP ---

// MultiStep decides in turn: the structure, then per role the structure
// runs, its (tools, budget) and its atom (or none), with one Discrete head
// masked to the step's choices. Shaping: ShapeSimple per structure level
// below the most complex at the first step; the execution reward comes at
// the last step; γ = cfg.Gamma (0.95) with Monte Carlo returns.
type MultiStep struct {
	Space       Space
	Emb         *Embedder
	L           *Learner
	ShapeSimple float64
	head        int
}

// NewMultiStep builds the multi-step learner.
func NewMultiStep(sp Space, emb *Embedder, cfg PPOConfig, shapeSimple float64, rng *rand.Rand) (*MultiStep, error) {
	head := max(int(NumStructures), sp.AgentChoices(), len(sp.Atoms)+1)
	cfg.Lambda = 1
	l, err := NewLearner("multistep", cfg, emb.Size()+3+int(NumRoles)+int(NumStructures), []int{head}, rng)
	if err != nil {
		return nil, err
	}
	return &MultiStep{Space: sp, Emb: emb, L: l, ShapeSimple: shapeSimple, head: head}, nil
}

// Learners implements Method.
func (m *MultiStep) Learners() map[string]*Learner { return map[string]*Learner{"multistep": m.L} }

func (m *MultiStep) mask(n int) Act {
	mk := make([]bool, m.head)
	for i := range n {
		mk[i] = true
	}
	return Act{Mask: [][]bool{mk}}
}

// Choose implements Method.
func (m *MultiStep) Choose(qs []Question, rng *rand.Rand, greedy bool) ([]Config, []Record, error) {
	cs, recs := make([]Config, len(qs)), make([]Record, len(qs))
	for i, q := range qs {
		emb := m.Emb.Embed(q.Text)
		var ep []Step
		decide := func(kind int, role Role, st Structure, n int) (int, error) {
			structure := oneHot(int(NumStructures), int(st))
			if kind == 0 {
				structure = oneHot(int(NumStructures), -1)
			}
			obs := obsOf(emb, append(append(oneHot(3, kind), oneHot(int(NumRoles), int(role))...), structure...)...)
			s, err := m.L.Decide(obs, m.mask(n), rng, greedy)
			if err != nil {
				return 0, fmt.Errorf("multistep: %w", err)
			}
			ep = append(ep, s)
			return s.Actions[0], nil
		}
		a, err := decide(0, -1, 0, int(NumStructures))
		if err != nil {
			return nil, nil, err
		}
		var c Config
		c.Structure = Structure(a)
		ep[0].Reward = m.ShapeSimple * float64(NumStructures-1-c.Structure)
		for r := Role(0); r < NumRoles; r++ {
			if !c.Structure.Uses(r) {
				continue
			}
			a, err := decide(1, r, c.Structure, m.Space.AgentChoices())
			if err != nil {
				return nil, nil, err
			}
			c.Agents[r] = m.Space.UnpackAgent(a)
			if a, err = decide(2, r, c.Structure, len(m.Space.Atoms)+1); err != nil {
				return nil, nil, err
			}
			if a > 0 {
				c.Agents[r].Atoms = []int{a - 1}
			}
		}
		cs[i], recs[i] = c, Record{"multistep": ep}
	}
	return cs, recs, nil
}

// Learn implements Method.
func (m *MultiStep) Learn(recs []Record, rewards []float64) (map[string]UpdateStats, error) {
	eps := make([][]Step, len(recs))
	for i, r := range recs {
		ep := slices.Clone(r["multistep"])
		ep[len(ep)-1].Reward += rewards[i]
		eps[i] = ep
	}
	st, err := m.L.Update(eps)
	return map[string]UpdateStats{"multistep": st}, err
}

// --- hierarchical: a structure policy and a prompt policy ---

// Hierarchical has a structure policy (MultiDiscrete [structure, per role
// tools×budget], γ = 0) and a prompt policy (Discrete: an atom or DONE,
// per role in turn, up to Space.MaxAtoms atoms each, γ = 0.95) that
// composes each agent's prompt. Both learn from the same execution
// reward, each with its own learning rate and entropy coefficient.
type Hierarchical struct {
	Space     Space
	Emb       *Embedder
	Structure *Learner
	Prompt    *Learner
}

// NewHierarchical builds both learners.
func NewHierarchical(sp Space, emb *Embedder, structure, prompt PPOConfig, rng *rand.Rand) (*Hierarchical, error) {
	heads := []int{int(NumStructures)}
	for range NumRoles {
		heads = append(heads, sp.AgentChoices())
	}
	structure.Gamma = 0
	s, err := NewLearner("structure", structure, emb.Size(), heads, rng)
	if err != nil {
		return nil, err
	}
	prompt.Lambda = 1
	obs := emb.Size() + int(NumRoles) + int(NumStructures) + len(sp.Tools) + len(sp.Budgets) + len(sp.Atoms) + 1
	p, err := NewLearner("prompt", prompt, obs, []int{len(sp.Atoms) + 1}, rng)
	if err != nil {
		return nil, err
	}
	return &Hierarchical{Space: sp, Emb: emb, Structure: s, Prompt: p}, nil
}

// Learners implements Method.
func (h *Hierarchical) Learners() map[string]*Learner {
	return map[string]*Learner{"structure": h.Structure, "prompt": h.Prompt}
}

// Choose implements Method.
func (h *Hierarchical) Choose(qs []Question, rng *rand.Rand, greedy bool) ([]Config, []Record, error) {
	cs, recs := make([]Config, len(qs)), make([]Record, len(qs))
	sp := h.Space
	for i, q := range qs {
		emb := h.Emb.Embed(q.Text)
		st, err := h.Structure.Decide(emb, Act{}, rng, greedy)
		if err != nil {
			return nil, nil, fmt.Errorf("structure policy: %w", err)
		}
		var c Config
		c.Structure = Structure(st.Actions[0])
		active := []bool{true}
		for r := Role(0); r < NumRoles; r++ {
			c.Agents[r] = sp.UnpackAgent(st.Actions[1+r])
			active = append(active, c.Structure.Uses(r))
		}
		st.Act = Act{Active: active}
		if st.LogProb, _, _, err = h.Structure.Policy.Evaluate(emb, st.Act, st.Actions); err != nil {
			return nil, nil, fmt.Errorf("structure policy: %w", err)
		}
		var ep []Step
		for r := Role(0); r < NumRoles; r++ {
			if !c.Structure.Uses(r) {
				continue
			}
			a := &c.Agents[r]
			chosen := make([]float32, len(sp.Atoms))
			for len(a.Atoms) < sp.MaxAtoms {
				tools := make([]float32, len(sp.Tools))
				for k := range sp.Tools {
					if a.Tools&(1<<k) != 0 {
						tools[k] = 1
					}
				}
				extra := slices.Concat(oneHot(int(NumRoles), int(r)), oneHot(int(NumStructures), int(c.Structure)), tools,
					oneHot(len(sp.Budgets), a.Budget), chosen, []float32{float32(len(a.Atoms)) / float32(sp.MaxAtoms)})
				mask := make([]bool, len(sp.Atoms)+1)
				mask[0] = true // DONE
				for k := range sp.Atoms {
					mask[k+1] = chosen[k] == 0
				}
				s, err := h.Prompt.Decide(obsOf(emb, extra...), Act{Mask: [][]bool{mask}}, rng, greedy)
				if err != nil {
					return nil, nil, fmt.Errorf("prompt policy: %w", err)
				}
				ep = append(ep, s)
				if s.Actions[0] == 0 {
					break
				}
				a.Atoms = append(a.Atoms, s.Actions[0]-1)
				chosen[s.Actions[0]-1] = 1
			}
		}
		cs[i], recs[i] = c, Record{"structure": {st}, "prompt": ep}
	}
	return cs, recs, nil
}

// Learn implements Method.
func (h *Hierarchical) Learn(recs []Record, rewards []float64) (map[string]UpdateStats, error) {
	var seps, peps [][]Step
	for i, r := range recs {
		s := slices.Clone(r["structure"])
		s[0].Reward = rewards[i]
		seps = append(seps, s)
		p := slices.Clone(r["prompt"])
		p[len(p)-1].Reward = rewards[i]
		peps = append(peps, p)
	}
	ss, err := h.Structure.Update(seps)
	if err != nil {
		return nil, fmt.Errorf("structure policy: %w", err)
	}
	ps, err := h.Prompt.Update(peps)
	if err != nil {
		return nil, fmt.Errorf("prompt policy: %w", err)
	}
	return map[string]UpdateStats{"structure": ss, "prompt": ps}, nil
}
