package train

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/rlnode/rlnode/learner"
	modelpkg "github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// contextProbes is how many training problems checkContext renders.
const contextProbes = 8

// checkContext refuses a run whose first training problems cannot fit the
// policies' context (max_position_embeddings): a warm-up sequence, prompt
// and target, longer than the context, or a prompt leaving no room for
// one generated token. The lengths are lower bounds (a later turn's prompt
// is measured with an empty attempt and empty feedback), so what it
// refuses would certainly fail; a run that passes may still meet a longer
// problem later, which the learner refuses naming the sequence.
func checkContext(cfg Config, tpl *compiled, feedbackModel string) (field string, err error) {
	src, err := newSource(context.Background(), cfg)
	switch {
	case err != nil && cfg.Dataset != nil:
		// A dataset that does not load (damaged, empty, a column missing)
		// is refused here, so that validate and sbatch say so before a
		// job is queued; the error names the file, and a column's error
		// the field that maps it.
		var ce *data.ColumnError
		if errors.As(err, &ce) {
			if f := cfg.Dataset.columnField(ce.Column); f != "" {
				return f, err
			}
		}
		return "data.dataset", err
	case err != nil:
		return "", nil // the run reports the data source itself
	}
	sl := cfg.Learner
	sl.Model, sl.ModelDir = cfg.Model, cfg.ModelDir
	solver, err := contextOf(sl, "models.policy")
	if err != nil {
		return "", nil
	}
	if cfg.Episode == EpisodeAgent {
		return agentContext(cfg, tpl, solver)
	}
	var fb *policyContext
	if f := cfg.Feedback; f != nil {
		fl := f.learnerConfig(cfg)
		if fb, err = contextOf(fl, feedbackModel); err != nil {
			return "", nil
		}
	}
	pr := prompter{tpl}
	for i := range min(contextProbes, cfg.trainProblems()) {
		p, err := src.train(i)
		if err != nil {
			return "", nil
		}
		ex := data.Example{ID: p.ID, Prompt: p.Question, Hint: p.Hint}
		answer := render(tpl.answer, TemplateData{Question: p.Question, Answer: p.Answer})
		first, _ := pr.Solver(ex)
		firstWhat := "the first prompt (episode.templates.solver)"
		if cfg.Episode == EpisodeTools {
			firstWhat = "the first prompt (episode.templates.tool_solver)"
		}
		type seq struct {
			pol          *policyContext
			what, prompt string
			target       string
			sft          bool // the warm-up trains on prompt + target
		}
		seqs := []seq{{solver, firstWhat, first.Text, answer, cfg.WarmupSteps > 0}}
		switch cfg.Episode {
		case EpisodeSCoRe:
			later, _ := pr.Review(ex, "")
			seqs = append(seqs, seq{solver, "the review prompt (episode.templates.review)", later.Text, answer, cfg.WarmupSteps > 0})
		case EpisodeMLMT:
			d := TemplateData{Question: p.Question, Hint: p.Hint, AnyHint: src.anyHint(p), Answer: p.Answer}
			fbText := render(tpl.staticFeedback, d)
			if fb != nil {
				fbPrompt, _ := pr.Feedback(ex, "")
				target := ""
				if tpl.feedbackAnswer != nil {
					fbText = render(tpl.refineFeedback, d)
					target = render(tpl.feedbackAnswer, d)
				}
				seqs = append(seqs, seq{fb, "the feedback prompt (episode.templates.feedback)", fbPrompt.Text, target, cfg.WarmupSteps > 0})
			}
			later, _ := pr.Refine(ex, "", fbText)
			seqs = append(seqs, seq{solver, "the refine prompt (episode.templates.refine)", later.Text, answer, cfg.WarmupSteps > 0})
		}
		for _, s := range seqs {
			n := len(s.pol.tok.Encode(s.prompt))
			if n+1 > s.pol.positions {
				return s.pol.field, fmt.Errorf("%d positions: problem %s: %s takes %d tokens, leaving no room for an answer; raise it or shorten the template",
					s.pol.positions, p.ID, s.what, n)
			}
			if t := len(s.pol.tok.Encode(s.target)) + 1; s.sft && n+t > s.pol.positions {
				return s.pol.field, fmt.Errorf("%d positions: problem %s: the warm-up sequence of %s and its target takes %d tokens (%d + %d); raise it or shorten the template",
					s.pol.positions, p.ID, s.what, n+t, n, t)
			}
		}
	}
	return "", nil
}

// policyContext is what checkContext needs of a policy.
type policyContext struct {
	tok       *tokenizer.Tokenizer
	positions int
	field     string // the recipe field that sets positions
}

func contextOf(l learner.Config, model string) (*policyContext, error) {
	tok, err := policyTokenizer(l)
	if err != nil {
		return nil, err
	}
	pc := &policyContext{tok: tok}
	switch {
	case l.Model != nil:
		pc.positions, pc.field = l.Model.MaxPositions, model+".init.max_positions"
	default:
		mc, err := modelpkg.ReadConfig(filepath.Join(l.ModelDir, "config.json"))
		if err != nil {
			return nil, err
		}
		pc.positions, pc.field = mc.MaxPositions, model+".path"
	}
	return pc, nil
}

// columnField is the recipe field that maps col: the training file's
// columns first, then the eval file's own, then the hint column; "" when
// none names it.
func (ds *Dataset) columnField(col string) string {
	named := func(m data.Mapping, section string) string {
		for _, c := range []struct{ col, key string }{
			{m.Prompt, "prompt"}, {m.Answer, "answer"}, {m.Tests, "tests"}, {m.Setup, "setup"}, {m.ID, "id"},
		} {
			if c.col == col {
				return "data.dataset." + section + "." + c.key
			}
		}
		return ""
	}
	if f := named(ds.Mapping, "columns"); f != "" {
		return f
	}
	if ds.EvalMapping != nil {
		if f := named(*ds.EvalMapping, "eval_columns"); f != "" {
			return f
		}
	}
	if col == ds.hintColumn() {
		return "data.dataset.columns.hint"
	}
	return ""
}
