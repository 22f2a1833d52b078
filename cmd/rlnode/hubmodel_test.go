package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hubCache lays out a Hugging Face hub cache by hand, as huggingface_hub
// writes it: models--ORG--NAME/refs/main names the snapshot folder that
// holds the checkpoint (here one `rlnode model init` writes).
func hubCache(t *testing.T, home, id string) (cache, snapshot string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":128,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cache = filepath.Join(t.TempDir(), "hf", "hub")
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
	snapshot = filepath.Join(repo, "snapshots", "0123abcd")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", snapshot); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644); err != nil {
		t.Fatal(err)
	}
	return cache, snapshot
}

// A hub id names a model in the local cache (HF_HOME) in a recipe and in
// --model; an absent one says where it looked and how to fetch it.
func TestModelsByHubID(t *testing.T) {
	home := t.TempDir()
	cache, snapshot := hubCache(t, home, "tiny-org/Tiny-Qwen")
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", filepath.Dir(cache))

	stdout, stderr, code := runRlnode(t, home, "recipe", "show", "quickstart", "--resolved",
		"--set", "models.policy.init=null", "--set", "models.policy.path=tiny-org/Tiny-Qwen")
	if code != 0 || !strings.Contains(stdout, "path: "+snapshot) {
		t.Errorf("recipe with a hub id: exit %d, want the snapshot %s in the resolved recipe:\n%s%s", code, snapshot, stdout, stderr)
	}
	_, stderr, code = runRlnode(t, home, "recipe", "validate", "quickstart",
		"--set", "models.policy.init=null", "--set", "models.policy.path=tiny-org/Absent")
	for _, want := range []string{"models.policy.path: tiny-org/Absent is neither a checkpoint directory nor a hub id in the cache",
		filepath.Join(cache, "models--tiny-org--Absent"), "huggingface-cli download tiny-org/Absent"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("recipe with an absent hub id: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}

	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(`{"sequences":[{"prompt":[1,2,3],"response":[4,5]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.safetensors")
	if stdout, stderr, code := runRlnode(t, home, "model", "forward", "--model", "tiny-org/Tiny-Qwen", "--input", in, "--out", out); code != 0 {
		t.Errorf("model forward --model HUB_ID: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runRlnode(t, home, "model", "forward", "--model", "tiny-org/Absent", "--input", in, "--out", out); code == 0 ||
		!strings.Contains(stderr, "not in the local Hugging Face cache") {
		t.Errorf("model forward with an absent hub id: exit %d:\n%s", code, stderr)
	}
	url, _, _, errb := startServe(t, "--model", "tiny-org/Tiny-Qwen")
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("serve --model HUB_ID: health: %v %v; stderr %s", err, resp, errb)
	} else {
		resp.Body.Close()
	}
	stdout, stderr, code = runRlnode(t, home, "eval", "--model", "tiny-org/Tiny-Qwen", "--recipe", "quickstart", "--set", "eval.held_out=4")
	if code != 0 || !strings.Contains(stderr, "accuracy") {
		t.Errorf("eval --model HUB_ID: exit %d\n%s%s", code, stdout, stderr)
	}
}
