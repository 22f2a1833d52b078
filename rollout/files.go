package rollout

// Engines that start from a model's small files (ActorConfig.ModelFiles)
// and get their weights pushed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
)

// NoWeights is the version an engine built from ModelFiles serves until
// its first push: older than any the driver publishes (run steps ≥ 0).
const NoWeights = -1

// ErrNoWeights: the engine has had no weights pushed yet.
var ErrNoWeights = errors.New("no weights pushed yet")

// PushedEngine is a native engine built from a model's config and
// tokenizer alone, whose weights all come by push (SetWeights). Until a
// push has set every parameter it serves NoWeights and refuses to
// generate, so zeros are never sampled from.
type PushedEngine struct {
	*native.Engine
	params []string // every parameter the first push must set
	ready  atomic.Bool
}

// NewNativeFromFiles builds a PushedEngine from files["config.json"] and
// files["tokenizer.json"] (the bytes of a model directory's files) on the
// cpu backend; cfg.WeightVersion is ignored (NoWeights).
func NewNativeFromFiles(files map[string][]byte, cfg native.Config) (*PushedEngine, error) {
	cj, ok := files["config.json"]
	if !ok {
		return nil, fmt.Errorf("native engine from model files: no config.json (have %v)", names(files))
	}
	tj, ok := files["tokenizer.json"]
	if !ok {
		return nil, fmt.Errorf("native engine from model files: no tokenizer.json (have %v)", names(files))
	}
	mc, err := model.ParseConfig("model files: config.json", cj)
	if err != nil {
		return nil, fmt.Errorf("native engine: %w", err)
	}
	tok, err := tokenizer.Parse("model files: tokenizer.json", tj)
	if err != nil {
		return nil, fmt.Errorf("native engine: %w", err)
	}
	cfg.WeightVersion = NoWeights
	e, err := native.NewOn(*mc, tok, cfg)
	if err != nil {
		return nil, err
	}
	return &PushedEngine{Engine: e, params: e.ParamNames()}, nil
}

// SetWeights implements weights.HostedEngine: the first call must set
// every parameter (a full update); later ones any subset.
func (e *PushedEngine) SetWeights(ctx context.Context, version int64, weights map[string][]float32) error {
	if !e.ready.Load() {
		var missing []string
		for _, n := range e.params {
			if _, ok := weights[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("native engine: set weights version %d: the first weights of an engine started without any must set every parameter; %d missing (first %q)",
				version, len(missing), missing[0])
		}
	}
	if err := e.Engine.SetWeights(ctx, version, weights); err != nil {
		return err
	}
	e.ready.Store(true)
	return nil
}

// Generate implements engine.Engine; it fails with ErrNoWeights before the
// first push.
func (e *PushedEngine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	if !e.ready.Load() {
		return nil, fmt.Errorf("native engine: %w (the weight-sync actor catches an engine up when it registers)", ErrNoWeights)
	}
	return e.Engine.Generate(ctx, reqs)
}

// Stream is native.Engine.Stream; it fails with ErrNoWeights before the
// first push.
func (e *PushedEngine) Stream(ctx context.Context, req engine.Request, opts native.StreamOptions) (*native.Stream, error) {
	if !e.ready.Load() {
		return nil, fmt.Errorf("native engine: %w", ErrNoWeights)
	}
	return e.Engine.Stream(ctx, req, opts)
}

// PushedNative is the engine a weight syncer's rollout actors host: the
// native engine built from the model files the actor was spawned with
// (ActorConfig.ModelFiles: config.json, tokenizer.json and
// EngineConfigFile, the decode batch), whose weights the syncer pushes
// when the actor registers — or, given a directory, loading that. Every
// node registers it (this package's init).
const PushedNative = "driver-native"

// EngineConfigFile holds the native engine settings of a rollout model:
// {"max_batch": N, "device": "cuda"} (device absent: the cpu).
const EngineConfigFile = "engine.json"

type engineFile struct {
	MaxBatch int    `json:"max_batch"`
	Device   string `json:"device,omitempty"`
}

// PushedNativeFiles are the ModelFiles of a PushedNative engine: the
// model's config.json and tokenizer.json bytes, its decode batch and
// device (native.Config.Device; "" is the cpu).
func PushedNativeFiles(config, tokenizer []byte, maxBatch int, device string) (map[string][]byte, error) {
	ej, err := json.Marshal(engineFile{MaxBatch: maxBatch, Device: device})
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"config.json": config, "tokenizer.json": tokenizer, EngineConfigFile: ej}, nil
}

func newPushedNative(ctx context.Context, cfg ActorConfig, dir string) (engine.Engine, error) {
	var js []byte
	path := EngineConfigFile + " of the model files"
	switch {
	case dir != "":
		path = filepath.Join(dir, EngineConfigFile)
		var err error
		if js, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("%s engine: %w", PushedNative, err)
		}
	case cfg.ModelFiles != nil:
		var ok bool
		if js, ok = cfg.ModelFiles[EngineConfigFile]; !ok {
			return nil, fmt.Errorf("%s engine: no %s in the model files", PushedNative, EngineConfigFile)
		}
	default:
		return nil, errors.New(PushedNative + " engine: no model directory or model files")
	}
	var ef engineFile
	if err := json.Unmarshal(js, &ef); err != nil {
		return nil, fmt.Errorf("%s engine: %s: %w", PushedNative, path, err)
	}
	if ef.MaxBatch <= 0 {
		return nil, fmt.Errorf("%s engine: %s: max_batch %d: want > 0", PushedNative, path, ef.MaxBatch)
	}
	ncfg := native.Config{MaxBatch: ef.MaxBatch, MaxStepTokens: 4096, WeightVersion: cfg.WeightVersion, Device: ef.Device}
	if dir == "" {
		return NewNativeFromFiles(cfg.ModelFiles, ncfg)
	}
	// A LoRA learner's model directory is its base plus adapter: served
	// merged, while pushed adapters merge onto the base (CheckpointBase).
	return native.LoadContext(ctx, dir, ncfg)
}
