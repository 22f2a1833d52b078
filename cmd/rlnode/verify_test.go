package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestVerifyMathGolden runs `rlnode verify --task math` on
// testdata/verify/math.jsonl and compares its output and its reports of
// bad lines with the golden files.
func TestVerifyMathGolden(t *testing.T) {
	in, err := filepath.Abs("testdata/verify/math.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	_, stderr, code := runRlnode(t, t.TempDir(), "verify", "--task", "math", "--in", in, "--out", out, "--workers", "3")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (the file has bad lines); stderr:\n%s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Reports name the file by the path given; the golden file holds the
	// base name.
	reports := strings.ReplaceAll(stderr, in, "math.jsonl")
	golden := map[string]string{"testdata/verify/math.golden.jsonl": string(got), "testdata/verify/math.golden.stderr": reports}
	for path, text := range golden {
		if *updateGolden {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if text != string(want) {
			t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, text, want)
		}
	}
}

// verifyOut runs rlnode verify on the given lines and returns the output
// objects, stderr and the exit code.
func verifyOut(t *testing.T, task string, lines []string, extra ...string) ([]map[string]any, string, int) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"verify", "--task", task, "--in", in}, extra...)
	stdout, stderr, code := runRlnode(t, dir, args...)
	var objs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		objs = append(objs, o)
	}
	return objs, stderr, code
}

func TestVerifyGSM8K(t *testing.T) {
	huge, _ := json.Marshal(map[string]any{"response": strings.Repeat("7 ", 600_000) + "#### 7", "answer": "7"})
	objs, stderr, code := verifyOut(t, "gsm8k", []string{
		`{"response": "3 + 4 = 7\n#### 7", "answer": "She has 3+4=<<3+4=7>>7.\n#### 7"}`,
		`{"response": "#### 1,000", "answer": 1000}`,
		`{"response": "It is 7.", "answer": "7"}`,
		string(huge),
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []float64{1, 1, 0, 0}
	if len(objs) != len(want) {
		t.Fatalf("%d output lines, want %d: %s", len(objs), len(want), stderr)
	}
	for i, w := range want {
		if objs[i]["reward"] != w {
			t.Errorf("line %d: %v, want reward %v", i+1, objs[i], w)
		}
	}
	if e, _ := objs[3]["error"].(string); !strings.Contains(e, "over the") {
		t.Errorf("megabyte response: error %q", e)
	}
	if !strings.Contains(stderr, "mean reward 0.5000") {
		t.Errorf("summary: %s", stderr)
	}
	// The flexible match takes the last number.
	objs, _, _ = verifyOut(t, "gsm8k", []string{`{"response": "It is 7.", "answer": "7"}`}, "--last-number")
	if len(objs) != 1 || objs[0]["reward"] != 1.0 {
		t.Errorf("--last-number: %v", objs)
	}
}

func TestVerifyCode(t *testing.T) {
	objs, stderr, code := verifyOut(t, "code", []string{
		`{"task_id": 1, "response": "` + "```python\\ndef add(a, b):\\n    return a + b\\n```" + `", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}`,
		`{"task_id": 2, "response": "def add(a, b):\n    return a * b", "tests": ["assert add(2, 2) == 4", "assert add(1, 2) == 3"]}`,
		`{"task_id": 3, "response": "import socket\nsocket.create_connection(('127.0.0.1', 1), timeout=1)", "tests": ["assert True"]}`,
		`{"task_id": 4, "response": "while True:\n    pass", "tests": ["assert True"]}`,
		`{"task_id": 5, "response": "def f():\n    return K", "setup": "K = 5", "tests": ["assert f() == 5"]}`,
		`{"task_id": 6, "response": "x = 1", "tests": "assert x == 1"}`,
	}, "--workers", "2")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (line 6 has a bad tests field): %s", code, stderr)
	}
	want := []float64{1, 0.5, 0, 0, 1, 0}
	if len(objs) != len(want) {
		t.Fatalf("%d output lines, want %d: %s", len(objs), len(want), stderr)
	}
	for i, w := range want {
		if objs[i]["reward"] != w || objs[i]["task_id"] != float64(i+1) {
			t.Errorf("line %d: %v, want reward %v", i+1, objs[i], w)
		}
	}
	for i, sub := range map[int]string{2: "Error", 3: "TestTimeout", 5: `field "tests": want a list of strings`} {
		if e, _ := objs[i]["error"].(string); !strings.Contains(e, sub) {
			t.Errorf("line %d: error %q, want it to contain %q", i+1, e, sub)
		}
	}
	if !strings.Contains(stderr, "sandbox ") || !strings.Contains(stderr, "in.jsonl:6:") {
		t.Errorf("stderr does not name the sandbox and the bad line:\n%s", stderr)
	}
	// Which memory bound applies is said, whichever it is.
	if !strings.Contains(stderr, "rlnode verify: memory bounded per run: a cgroup") &&
		!strings.Contains(stderr, "rlnode verify: memory bounded per process only (") {
		t.Errorf("stderr does not say how a run's memory is bounded:\n%s", stderr)
	}
}

func TestVerifyUsage(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"response": "\\boxed{1}", "answer": "1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"verify", "--in", in}, 2, "--task is required"},
		{[]string{"verify", "--task", "math"}, 2, "--in is required"},
		{[]string{"verify", "--task", "poetry", "--in", in}, 2, `--task "poetry"`},
		{[]string{"verify", "--task", "math", "--in", in, "--workers", "0"}, 2, "--workers 0"},
		{[]string{"verify", "--task", "code", "--in", in, "--workers", "100000000"}, 2, "--workers 100000000: at most"},
		{[]string{"verify", "--task", "math", "--in", filepath.Join(dir, "missing.jsonl")}, 1, "missing.jsonl"},
		{[]string{"verify", "--task", "code", "--in", in, "--sandbox", "chroot"}, 2, `--sandbox "chroot": want auto, bwrap, namespaces or rlimit-only-trusted-code`},
		{[]string{"verify", "--task", "math", "--in", in, "--out", filepath.Join(dir, "no", "such", "dir.jsonl")}, 1, "no such file"},
	}
	for _, tc := range tests {
		_, stderr, code := runRlnode(t, dir, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("rlnode %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
	stdout, _, code := runRlnode(t, dir, "verify", "--task", "math", "--in", in)
	if code != 0 || stdout != `{"response":"\\boxed{1}","answer":"1","reward":1}`+"\n" {
		t.Errorf("stdout %q, exit %d", stdout, code)
	}
}
