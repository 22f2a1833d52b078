package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rlnode/rlnode/learner/cpu"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/learner/tokenizer"
)

func init() { commands["model"] = modelCommand }

const modelUsage = `usage:
  rlnode model init --config CONFIG.json --out DIR [--seed N]
      write a randomly initialized checkpoint: DIR/config.json,
      DIR/model.safetensors (dtype as torch_dtype: bfloat16 or float32) and
      DIR/tokenizer.json (the built-in byte-level BPE tokenizer, trained to
      vocab_size tokens when that is below its 768; vocab_size >= 278)
  rlnode model forward --model DIR --input IN.json --out OUT.safetensors [--grad]
      IN.json is {"sequences": [{"prompt": [ids], "response": [ids]}, ...]};
      OUT gets float32 logprobs.<i> per sequence (log p of each response
      token given everything before it) and, with --grad, grad.<tensor> for
      every parameter: the gradient of the sum of all response log probs
`

func modelCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, modelUsage)
		return 0
	}
	var err error
	switch args[0] {
	case "init":
		err = modelInit(args[1:], stdout, stderr)
	case "forward":
		err = modelForward(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "rlnode model: unknown subcommand %q\n\n%s", args[0], modelUsage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rlnode model %s: %v\n\n%s", args[0], err, modelUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode model %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			return usageError{fmt.Errorf("--%s is required", name)}
		}
	}
	return nil
}

func modelInit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlnode model init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "Hugging Face config.json to build the model from")
	out := fs.String("out", "", "checkpoint directory to write")
	seed := fs.Uint64("seed", 0, "random seed of the initialization")
	if err := parseFlags(fs, args, "config", "out"); err != nil {
		return err
	}
	cfg, err := model.ReadConfig(*configPath)
	if err != nil {
		return err
	}
	// The built-in tokenizer, cut to the model's vocabulary when smaller,
	// so every id it produces has an embedding.
	tok, err := tokenizer.BuiltinSized(cfg.VocabSize)
	if err != nil {
		return fmt.Errorf("config %s: field vocab_size: %d is too small for the built-in tokenizer (at least %d: 256 byte tokens and Qwen's 22 added tokens)", *configPath, cfg.VocabSize, tokenizer.BuiltinMinVocabSize)
	}
	m, err := model.New(*cfg, cpu.New())
	if err != nil {
		return err
	}
	m.InitRandom(*seed)
	dtype := safetensors.F32
	if cfg.TorchDType == "bfloat16" {
		dtype = safetensors.BF16
	}
	if err := m.Save(*out, dtype); err != nil {
		return err
	}
	if err := tok.Save(filepath.Join(*out, "tokenizer.json")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %d parameters, seed %d\n", *out, cfg.Architecture, m.NumParams(), *seed)
	return nil
}

// forwardInput is IN.json of rlnode model forward. Token ids stay raw JSON
// until checked, so an error can name the sequence and position of a value
// that is not an id.
type forwardInput struct {
	Sequences []struct {
		Prompt   []json.RawMessage `json:"prompt"`
		Response []json.RawMessage `json:"response"`
	} `json:"sequences"`
}

// readForwardInput reads IN.json and checks every sequence against the
// model's config: ids in [0, vocab_size), at least one prompt token, and no
// more tokens than max_position_embeddings.
func readForwardInput(path string, cfg *model.Config, cfgPath string) ([]model.Sequence, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var in forwardInput
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

func modelForward(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlnode model forward", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("model", "", "checkpoint directory (config.json, model.safetensors)")
	inPath := fs.String("input", "", "IN.json with the sequences to score")
	outPath := fs.String("out", "", "OUT.safetensors to write")
	grad := fs.Bool("grad", false, "also write the gradient of the sum of all response log probs")
	if err := parseFlags(fs, args, "model", "input", "out"); err != nil {
		return err
	}
	// The input is checked against the config before the weights load.
	cfgPath := filepath.Join(*dir, "config.json")
	cfg, err := model.ReadConfig(cfgPath)
	if err != nil {
		return err
	}
	seqs, err := readForwardInput(*inPath, cfg, cfgPath)
	if err != nil {
		return err
	}
	m, err := model.Load(*dir, cpu.New())
	if err != nil {
		return err
	}
	bt, err := model.NewBatch(seqs, 0, false, m.Config.VocabSize)
	if err != nil {
		return fmt.Errorf("input %s: %w", *inPath, err)
	}
	logp, _, err := m.Forward(bt)
	if err != nil {
		return err
	}
	var ts []safetensors.Tensor
	for i, v := range bt.Split(logp) {
		t, err := safetensors.FromFloat32("logprobs."+strconv.Itoa(i), safetensors.F32, []int{len(v)}, v)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	if *grad {
		m.ZeroGrad()
		ones := make([]float32, len(logp))
		for i := range ones {
			ones[i] = 1
		}
		if err := m.Backward(ones, nil); err != nil {
			return err
		}
		grads := m.Grads()
		for _, p := range m.Params() {
			t, err := safetensors.FromFloat32("grad."+p.Name, safetensors.F32, p.Shape, grads[p.Name])
			if err != nil {
				return err
			}
			ts = append(ts, t)
		}
	}
	if err := safetensors.WriteFile(*outPath, ts, nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d sequences, %d response tokens\n", *outPath, len(seqs), len(logp))
	return nil
}
