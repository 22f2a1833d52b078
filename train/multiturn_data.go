package train

// Datasets in multi-turn episodes: MLMT's feedback templates may show
// the feedback policy a column of the row that the solver never sees
// (.Hint), as the task's pick problems carry a hint.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/rollout/data"
)

// DefaultHintColumn is the dataset column read as .Hint when
// Dataset.HintColumn is empty.
const DefaultHintColumn = "hint"

// feedbackUsesHint says whether a template of the feedback policy (its
// prompt or its warm-up target) or the warm-up's refine feedback shows
// .Hint or .AnyHint.
func (c *Config) feedbackUsesHint() bool {
	if c.Episode != EpisodeMLMT || c.Feedback == nil {
		return false
	}
	for _, t := range []string{c.FeedbackTemplate, c.FeedbackAnswerTemplate, c.RefineFeedbackTemplate} {
		if strings.Contains(t, ".Hint") || strings.Contains(t, ".AnyHint") {
			return true
		}
	}
	return false
}

func (ds *Dataset) hintColumn() string {
	if ds.HintColumn != "" {
		return ds.HintColumn
	}
	return DefaultHintColumn
}

// loadHints reads the hint column of the train file (and of the eval
// file) into the source: every row must have it, or the error names the
// file, line, row and column, before any actor starts.
func (s *datasetSource) loadHints(ctx context.Context, ds *Dataset) error {
	col := ds.hintColumn()
	load := func(which, path string, rows int) ([]string, error) {
		ex, err := data.LoadContext(ctx, path, data.Mapping{Prompt: ds.Mapping.Prompt, Answer: col})
		if err != nil {
			return nil, fmt.Errorf("dataset %s: the feedback templates use .Hint, read from column %q: %w", which, col, err)
		}
		if rows >= 0 && len(ex) != rows {
			return nil, fmt.Errorf("dataset %s %s: %d rows, %d a moment ago (the file changed?)", which, path, len(ex), rows)
		}
		out := make([]string, len(ex))
		for i, e := range ex {
			out[i] = e.Ref.Answer
		}
		return out, nil
	}
	train, err := load("train", ds.Train, len(s.trainEx))
	if err != nil {
		return err
	}
	var eval []string
	if ds.Eval != "" && len(s.evalProbs) > 0 {
		// Only the rows evaluated need one, but a file is checked whole.
		if eval, err = load("eval", ds.Eval, -1); err != nil {
			return err
		}
	}
	s.trainHints = train
	for i := range s.evalProbs {
		p := &s.evalProbs[i]
		which, row, _ := strings.Cut(p.ID, "/")
		k, err := strconv.Atoi(row)
		if err != nil {
			return fmt.Errorf("held-out problem %s: %w", p.ID, err)
		}
		if which == "eval" {
			p.Hint = eval[k]
		} else {
			p.Hint = train[k]
		}
	}
	return nil
}
