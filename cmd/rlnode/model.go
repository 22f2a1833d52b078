package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/outpath"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/recipes"
)

func init() { commands["model"] = modelCommand }

const modelUsage = `usage:
  rlnode model init --config CONFIG.json --out DIR [--seed N]
      write a randomly initialized checkpoint: DIR/config.json,
      DIR/model.safetensors (dtype as torch_dtype: bfloat16 or float32) and
      DIR/tokenizer.json (the built-in byte-level BPE tokenizer, trained to
      vocab_size tokens when that is below its 768; vocab_size >= 278)
  rlnode model forward --model DIR --input IN.json --out OUT.safetensors [--grad] [--device cpu|cuda|cuda-bf16]
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
	// The weights are made in this process's memory (float32) before they
	// are written: a size past it is refused, not a fatal out of memory.
	mc, err := model.ReadConfig(*configPath)
	if err != nil {
		return err
	}
	if need, have := int64(mc.NumParams())*4, actor.HostMemory(); have > 0 && need > have {
		return fmt.Errorf("config %s: a model of %d parameters takes %.1f GiB as float32 to initialise, over this host's %.1f GiB of memory", *configPath, mc.NumParams(), float64(need)/(1<<30), float64(have)/(1<<30))
	}
	if err := outpath.MkdirAll(*out); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	params, err := learner.InitCheckpoint(mc, *configPath, *out, *seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %d parameters, seed %d\n", *out, mc.Architecture, params, *seed)
	return nil
}

func modelForward(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rlnode model forward", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("model", "", "checkpoint directory (config.json, model.safetensors), or a hub id ORG/NAME from the local Hugging Face cache")
	inPath := fs.String("input", "", "IN.json with the sequences to score")
	outPath := fs.String("out", "", "OUT.safetensors to write")
	grad := fs.Bool("grad", false, "also write the gradient of the sum of all response log probs")
	device := fs.String("device", "cpu", "where the model runs: cpu, cuda or cuda-bf16, with an optional device index (cuda:1)")
	if err := parseFlags(fs, args, "model", "input", "out"); err != nil {
		return err
	}
	if err := verifyModel("--model", *dir); err != nil {
		return err
	}
	model, err := recipes.ModelDir(*dir)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	seqs, tokens, err := learner.ScoreSequences(model, *inPath, *outPath, *grad, *device)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d sequences, %d response tokens\n", *outPath, seqs, tokens)
	return nil
}
