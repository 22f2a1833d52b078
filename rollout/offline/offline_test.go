package offline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/env"
)

func collect(t *testing.T, policy, task string, n int) []Episode {
	t.Helper()
	mkEnv, err := env.Open(env.Spec{Name: "equations"})
	if err != nil {
		t.Fatal(err)
	}
	mkPol, err := env.NewPolicy(policy, "equations", 7)
	if err != nil {
		t.Fatal(err)
	}
	eps, err := Collect(context.Background(), CollectConfig{Env: "equations", NewEnv: mkEnv, Policy: policy, NewPolicy: mkPol, Task: task, Episodes: n, Seed: 100})
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

func TestCollectScripted(t *testing.T) {
	for _, task := range []string{env.TaskTrain, env.TaskHeldOut, "-2x - 4 = 6"} {
		eps := collect(t, env.PolicyScripted, task, 20)
		for i, ep := range eps {
			if err := ep.Check(); err != nil {
				t.Fatal(err)
			}
			if ep.Total != 8.5 || ep.Outcome != env.OutcomeSolved || len(ep.Steps) != 4 || ep.Seed != 100+int64(i) || len(ep.Messages) != 9 {
				t.Fatalf("%s episode %d: %+v", task, i, ep)
			}
			if !strings.HasPrefix(ep.Messages[0].Content, "Solve for x: ") || !strings.Contains(ep.Messages[0].Content, "Valid actions:") ||
				ep.Messages[1].Content != "<action>identify_operation</action>" || !strings.HasPrefix(ep.Steps[3].Action, "state_answer(") {
				t.Fatalf("%s episode %d: messages %q", task, i, ep.Messages[:2])
			}
		}
	}
}

func TestCollectRandom(t *testing.T) {
	eps := collect(t, env.PolicyRandom, env.TaskTrain, 50)
	solved, invalid, steps := 0, 0, 0
	for _, ep := range eps {
		if ep.Outcome == env.OutcomeSolved {
			solved++
		}
		for _, s := range ep.Steps {
			steps++
			if s.Invalid != "" {
				invalid++
			}
		}
	}
	// Random play draws an answer from -10..10 among four actions: it
	// solves some episodes, far from all.
	if solved == 0 || solved > 25 || invalid != 0 || steps < 50 {
		t.Fatalf("random: %d of 50 solved, %d invalid of %d steps", solved, invalid, steps)
	}
	again := collect(t, env.PolicyRandom, env.TaskTrain, 50)
	var a, b bytes.Buffer
	WriteJSONL(&a, eps)
	WriteJSONL(&b, again)
	if a.String() != b.String() {
		t.Fatal("the same seed collected different episodes")
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	eps := append(collect(t, env.PolicyScripted, env.TaskTrain, 3), collect(t, env.PolicyRandom, env.TaskTrain, 3)...)
	path := filepath.Join(t.TempDir(), "eps.jsonl")
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, eps); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, append(buf.Bytes(), '\n'), 0o644)
	back, err := ReadJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	WriteJSONL(&again, back)
	if len(back) != 6 || again.String() != buf.String() {
		t.Fatalf("read back %d episodes, differently", len(back))
	}
}

func TestReadJSONLBad(t *testing.T) {
	good := `{"env":"e","task":"t","seed":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}],"steps":[{"action":"go","reward":1}],"total":1}`
	tests := []struct{ text, want string }{
		{good + "\nnot json", "x.jsonl:2: not an episode"},
		{`{"env":"e","messages":[],"steps":[],"total":0}`, "x.jsonl:1: bad episode: messages: none"},
		{strings.Replace(good, `"total":1`, `"total":2`, 1), "total: 2, but the steps' rewards sum to 1"},
		{strings.Replace(good, `"reward":1`, `"reward":NaN`, 1), "not an episode"},
		{strings.Replace(good, `"steps":[{"action":"go","reward":1}]`, `"steps":[]`, 1), "steps: 0 for 1 assistant messages"},
		{strings.Replace(good, `"role":"user"`, `"role":"tool"`, 1), `messages[0]: role "tool", want user`},
		{strings.Replace(good, `"role":"assistant"`, `"role":"user"`, 1), `messages[1]: role "user", want assistant`},
		{strings.Replace(good, `{"role":"assistant","content":"a"}`, `{"role":"system","content":"a"}`, 1), `messages[1]: role "system"`},
		{strings.Replace(good, `"seed":1`, `"seed":1,"reward":3`, 1), `unknown field "reward"`},
		{`{"env":"` + strings.Repeat("x", MaxLineBytes) + `"}`, "x.jsonl:1: a line over 1048576 bytes"},
		{`{"env":"e","messages":[{"role":"user","content":"q"}],"steps":[],"total":0}`, "no assistant message"},
		// Latin-1 text: the decoder put U+FFFD in place of the byte.
		{strings.Replace(good, `"content":"q"`, "\"content\":\"caf\xe9\"", 1), "x.jsonl:1: not UTF-8 at byte 73 of the line"},
		// A lost newline: the second episode was dropped without a word.
		{good + "\n" + good + good, "x.jsonl:2: text after the episode's JSON object"},
	}
	for _, tc := range tests {
		_, err := DecodeJSONL("x.jsonl", strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.80s: %v; want %q", tc.text, err, tc.want)
		}
	}
	eps, err := DecodeJSONL("x.jsonl", strings.NewReader("\n"+good+"\n\n"+strings.Replace(good, `"content":"q"}`, `"content":"q"},{"role":"assistant","content":"b"},{"role":"user","content":"end"}`, 1)))
	if err == nil || !errors.Is(err, ErrBadEpisode) {
		t.Fatalf("two assistant messages and one step: %v, %d episodes", err, len(eps))
	}
}

func TestSamples(t *testing.T) {
	tok := tokenizer.Builtin()
	eps := collect(t, env.PolicyScripted, env.TaskTrain, 2)
	s, err := EpisodeSamples("eps.jsonl", eps, tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 8 {
		t.Fatalf("%d samples of 2 four-step episodes", len(s))
	}
	for i, x := range s {
		ep := eps[i/4]
		k := 1 + 2*(i%4)
		if !equal(x.Prompt, tok.EncodeChat(ep.Messages[:k], true)) || tok.Decode(toInts(x.Response)) != ep.Messages[k].Content+tokenizer.IMEnd ||
			len(x.Mask) != len(x.Response) || x.Reward != 8.5 || x.Step != i%4 {
			t.Fatalf("sample %d: %+v", i, x)
		}
	}
	// The limit is named as the model's context (before: "N tokens, more than 40").
	if _, err := EpisodeSamples("eps.jsonl", eps, tok, 40); err == nil || !strings.Contains(err.Error(), "eps.jsonl: episode 1 step 0") ||
		!strings.Contains(err.Error(), "the model's context of 40 tokens") {
		t.Fatalf("over maxLen: %v", err)
	}
	if f := Filter(append(s, Sample{Reward: 1}), 8); len(f) != 8 {
		t.Fatalf("filter kept %d", len(f))
	}

	// A run's Arrow trajectory file.
	dir := t.TempDir()
	turns := []data.Turn{
		{EpisodeID: "e1", PromptIDs: []int32{1, 2}, ResponseIDs: []int32{3, 4}, LogProbs: []float32{0, 0}, LossMask: []float32{1, 0}, FinalReward: 2},
		{EpisodeID: "e2", Turn: 1, PromptIDs: []int32{1}, FinishReason: "error"},
	}
	arrow := filepath.Join(dir, "t.arrow")
	if err := data.WriteTrajectoryFile(arrow, turns); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSamples(arrow, tok, 0)
	if err != nil || len(got) != 1 || got[0].Episode != "e1" || got[0].Reward != 2 || got[0].Mask[1] != 0 {
		t.Fatalf("arrow samples %+v, %v", got, err)
	}
	if _, err := ReadSamples(arrow, tok, 3); err == nil || !strings.Contains(err.Error(), "episode e1 turn 0: 4 tokens, more than the model's context of 3 tokens") {
		t.Fatalf("arrow sample over maxLen: %v", err)
	}
	if _, err := ReadSamples(filepath.Join(dir, "t.csv"), tok, 0); err == nil {
		t.Fatal("a .csv file: no error")
	}
	os.WriteFile(filepath.Join(dir, "bad.arrow"), []byte("not arrow"), 0o644)
	if _, err := ReadSamples(filepath.Join(dir, "bad.arrow"), tok, 0); err == nil || !strings.Contains(err.Error(), "bad.arrow") {
		t.Fatalf("a bad arrow file: %v", err)
	}
}

func equal(a []int32, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int(a[i]) != b[i] {
			return false
		}
	}
	return true
}

func toInts(a []int32) []int {
	out := make([]int, len(a))
	for i, v := range a {
		out[i] = int(v)
	}
	return out
}
