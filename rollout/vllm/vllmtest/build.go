package vllmtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildFakeVLLM builds fakevllm, the stand-in for `vllm serve`, into a
// temporary folder of t and returns its path.
func BuildFakeVLLM(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakevllm")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/rlnode/rlnode/rollout/vllm/vllmtest/fakevllm")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fakevllm: %v\n%s", err, out)
	}
	return bin
}

// FakeRecord is what fakevllm writes under FAKEVLLM_RECORD: how it was
// started.
type FakeRecord struct {
	Model   string   `json:"model"`
	Served  string   `json:"served_model_name"`
	Host    string   `json:"host"`
	Port    string   `json:"port"`
	Options []string `json:"options"`
	Devices string   `json:"cuda_visible_devices"`
	DevMode string   `json:"dev_mode"`
	KeySet  bool     `json:"api_key_set"`
	PID     int      `json:"pid"`
}

// FakeRecords reads the records of the fakevllm servers started with
// FAKEVLLM_RECORD=dir, by their files' names (their ports).
func FakeRecords(t testing.TB, dir string) []FakeRecord {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := make([]FakeRecord, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return out
}
