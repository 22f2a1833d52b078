package weightsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/vllm"
	"github.com/rlnode/rlnode/rollout/weights"
)

// VLLM is a vLLM target: the client the rollout side generates with (so
// its pause keeps samples from spanning two versions) and a directory every
// server can read. A LoRA update is written there as a PEFT adapter and
// loaded in place (Client.LoadLoRA); a full update is written as a
// safetensors checkpoint and reloaded (Client.ReloadWeights: vLLM's "disk"
// weight-transfer backend or collective_rpc reload_weights, per
// vllm.Config.WeightUpdate).
type VLLM struct {
	Client *vllm.Client
	// Dir is an absolute directory visible to every server under the same
	// path (a shared file system).
	Dir string
	// LoRAName is the adapter name requests use (default "policy").
	LoRAName string
	// BaseModel is recorded in adapter_config.json.
	BaseModel string
	// Keep is how many versions stay on disk (default 2; older ones are
	// deleted after a successful load).
	Keep int
}

// RegisterVLLM adds a vLLM target under name. Its version is the client's.
func (s *Syncer) RegisterVLLM(name string, v VLLM) (EngineStatus, error) {
	if v.Client == nil {
		return EngineStatus{}, fmt.Errorf("weight sync: register vLLM %s: no client", name)
	}
	if !filepath.IsAbs(v.Dir) {
		return EngineStatus{}, fmt.Errorf("weight sync: register vLLM %s: Dir %q is not absolute", name, v.Dir)
	}
	if err := os.MkdirAll(v.Dir, 0o755); err != nil {
		return EngineStatus{}, fmt.Errorf("weight sync: register vLLM %s: %w", name, err)
	}
	if v.LoRAName == "" {
		v.LoRAName = "policy"
	}
	if v.Keep <= 0 {
		v.Keep = 2
	}
	var urls []string
	for _, st := range v.Client.Servers() {
		urls = append(urls, st.URL)
	}
	t := &target{name: name, node: strings.Join(urls, ","), vllm: &v, version: v.Client.WeightVersion()}
	if err := s.add(t); err != nil {
		return EngineStatus{}, err
	}
	return t.status(), nil
}

// push writes u under Dir and makes every server load it.
func (v *VLLM) push(ctx context.Context, version int64, u weights.Update) (int64, error) {
	var dir string
	var err error
	if u.LoRA != nil {
		dir, err = v.writeAdapter(version, u)
	} else {
		dir, err = v.writeCheckpoint(version, u)
	}
	if err != nil {
		return 0, err
	}
	if u.LoRA != nil {
		err = v.Client.LoadLoRA(ctx, v.LoRAName, dir, version)
	} else {
		err = v.Client.ReloadWeights(ctx, dir, version)
	}
	if err != nil {
		return 0, err
	}
	v.prune(version)
	return version, nil
}

func (v *VLLM) versionDir(kind string, version int64) string {
	return filepath.Join(v.Dir, kind+"-"+strconv.FormatInt(version, 10))
}

func (v *VLLM) writeCheckpoint(version int64, u weights.Update) (string, error) {
	ts, err := u.SafeTensors(true)
	if err != nil {
		return "", fmt.Errorf("vLLM checkpoint for version %d: %w", version, err)
	}
	dir := v.versionDir("weights", version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := safetensors.WriteCheckpoint(dir, ts, 0); err != nil {
		return "", fmt.Errorf("vLLM checkpoint for version %d: %w", version, err)
	}
	return dir, nil
}

func (v *VLLM) writeAdapter(version int64, u weights.Update) (string, error) {
	dir := v.versionDir("lora", version)
	if err := weights.WriteAdapter(dir, u, v.BaseModel); err != nil {
		return "", err
	}
	return dir, nil
}

// prune deletes version directories older than the Keep newest.
func (v *VLLM) prune(current int64) {
	ents, err := os.ReadDir(v.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		_, num, ok := strings.Cut(e.Name(), "-")
		if !ok || !e.IsDir() || !(strings.HasPrefix(e.Name(), "weights-") || strings.HasPrefix(e.Name(), "lora-")) {
			continue
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n <= current-int64(v.Keep) {
			_ = os.RemoveAll(filepath.Join(v.Dir, e.Name()))
		}
	}
}
