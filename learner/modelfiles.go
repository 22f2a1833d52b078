package learner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

// InitCheckpoint writes a randomly initialized checkpoint of the model that
// cfg (the Hugging Face config.json at configPath, model.ReadConfig)
// describes to dir: config.json, model.safetensors (dtype as torch_dtype:
// bfloat16 or float32) and the built-in tokenizer, cut to the model's
// vocabulary when that is smaller so that every id it produces has an
// embedding. It returns the number of parameters.
func InitCheckpoint(cfg *model.Config, configPath, dir string, seed uint64) (int, error) {
	tok, err := tokenizer.BuiltinSized(cfg.VocabSize)
	if err != nil {
		return 0, fmt.Errorf("config %s: field vocab_size: %d is too small for the built-in tokenizer (at least %d: 256 byte tokens and Qwen's 22 added tokens)", configPath, cfg.VocabSize, tokenizer.BuiltinMinVocabSize)
	}
	m, err := model.New(*cfg, cpu.New())
	if err != nil {
		return 0, err
	}
	m.InitRandom(seed)
	dtype := safetensors.F32
	if cfg.TorchDType == "bfloat16" {
		dtype = safetensors.BF16
	}
	if err := m.Save(dir, dtype); err != nil {
		return 0, err
	}
	if err := tok.Save(filepath.Join(dir, "tokenizer.json")); err != nil {
		return 0, err
	}
	return m.NumParams(), nil
}

// ScoreSequences runs the checkpoint in dir on the sequences of the JSON
// file inPath ({"sequences": [{"prompt": [ids], "response": [ids]}, ...]})
// and writes to outPath, as float32 safetensors, logprobs.<i> per sequence
// (log p of each response token given everything before it) and, with
// grad, grad.<tensor> for every parameter: the gradient of the sum of all
// response log probs. The input is checked against the config before the
// weights load. device is where the model runs (CheckDevice's values; ""
// is the cpu). It returns the number of sequences and response tokens.
func ScoreSequences(dir, inPath, outPath string, grad bool, device string) (seqs, tokens int, err error) {
	cfgPath := filepath.Join(dir, "config.json")
	cfg, err := model.ReadConfig(cfgPath)
	if err != nil {
		return 0, 0, err
	}
	in, err := readSequences(inPath, cfg, cfgPath)
	if err != nil {
		return 0, 0, err
	}
	b, err := newBackend(device)
	if err != nil {
		return 0, 0, err
	}
	if c, ok := b.(io.Closer); ok {
		defer c.Close()
	}
	m, err := model.Load(dir, b)
	if err != nil {
		return 0, 0, err
	}
	bt, err := model.NewBatch(in, 0, false, m.Config.VocabSize)
	if err != nil {
		return 0, 0, fmt.Errorf("input %s: %w", inPath, err)
	}
	logp, _, err := m.Forward(bt)
	if err != nil {
		return 0, 0, err
	}
	if err := backend.Err(b); err != nil {
		return 0, 0, err
	}
	var ts []safetensors.Tensor
	for i, v := range bt.Split(logp) {
		t, err := safetensors.FromFloat32("logprobs."+strconv.Itoa(i), safetensors.F32, []int{len(v)}, v)
		if err != nil {
			return 0, 0, err
		}
		ts = append(ts, t)
	}
	if grad {
		m.ZeroGrad()
		ones := make([]float32, len(logp))
		for i := range ones {
			ones[i] = 1
		}
		if err := m.Backward(ones, nil); err != nil {
			return 0, 0, err
		}
		grads := m.Grads()
		if err := backend.Err(b); err != nil {
			return 0, 0, err
		}
		for _, p := range m.Params() {
			t, err := safetensors.FromFloat32("grad."+p.Name, safetensors.F32, p.Shape, grads[p.Name])
			if err != nil {
				return 0, 0, err
			}
			ts = append(ts, t)
		}
	}
	if err := safetensors.WriteFile(outPath, ts, nil); err != nil {
		return 0, 0, err
	}
	return len(in), len(logp), nil
}

// sequencesFile is the input of ScoreSequences. Token ids stay raw JSON
// until checked, so an error can name the sequence and position of a value
// that is not an id.
type sequencesFile struct {
	Sequences []struct {
		Prompt   []json.RawMessage `json:"prompt"`
		Response []json.RawMessage `json:"response"`
	} `json:"sequences"`
}

// readSequences reads the file at path and checks every sequence against
// the model's config (read from cfgPath): ids in [0, vocab_size), at least
// one prompt token, and no more tokens than max_position_embeddings.
// maxSequencesBytes caps a model forward input file, read whole.
const maxSequencesBytes = 1 << 30

func readSequences(path string, cfg *model.Config, cfgPath string) ([]model.Sequence, error) {
	b, err := readfile.Regular(path, maxSequencesBytes)
	if err != nil {
		return nil, err
	}
	var in sequencesFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err == io.EOF {
		return nil, fmt.Errorf("input %s: empty file (want {\"sequences\": [...]})", path)
	} else if err != nil {
		return nil, fmt.Errorf("input %s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("input %s: data after the top-level object", path)
	}
	if len(in.Sequences) == 0 {
		return nil, fmt.Errorf("input %s: field sequences: missing or empty", path)
	}
	ids := func(i int, field string, raw []json.RawMessage) ([]int32, error) {
		out := make([]int32, len(raw))
		for j, r := range raw {
			id, err := strconv.ParseInt(string(r), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("input %s: sequences[%d].%s[%d]: %s is not a token id (want an integer)", path, i, field, j, r)
			}
			if id < 0 || id >= int64(cfg.VocabSize) {
				return nil, fmt.Errorf("input %s: sequences[%d].%s[%d]: token id %d out of range [0, %d) (vocab_size of %s)", path, i, field, j, id, cfg.VocabSize, cfgPath)
			}
			out[j] = int32(id)
		}
		return out, nil
	}
	seqs := make([]model.Sequence, len(in.Sequences))
	for i, s := range in.Sequences {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("input %s: sequences[%d].prompt: missing or empty (the first response token needs a token before it)", path, i)
		}
		if n := len(s.Prompt) + len(s.Response); n > cfg.MaxPositions {
			return nil, fmt.Errorf("input %s: sequences[%d]: %d tokens exceed max_position_embeddings %d of %s", path, i, n, cfg.MaxPositions, cfgPath)
		}
		if seqs[i].Prompt, err = ids(i, "prompt", s.Prompt); err != nil {
			return nil, err
		}
		if seqs[i].Response, err = ids(i, "response", s.Response); err != nil {
			return nil, err
		}
	}
	return seqs, nil
}
