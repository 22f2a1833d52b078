package learner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// Files of a learner checkpoint directory, beside the model's config.json
// and model.safetensors (Hugging Face layout, loadable by model.Load and
// the native engine).
const (
	OptimizerFile = "optimizer.safetensors" // AdamW moments, torch's state keys; metadata "step"
	ReferenceFile = "reference.safetensors" // the frozen KL reference policy, when the loss has a KL term
	StateFile     = "learner_state.json"
)

// checkpointState is StateFile.
type checkpointState struct {
	Step      int    `json:"step"`
	Algorithm string `json:"algorithm"`
	Seed      uint64 `json:"seed"`
	// LoRADropout is the state of the LoRA dropout's random source, when
	// it drew any masks.
	LoRADropout []byte `json:"lora_dropout_state,omitempty"`
	// RLStart is the optimizer step the RL phase's LR schedule began at,
	// -1 before it began. A checkpoint written before the field existed
	// (nil) had its schedule count from step 0.
	RLStart *int `json:"rl_start_step"`
	// Reference is Config.RefModelDir, the KL reference the checkpoint
	// does not copy; empty when ReferenceFile holds it (or there is none).
	Reference string `json:"reference_model,omitempty"`
	// OptimizerOmitted marks a checkpoint saved without the AdamW state
	// (Config.OmitOptimizer); a learner loading it starts AdamW afresh.
	// Without the mark, a missing state is an error (a checkpoint cut
	// short).
	OptimizerOmitted bool `json:"optimizer_omitted,omitempty"`
}

// Save writes a checkpoint to dir: policy weights (float32), optimizer
// state (unless Config.OmitOptimizer), the reference policy when there is
// one, and the step.
func (l *Learner) Save(dir string) error { return l.SaveContext(context.Background(), dir) }

// SaveContext is Save that checks ctx between tensors as it copies and
// writes them, and gives up, with an error wrapping ctx's, once it is
// done: a large model's save (a checkpoint, or the weights a vLLM server
// reloads) takes seconds that a stop should not wait. A checkpoint given
// up is incomplete (no learner_state.json, or an optimizer state of
// another step); the files of one written are Save's.
func (l *Learner) SaveContext(ctx context.Context, dir string) error {
	if err := l.SaveModelContext(ctx, dir); err != nil {
		return err
	}
	if l.cfg.OmitOptimizer {
		// No stale state of an earlier save may pass for this one's.
		if err := os.Remove(filepath.Join(dir, OptimizerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("learner: save %s: stale optimizer state: %w", dir, err)
		}
		return removeShardFiles(dir, 0)
	}
	if err := l.trainer.SyncOptimizer(); err != nil {
		return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
	}
	st := l.trainer.Opt.State()
	ts := make([]safetensors.Tensor, 0, len(st.Tensors))
	for _, t := range st.Tensors {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
		}
		x, err := safetensors.FromFloat32(t.Name, safetensors.F32, []int{len(t.Data)}, t.Data)
		if err != nil {
			return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
		}
		ts = append(ts, x)
	}
	if err := safetensors.WriteFileContext(ctx, filepath.Join(dir, OptimizerFile), ts, map[string]string{"step": strconv.Itoa(st.Step)}); err != nil {
		return fmt.Errorf("learner: save %s: optimizer: %w", dir, err)
	}
	return removeShardFiles(dir, 0)
}

// SaveModel writes everything of a checkpoint but the optimizer state:
// policy weights, the reference policy when there is one, and
// learner_state.json. A ZeRO-1 group's rank 0 calls it while every rank
// writes its optimizer shard (WriteOptimizerShard). Under LoRA the
// weights are the frozen base (config.json, model.safetensors) and the
// adapters beside them in PEFT's layout (model.AdapterWeights,
// model.AdapterConfig): the directory is a base model with its adapter.
func (l *Learner) SaveModel(dir string) error { return l.SaveModelContext(context.Background(), dir) }

// SaveModelContext is SaveModel that gives up once ctx is done (as
// SaveContext). Neither writes weights that are no step's: after a
// TrainContext cancelled between optimizer steps, both refuse until a
// Load.
func (l *Learner) SaveModelContext(ctx context.Context, dir string) error {
	if l.partial != "" {
		return fmt.Errorf("learner: save %s: refused: %s, so the weights are no step's (load a checkpoint first)", dir, l.partial)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if err := l.model.SaveContext(ctx, dir, safetensors.F32); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if l.model.LoRA() != nil {
		if err := l.model.SaveLoRA(dir, ""); err != nil {
			return fmt.Errorf("learner: save %s: %w", dir, err)
		}
	} else {
		for _, f := range []string{model.AdapterWeights, model.AdapterConfig} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("learner: save %s: stale adapter: %w", dir, err)
			}
		}
	}
	drop, err := l.model.DropoutState()
	if err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if l.cfg.RefModelDir != "" {
		if err := removeReferenceFile(dir); err != nil {
			return err
		}
	} else if l.ref != nil {
		var rt []safetensors.Tensor
		for _, p := range l.ref.Params() {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("learner: save %s: reference: %w", dir, err)
			}
			v := make([]float32, p.Len())
			l.ref.B.Download(v, p.W)
			x, err := safetensors.FromFloat32(p.Name, safetensors.F32, p.Shape, v)
			if err != nil {
				return fmt.Errorf("learner: save %s: reference: %w", dir, err)
			}
			rt = append(rt, x)
		}
		if err := safetensors.WriteFileContext(ctx, filepath.Join(dir, ReferenceFile), rt, nil); err != nil {
			return fmt.Errorf("learner: save %s: reference: %w", dir, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	cs := checkpointState{Step: l.step, Algorithm: l.cfg.Algorithm, Seed: l.cfg.Seed, LoRADropout: drop, RLStart: &l.rlStart, Reference: l.cfg.RefModelDir, OptimizerOmitted: l.cfg.OmitOptimizer}
	js, err := json.MarshalIndent(cs, "", "  ")
	if err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("learner: save %s: %w", dir, err)
	}
	return nil
}

// Load replaces the learner's policy, optimizer state, reference and step
// with a checkpoint written by Save. A checkpoint saved without optimizer
// state (OptimizerOmitted) leaves AdamW fresh: the moments restart at zero. The model's architecture must match
// the learner's; a checkpoint with LoRA adapters needs Config.LoRA with
// the same rank, alpha, dropout and targets. Everything is read and
// checked before anything changes.
func (l *Learner) Load(dir string) error { return l.LoadContext(context.Background(), dir) }

// LoadContext is Load that gives up once ctx is done (checked while the
// checkpoint's files are read and between tensors), with an error that
// wraps ctx's and the learner unchanged: a large checkpoint takes minutes
// to read, which a stopped run or node should not wait.
func (l *Learner) LoadContext(ctx context.Context, dir string) error {
	// A learner on a device loads onto it; on the host, onto a fresh CPU
	// backend.
	b := backend.Backend(cpu.New())
	if _, host := l.model.B.(backend.HostMemory); !host {
		b = l.model.B
	}
	m, err := model.LoadContext(ctx, dir, b)
	if err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	var ref *model.Model
	loaded := false
	if b == l.model.B {
		defer func() {
			if !loaded { // the learner keeps its model: the new one's memory goes back
				m.Release()
				if ref != nil && ref != l.ref {
					ref.Release()
				}
			}
		}()
	}
	if model.HasAdapter(dir) {
		if err := l.loadAdapter(ctx, m, dir); err != nil {
			return err
		}
	}
	if err := sameArch(m.Config, l.model.Config); err != nil {
		return fmt.Errorf("learner: load %s: %w", dir, err)
	}
	if (m.Value == nil) != (l.model.Value == nil) {
		return fmt.Errorf("learner: load %s: value head present %v, the learner's %v", dir, m.Value != nil, l.model.Value != nil)
	}
	var state checkpointState
	js, err := readfile.Regular(filepath.Join(dir, StateFile), maxStateBytes)
	if err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	if err := json.Unmarshal(js, &state); err != nil {
		return fmt.Errorf("learner: load %s: %w", filepath.Join(dir, StateFile), err)
	}
	if state.Step < 0 {
		return fmt.Errorf("learner: load %s: step %d is negative", filepath.Join(dir, StateFile), state.Step)
	}
	rlStart := -1
	switch {
	case state.RLStart != nil && (*state.RLStart < -1 || *state.RLStart > state.Step):
		return fmt.Errorf("learner: load %s: rl_start_step %d not in [-1, step %d]", filepath.Join(dir, StateFile), *state.RLStart, state.Step)
	case state.RLStart != nil:
		rlStart = *state.RLStart
	case state.Algorithm != SFT && state.Step > 0:
		rlStart = 0
	}
	sizes := map[string]int{}
	for _, p := range m.TrainableParams() {
		sizes[p.Name] = p.Len()
	}
	var ost optim.AdamWState
	optPath := filepath.Join(dir, StateFile)
	if !state.OptimizerOmitted {
		if ost, optPath, err = ReadOptimizerStateContext(ctx, dir, sizes); err != nil {
			return fmt.Errorf("learner: load: %w", err)
		}
	}
	if state.Reference != l.cfg.RefModelDir {
		return fmt.Errorf("learner: load %s: reference_model %q, the learner's %q: resume with the reference the run started with (models.reference)", filepath.Join(dir, StateFile), state.Reference, l.cfg.RefModelDir)
	}
	ref = l.ref // a given reference stays
	if l.ref != nil && l.cfg.RefModelDir == "" {
		refPath := filepath.Join(dir, ReferenceFile)
		rf, err := safetensors.ReadFileContext(ctx, refPath)
		if err != nil {
			return fmt.Errorf("learner: load: %w", err)
		}
		if ref, err = m.Clone(); err != nil {
			return fmt.Errorf("learner: load %s: %w", dir, err)
		}
		for _, p := range ref.Params() {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("learner: load %s: %w", refPath, err)
			}
			v, shape, err := rf.FiniteFloat32(p.Name)
			if err != nil {
				return fmt.Errorf("learner: load %s: %w", refPath, err)
			}
			if len(v) != p.Len() {
				return fmt.Errorf("learner: load %s: tensor %q: shape %v, want %v", refPath, p.Name, shape, p.Shape)
			}
			ref.B.Upload(p.W, v)
		}
	}
	tr := &model.Trainer{Model: m, Opt: optim.NewAdamW(l.cfg.Beta1, l.cfg.Beta2, l.cfg.Eps, l.cfg.WeightDecay), MaxGradNorm: l.cfg.MaxGradNorm}
	params := make([]*optim.Param, 0)
	for _, p := range m.TrainableParams() {
		params = append(params, &optim.Param{Name: p.Name, Data: make([]float32, p.Len()), Grad: make([]float32, p.Len())})
	}
	if !state.OptimizerOmitted {
		if err := tr.Opt.LoadState(params, ost); err != nil {
			return fmt.Errorf("learner: load %s: %w", optPath, err)
		}
	}
	if err := m.SetDropoutState(state.LoRADropout); err != nil {
		return fmt.Errorf("learner: load %s: %w", filepath.Join(dir, StateFile), err)
	}
	if vb := l.cfg.ValueBaseline; vb != nil && m.Value != nil {
		m.Value.DetachTrunk = vb.StopTrunkGradient
	}
	m.CheckpointActivations, m.ActivationsBF16 = l.cfg.CheckpointActivations, l.cfg.ActivationsBF16
	if b == l.model.B {
		// The replaced model's device memory goes back (the reference too
		// where a new one was built).
		l.trainer.Release()
		l.model.Release()
		if l.ref != nil && ref != l.ref {
			l.ref.Release()
		}
	}
	l.model, l.ref, l.trainer, l.step, l.rlStart, l.partial = m, ref, tr, state.Step, rlStart, ""
	loaded = true
	l.armDropout()
	return nil
}

// maxStateBytes caps the learner's state file, read whole: it is
// kilobytes.
const maxStateBytes = 16 << 20

// OptimizerOmitted reports whether the checkpoint in dir was saved without
// its AdamW state (Config.OmitOptimizer), so that resuming from it restarts
// the optimizer's moments.
func OptimizerOmitted(dir string) (bool, error) {
	path := filepath.Join(dir, StateFile)
	js, err := readfile.Regular(path, maxStateBytes)
	if err != nil {
		return false, fmt.Errorf("learner: %w", err)
	}
	var st checkpointState
	if err := json.Unmarshal(js, &st); err != nil {
		return false, fmt.Errorf("learner: %s: %w", path, err)
	}
	return st.OptimizerOmitted, nil
}

// loadAdapter puts the PEFT adapter in dir onto m, checking it against
// Config.LoRA.
func (l *Learner) loadAdapter(ctx context.Context, m *model.Model, dir string) error {
	want := l.cfg.LoRA
	if want == nil {
		return fmt.Errorf("learner: load %s: the checkpoint has LoRA adapters (%s) but the learner's config has no lora", dir, model.AdapterConfig)
	}
	if err := m.LoadLoRAContext(ctx, dir); err != nil {
		return fmt.Errorf("learner: load: %w", err)
	}
	got := m.LoRA()
	if got.Rank != want.Rank || got.Alpha != want.Alpha || got.Dropout != want.Dropout || !sameSet(got.TargetModules, want.TargetModules) {
		return fmt.Errorf("learner: load %s: adapter r=%d alpha=%v dropout=%v targets %v, the learner's config r=%d alpha=%v dropout=%v targets %v",
			filepath.Join(dir, model.AdapterConfig), got.Rank, got.Alpha, got.Dropout, got.TargetModules, want.Rank, want.Alpha, want.Dropout, want.TargetModules)
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// sameArch reports the first architecture field where a and b differ.
func sameArch(a, b model.Config) error {
	type f struct {
		name string
		x, y any
	}
	for _, c := range []f{
		{"architecture", a.Architecture, b.Architecture}, {"hidden_size", a.HiddenSize, b.HiddenSize},
		{"intermediate_size", a.IntermediateSize, b.IntermediateSize}, {"num_hidden_layers", a.NumLayers, b.NumLayers},
		{"num_attention_heads", a.NumHeads, b.NumHeads}, {"num_key_value_heads", a.NumKVHeads, b.NumKVHeads},
		{"head_dim", a.HeadDim, b.HeadDim}, {"vocab_size", a.VocabSize, b.VocabSize},
		{"tie_word_embeddings", a.TieWordEmbeddings, b.TieWordEmbeddings},
	} {
		if c.x != c.y {
			return fmt.Errorf("config %s is %v, the learner's %v", c.name, c.x, c.y)
		}
	}
	return nil
}

// A ZeRO-1 group writes its AdamW state as one file per rank,
// ShardOptimizerFile(rank, n), instead of OptimizerFile. A shard file holds,
// for each tensor the rank owns elements of, "exp_avg.<name>" and
// "exp_avg_sq.<name>" with those elements in order, and the metadata
// "ranges.<name>" = "lo:hi,lo:hi,…" (element ranges of the flattened tensor)
// beside "step", "rank" and "shards". Any set of shard files that covers
// every element once loads into any shard count (ReadOptimizerState merges
// them), and so does an unsharded OptimizerFile.

// ShardOptimizerFile is the file name of rank's (0-based) optimizer shard
// of n.
func ShardOptimizerFile(rank, n int) string {
	return fmt.Sprintf("optimizer-%05d-of-%05d.safetensors", rank+1, n)
}

var shardFileRE = regexp.MustCompile(`^optimizer-(\d{5})-of-(\d{5})\.safetensors$`)

// OptimizerPart is one tensor's share of a rank's optimizer state: element
// ranges [lo, hi) of the flattened tensor and the moments of those
// elements, concatenated in range order.
type OptimizerPart struct {
	Name             string
	Ranges           [][2]int
	ExpAvg, ExpAvgSq []float32
}

// WriteOptimizerShard writes rank's part of an optimizer state at step into
// dir. Rank 0 also removes an unsharded OptimizerFile and shard files of
// another shard count, so a directory never holds two states.
func WriteOptimizerShard(dir string, rank, n, step int, parts []OptimizerPart) error {
	name := filepath.Join(dir, ShardOptimizerFile(rank, n))
	meta := map[string]string{"step": strconv.Itoa(step), "rank": strconv.Itoa(rank), "shards": strconv.Itoa(n)}
	var ts []safetensors.Tensor
	for _, p := range parts {
		total := 0
		rs := make([]string, len(p.Ranges))
		for i, r := range p.Ranges {
			total += r[1] - r[0]
			rs[i] = fmt.Sprintf("%d:%d", r[0], r[1])
		}
		if total != len(p.ExpAvg) || total != len(p.ExpAvgSq) {
			return fmt.Errorf("write %s: tensor %q: ranges cover %d elements, moments have %d and %d", name, p.Name, total, len(p.ExpAvg), len(p.ExpAvgSq))
		}
		meta["ranges."+p.Name] = strings.Join(rs, ",")
		for _, m := range []struct {
			prefix string
			v      []float32
		}{{optim.ExpAvgPrefix, p.ExpAvg}, {optim.ExpAvgSqPrefix, p.ExpAvgSq}} {
			t, err := safetensors.FromFloat32(m.prefix+p.Name, safetensors.F32, []int{len(m.v)}, m.v)
			if err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			ts = append(ts, t)
		}
	}
	tmp := name + ".tmp"
	if err := safetensors.WriteFile(tmp, ts, meta); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if rank != 0 {
		return nil
	}
	if err := os.Remove(filepath.Join(dir, OptimizerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return removeShardFiles(dir, n)
}

// removeShardFiles deletes optimizer shard files of a shard count other
// than keep (0 removes all).
func removeShardFiles(dir string, keep int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		m := shardFileRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if n, _ := strconv.Atoi(m[2]); n != keep {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove stale %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// ReadOptimizerState reads the AdamW state of the checkpoint in dir, whole:
// from OptimizerFile, or else merged from every shard file. sizes gives
// each trained tensor's element count; shard files must cover every
// element of the tensors they name exactly once and agree on the step.
// The second result names what was read, for errors.
func ReadOptimizerState(dir string, sizes map[string]int) (optim.AdamWState, string, error) {
	return ReadOptimizerStateContext(context.Background(), dir, sizes)
}

// ReadOptimizerStateContext is ReadOptimizerState that gives up once ctx
// is done (checked while each file is read and between tensors), with an
// error wrapping ctx's.
func ReadOptimizerStateContext(ctx context.Context, dir string, sizes map[string]int) (optim.AdamWState, string, error) {
	whole := filepath.Join(dir, OptimizerFile)
	if _, err := os.Stat(whole); err == nil {
		st, err := readWholeOptimizer(ctx, whole)
		return st, whole, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return optim.AdamWState{}, dir, err
	}
	var files []string
	n := 0
	for _, e := range ents {
		m := shardFileRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		k, _ := strconv.Atoi(m[2])
		if n != 0 && k != n {
			return optim.AdamWState{}, dir, fmt.Errorf("%s: optimizer shard files of %d and of %d shards", dir, n, k)
		}
		n = k
		files = append(files, e.Name())
	}
	if n == 0 {
		return optim.AdamWState{}, whole, fmt.Errorf("%s: no %s and no optimizer shard files", dir, OptimizerFile)
	}
	sort.Strings(files)
	for r := range n {
		if r >= len(files) || files[r] != ShardOptimizerFile(r, n) {
			return optim.AdamWState{}, dir, fmt.Errorf("%s: optimizer shard %s missing", dir, ShardOptimizerFile(r, n))
		}
	}
	type full struct {
		avg, sq []float32
		seen    []bool
	}
	merged := map[string]*full{}
	step := -1
	for _, fn := range files {
		path := filepath.Join(dir, fn)
		f, err := safetensors.ReadFileContext(ctx, path)
		if err != nil {
			return optim.AdamWState{}, path, err
		}
		s, err := strconv.Atoi(f.Metadata["step"])
		if err != nil {
			return optim.AdamWState{}, path, fmt.Errorf("%s: metadata step %q: %w", path, f.Metadata["step"], err)
		}
		if step >= 0 && s != step {
			return optim.AdamWState{}, path, fmt.Errorf("%s: step %d, %s has %d", path, s, files[0], step)
		}
		step = s
		for _, tn := range f.Names() {
			if err := ctx.Err(); err != nil {
				return optim.AdamWState{}, path, fmt.Errorf("%s: %w", path, err)
			}
			if !strings.HasPrefix(tn, optim.ExpAvgPrefix) {
				if !strings.HasPrefix(tn, optim.ExpAvgSqPrefix) {
					return optim.AdamWState{}, path, fmt.Errorf("%s: unknown tensor %q", path, tn)
				}
				continue
			}
			name := strings.TrimPrefix(tn, optim.ExpAvgPrefix)
			size, ok := sizes[name]
			if !ok {
				return optim.AdamWState{}, path, fmt.Errorf("%s: tensor %q: moments of a param not being trained", path, tn)
			}
			ranges, err := parseRanges(f.Metadata["ranges."+name], size)
			if err != nil {
				return optim.AdamWState{}, path, fmt.Errorf("%s: metadata ranges.%s: %w", path, name, err)
			}
			avg, _, err := f.Float32(tn)
			if err != nil {
				return optim.AdamWState{}, path, fmt.Errorf("%s: %w", path, err)
			}
			sq, _, err := f.Float32(optim.ExpAvgSqPrefix + name)
			if err != nil {
				return optim.AdamWState{}, path, fmt.Errorf("%s: %w", path, err)
			}
			fm := merged[name]
			if fm == nil {
				fm = &full{avg: make([]float32, size), sq: make([]float32, size), seen: make([]bool, size)}
				merged[name] = fm
			}
			at := 0
			for _, r := range ranges {
				if at+r[1]-r[0] > len(avg) || len(sq) != len(avg) {
					return optim.AdamWState{}, path, fmt.Errorf("%s: tensor %q: ranges cover more than its %d moments", path, name, len(avg))
				}
				for i := r[0]; i < r[1]; i++ {
					if fm.seen[i] {
						return optim.AdamWState{}, path, fmt.Errorf("%s: tensor %q: element %d is also in another shard", path, name, i)
					}
					fm.seen[i] = true
				}
				copy(fm.avg[r[0]:r[1]], avg[at:])
				copy(fm.sq[r[0]:r[1]], sq[at:])
				at += r[1] - r[0]
			}
			if at != len(avg) {
				return optim.AdamWState{}, path, fmt.Errorf("%s: tensor %q: ranges cover %d elements, it has %d", path, name, at, len(avg))
			}
		}
	}
	names := make([]string, 0, len(merged))
	for name, fm := range merged {
		for i, ok := range fm.seen {
			if !ok {
				return optim.AdamWState{}, dir, fmt.Errorf("%s: optimizer shards: tensor %q: element %d is in no shard", dir, name, i)
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	st := optim.AdamWState{Step: step}
	for _, name := range names {
		st.Tensors = append(st.Tensors, optim.Tensor{Name: optim.ExpAvgPrefix + name, Data: merged[name].avg},
			optim.Tensor{Name: optim.ExpAvgSqPrefix + name, Data: merged[name].sq})
	}
	return st, dir, nil
}

func readWholeOptimizer(ctx context.Context, path string) (optim.AdamWState, error) {
	f, err := safetensors.ReadFileContext(ctx, path)
	if err != nil {
		return optim.AdamWState{}, err
	}
	optStep, err := strconv.Atoi(f.Metadata["step"])
	if err != nil {
		return optim.AdamWState{}, fmt.Errorf("%s: metadata step %q: %w", path, f.Metadata["step"], err)
	}
	ost := optim.AdamWState{Step: optStep}
	for _, name := range f.Names() {
		if err := ctx.Err(); err != nil {
			return optim.AdamWState{}, fmt.Errorf("%s: %w", path, err)
		}
		v, _, err := f.Float32(name)
		if err != nil {
			return optim.AdamWState{}, fmt.Errorf("%s: %w", path, err)
		}
		ost.Tensors = append(ost.Tensors, optim.Tensor{Name: name, Data: v})
	}
	return ost, nil
}

// parseRanges reads "lo:hi,lo:hi" within [0, size).
func parseRanges(s string, size int) ([][2]int, error) {
	if s == "" {
		return nil, fmt.Errorf("missing")
	}
	var out [][2]int
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(part, ":")
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || lo < 0 || hi < lo || hi > size {
			return nil, fmt.Errorf("range %q not within [0, %d)", part, size)
		}
		out = append(out, [2]int{lo, hi})
	}
	return out, nil
}
