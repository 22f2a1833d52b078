package train

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// Dataset is a problem source read from files (rollout/data: JSONL or
// Parquet) instead of the synthetic task.
//
// Training draws the train rows in a seeded permutation per epoch
// (PCG(Seed, epoch), the order of data.Sampler): problem i of the run is
// row perm_{i/n}[i mod n], so the data cursor in driver_state.json alone
// says where a resumed run goes on. Evaluation takes the first
// EvalProblems rows of Eval; without an Eval file, EvalProblems rows
// (a seeded choice, PCG(Seed, heldOutStream)) are held out of the train
// file and never trained on. A dataset is loaded, and every row checked,
// before any actor starts.
type Dataset struct {
	// Train is the training file (.jsonl, .parquet or .csv); Eval the optional
	// held-out file with the same columns.
	Train, Eval string
	// Mapping names the columns (prompt; answer for math and gsm8k, or
	// the reference program an SFT warm-up trains on with code; tests and
	// setup for code; id).
	Mapping data.Mapping
	// EvalMapping names the eval file's columns when they differ (nil:
	// Mapping).
	EvalMapping *data.Mapping
	// GroupBy are columns of the held-out rows whose values break the
	// evaluation down (eval.group_by): read from the eval file, or from
	// the training file when rows are held out of it.
	GroupBy []string
	// Epochs bounds the passes over the train rows; 0 is unbounded.
	Epochs int
	// HintColumn is the column MLMT's feedback templates read as .Hint,
	// what only the feedback policy sees (default "hint"); it is loaded,
	// and required in every row, only when one of them uses .Hint
	// (multiturn_data.go).
	HintColumn string
}

// heldOutStream is the PCG stream of the held-out split; epochs use
// streams 0, 1, ... and stay below it.
const heldOutStream = 1 << 62

// problemSource is where a run's problems come from: the synthetic task
// or a dataset.
type problemSource interface {
	// train is the i-th training problem of the run (i is the data cursor).
	train(i int) (task.Problem, error)
	// heldOut is up to n distinct held-out problems, the same on every
	// call.
	heldOut(n int) ([]task.Problem, error)
	// reference is what a problem's answers are verified against.
	reference(p task.Problem) verify.Reference
	// anyHint is TemplateData.AnyHint for p: a hint of the form p's
	// hints take that is drawn independently of p's answer.
	anyHint(p task.Problem) string
}

type taskSource struct{ gen *task.Generator }

func (s taskSource) train(i int) (task.Problem, error) { return s.gen.Problem(task.Train, i) }
func (s taskSource) heldOut(n int) ([]task.Problem, error) {
	return heldOutProblems(s.gen, n)
}
func (s taskSource) reference(p task.Problem) verify.Reference {
	return verify.Reference{Answer: p.Answer}
}
func (s taskSource) anyHint(p task.Problem) string { return task.AnyHint(p) }

// datasetSource serves a loaded dataset. Problem IDs are "train/ROW" and
// "eval/ROW" (rows of the loaded files); refs holds their references.
type datasetSource struct {
	trainFile string // for errors
	seed      uint64
	epochs    int
	trainRows []int // rows of trainEx left for training
	trainEx   []data.Example
	evalProbs []task.Problem
	refs      map[string]verify.Reference
	// groups are the held-out problems' GroupBy values by ID (nil: no
	// group_by).
	groups map[string][]string
	// trainHints are the train file's hint column by row (nil: not
	// loaded; multiturn_data.go).
	trainHints []string
	// order is the permutation of epoch orderEpoch (a one-epoch cache).
	order      []int
	orderEpoch int
}

// loadDataset reads and checks the dataset files; evalProblems > 0 is how
// many held-out problems evaluation needs (0: none).
func loadDataset(ctx context.Context, ds *Dataset, seed uint64, evalProblems int) (*datasetSource, error) {
	if ds.Epochs < 0 {
		return nil, fmt.Errorf("train config: dataset.epochs %d: want ≥ 0", ds.Epochs)
	}
	trainMap, evalMap := ds.Mapping, ds.Mapping
	if ds.EvalMapping != nil {
		evalMap = *ds.EvalMapping
	}
	if ds.Eval != "" {
		evalMap.Groups = ds.GroupBy
	} else {
		trainMap.Groups = ds.GroupBy
	}
	train, err := data.LoadContext(ctx, ds.Train, trainMap)
	if err != nil {
		return nil, fmt.Errorf("dataset train: %w", err)
	}
	if len(train) == 0 {
		return nil, fmt.Errorf("dataset train %s: no rows: %w", ds.Train, data.ErrBadDataset)
	}
	s := &datasetSource{trainFile: ds.Train, seed: seed, epochs: ds.Epochs, trainEx: train, refs: map[string]verify.Reference{}, orderEpoch: -1}
	add := func(id string, ex data.Example) task.Problem {
		s.refs[id] = ex.Ref
		if ex.Groups != nil {
			if s.groups == nil {
				s.groups = map[string][]string{}
			}
			s.groups[id] = ex.Groups
		}
		return task.Problem{ID: id, Kind: "dataset", Question: ex.Prompt, Answer: ex.Ref.Answer}
	}
	held := map[int]bool{}
	switch {
	case ds.Eval != "":
		ev, err := data.LoadContext(ctx, ds.Eval, evalMap)
		if err != nil {
			return nil, fmt.Errorf("dataset eval: %w", err)
		}
		if evalProblems > 0 && len(ev) == 0 {
			return nil, fmt.Errorf("dataset eval %s: no rows: %w", ds.Eval, data.ErrBadDataset)
		}
		for i := range min(evalProblems, len(ev)) {
			s.evalProbs = append(s.evalProbs, add(fmt.Sprintf("eval/%d", i), ev[i]))
		}
	case evalProblems > 0:
		if evalProblems >= len(train) {
			return nil, fmt.Errorf("dataset train %s: %d rows: holding out %d for evaluation (no eval file) leaves none to train on; set data.dataset.eval or a smaller eval.held_out: %w",
				ds.Train, len(train), evalProblems, data.ErrBadDataset)
		}
		perm := rand.New(rand.NewPCG(seed, heldOutStream)).Perm(len(train))
		for _, row := range perm[:evalProblems] {
			held[row] = true
			s.evalProbs = append(s.evalProbs, add(fmt.Sprintf("train/%d", row), train[row]))
		}
	}
	for row, ex := range train {
		if !held[row] {
			s.trainRows = append(s.trainRows, row)
			s.refs[fmt.Sprintf("train/%d", row)] = ex.Ref
		}
	}
	return s, nil
}

// errDataEnd ends a run whose dataset epochs are used up.
var errDataEnd = errors.New("the dataset's epochs are used up")

func (s *datasetSource) train(i int) (task.Problem, error) {
	n := len(s.trainRows)
	epoch := i / n
	if s.epochs > 0 && epoch >= s.epochs {
		return task.Problem{}, fmt.Errorf("problem %d of %d rows × %d epochs: %w", i, n, s.epochs, errDataEnd)
	}
	if epoch != s.orderEpoch {
		s.order = rand.New(rand.NewPCG(s.seed, uint64(epoch))).Perm(n)
		s.orderEpoch = epoch
	}
	row := s.trainRows[s.order[i%n]]
	ex := s.trainEx[row]
	p := task.Problem{ID: fmt.Sprintf("train/%d", row), Kind: "dataset", Question: ex.Prompt, Answer: ex.Ref.Answer}
	if s.trainHints != nil {
		p.Hint = s.trainHints[row]
	}
	return p, nil
}

func (s *datasetSource) heldOut(n int) ([]task.Problem, error) {
	if len(s.evalProbs) == 0 {
		return nil, fmt.Errorf("dataset %s: no held-out problems (no eval file, and no rows held out: eval problems 0)", s.trainFile)
	}
	return s.evalProbs[:min(n, len(s.evalProbs))], nil
}

func (s *datasetSource) reference(p task.Problem) verify.Reference { return s.refs[p.ID] }

// anyHint is the hint of a training row chosen by a hash of p (the
// hints' own distribution, independent of p's answer); "" when the hint
// column is not loaded.
func (s *datasetSource) anyHint(p task.Problem) string {
	if len(s.trainHints) == 0 {
		return ""
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s\x00%s", s.seed, p.ID, p.Question)
	return s.trainHints[h.Sum64()%uint64(len(s.trainHints))]
}

// trainProblems is how many training problems a single-turn run draws:
// the warm-up's and the RL steps'.
func (c *Config) trainProblems() int {
	return c.WarmupSteps*c.WarmupBatch + c.Steps*c.PromptsPerStep
}

// newSource builds the run's problem source; a dataset is loaded and
// checked here, before any actor starts, until ctx ends.
func newSource(ctx context.Context, cfg Config) (problemSource, error) {
	if cfg.Episode == EpisodeAgent {
		return envSource{}, nil
	}
	if cfg.Dataset == nil {
		gen, err := task.New(cfg.Task)
		if err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
		return taskSource{gen}, nil
	}
	eval := 0
	if cfg.EvalEvery > 0 {
		eval = cfg.EvalProblems
	}
	s, err := loadDataset(ctx, cfg.Dataset, cfg.Seed, eval)
	if err != nil {
		return nil, err
	}
	if cfg.feedbackUsesHint() {
		if err := s.loadHints(ctx, cfg.Dataset); err != nil {
			return nil, err
		}
	}
	if e := cfg.Dataset.Epochs; e > 0 && cfg.trainProblems() > e*len(s.trainRows) {
		return nil, fmt.Errorf("train config: dataset.epochs %d: the run draws %d training problems, %d epochs of %d rows hold %d",
			e, cfg.trainProblems(), e, len(s.trainRows), e*len(s.trainRows))
	}
	return s, nil
}
