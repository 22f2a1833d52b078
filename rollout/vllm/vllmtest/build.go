package vllmtest

import (
	"bytes"
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
	// ModelFiles is the SHA-256 of each file of Model, by name.
	ModelFiles map[string]string `json:"model_files"`
}

// FakeEvent is a line of fakevllm's events file (FAKEVLLM_RECORD): a
// weight update it finished or a generation it answered (Event).
type FakeEvent struct {
	Op      string `json:"op"`
	Path    string `json:"path"`
	Version string `json:"version"`
	Weights string `json:"weights"`
	// Files is the SHA-256 of each file of Path when it was loaded;
	// Siblings how many entries Path's parent folder held then.
	Files    map[string]string `json:"files"`
	Siblings int               `json:"siblings"`
}

// FakeEvents reads the events of the fakevllm server that listened on
// port, started with FAKEVLLM_RECORD=dir, in order.
func FakeEvents(t testing.TB, dir, port string) []FakeEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, port+".events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []FakeEvent
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e FakeEvent
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("%s line %d: %v", filepath.Join(dir, port+".events.jsonl"), i+1, err)
		}
		out = append(out, e)
	}
	return out
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
