package rollout_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/logbuf"
	"github.com/rlnode/rlnode/internal/nodetest"
	"github.com/rlnode/rlnode/internal/slowfile"
	"github.com/rlnode/rlnode/learner/cuda"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/episode/episodetest"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/verify"
)

// gate holds generation of the "gated" engine until released, so the
// queue-depth test sees jobs waiting.
var gate = struct {
	sync.Mutex
	ch chan struct{}
}{ch: make(chan struct{})}

type gatedEngine struct{ *episodetest.ScriptedEngine }

func (g gatedEngine) Generate(ctx context.Context, reqs []engine.Request) ([]engine.Result, error) {
	gate.Lock()
	ch := gate.ch
	gate.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.ScriptedEngine.Generate(ctx, reqs)
}

func answerOf(prompt string) string {
	if strings.Contains(prompt, "2+3") {
		return "5"
	}
	return "42"
}

// script: a solver wrong at first and right after feedback; a teacher.
func script(r engine.Request, _ int) string {
	if len(r.Messages) == 0 {
		return "tokens"
	}
	p := r.Messages[len(r.Messages)-1].Content
	switch {
	case strings.Contains(p, "You are a teacher"):
		return "Recheck the arithmetic."
	case strings.Contains(p, "Feedback on it:"):
		return "Fixed: \\boxed{" + answerOf(p) + "}"
	}
	return "I think \\boxed{1}"
}

// tinyConfig is nativetest's small Qwen2 with room for MLMT's three-turn
// prompts.
func tinyConfig() model.Config {
	c := nativetest.Config()
	c.MaxPositions = 512
	return c
}

// tinyModel is a tinyConfig model with random weights.
func tinyModel() (*model.Model, error) { return nativetest.NewModel(tinyConfig(), 7) }

func init() {
	rollout.RegisterEngine("scripted", func(_ context.Context, cfg rollout.ActorConfig, model string) (engine.Engine, error) {
		e := episodetest.NewScriptedEngine(script)
		if model == "teacher" {
			e.Version.Store(7)
		} else {
			e.Version.Store(3)
		}
		return e, nil
	})
	rollout.RegisterEngine("gated", func(context.Context, rollout.ActorConfig, string) (engine.Engine, error) {
		return gatedEngine{episodetest.NewScriptedEngine(script)}, nil
	})
	rollout.RegisterEngine("native-tiny", func(context.Context, rollout.ActorConfig, string) (engine.Engine, error) {
		m, err := tinyModel()
		if err != nil {
			return nil, err
		}
		return native.New(m, tokenizer.Builtin(), native.Config{MaxBatch: 8, WeightVersion: 11})
	})
	rollout.RegisterVerifier("exact", func() (verify.Verifier, error) { return episodetest.ExactVerifier{}, nil })
}

var problems = []data.Example{
	{ID: "add", Prompt: "What is 2+3?", Ref: verify.Reference{Answer: "5"}},
	{ID: "mul", Prompt: "What is 7*6?", Ref: verify.Reference{Answer: "42"}},
}

func startNode(t *testing.T) *cluster.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cluster.Start(ctx, cluster.Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func spawn(t *testing.T, n *cluster.Node, cfg rollout.ActorConfig, node string) *cluster.Handle {
	t.Helper()
	h, err := n.Spawn(testCtx(t), rollout.ActorKind, cluster.SpawnOptions{Args: cfg, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func stats(t *testing.T, h *cluster.Handle) rollout.ActorStats {
	t.Helper()
	s, err := cluster.Call[rollout.ActorStats](testCtx(t), h, rollout.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var mlmtRequest = rollout.EpisodeRequest{Kind: rollout.EpisodeMLMT, Examples: problems, N: 2, FirstGroupID: 40,
	Params: engine.SamplingParams{MaxTokens: 64}, FeedbackParams: engine.SamplingParams{MaxTokens: 32}, FeedbackImprovement: true}

func checkMLMT(t *testing.T, turns []data.Turn) {
	t.Helper()
	if len(turns) != 12 {
		t.Fatalf("%d turns, want 12", len(turns))
	}
	for i, tr := range turns {
		pol, ver := "solver", int64(3)
		if i%3 == 1 {
			pol, ver = "feedback", 7
		}
		if tr.PolicyID != pol || tr.WeightVersion != ver || tr.FinalReward != 1 || tr.GroupID != int64(40+i/6) {
			t.Errorf("turn %d: policy %s version %d final %v group %d", i, tr.PolicyID, tr.WeightVersion, tr.FinalReward, tr.GroupID)
		}
		if i%3 == 1 && tr.Reward != tr.FinalReward-turns[i-1].Reward {
			t.Errorf("turn %d: the feedback's reward %v is not its improvement %v − %v", i, tr.Reward, tr.FinalReward, turns[i-1].Reward)
		}
	}
}

func TestActorEmbedded(t *testing.T) {
	n := startNode(t)
	for _, threshold := range []int{0, 1} { // inline reply; explicit bulk offer
		t.Run(fmt.Sprintf("bulk-threshold-%d", threshold), func(t *testing.T) {
			h := spawn(t, n, rollout.ActorConfig{Engine: "scripted", FeedbackEngine: "scripted", FeedbackModel: "teacher",
				Verifier: "exact", BulkThreshold: threshold}, "")
			ctx := testCtx(t)
			turns, res, err := rollout.RunEpisodes(ctx, h, n.System(), mlmtRequest)
			if err != nil {
				t.Fatal(err)
			}
			checkMLMT(t, turns)
			if (res.Bulk != nil) != (threshold == 1) || res.MeanReward != 1 || res.Turns != 12 || res.WeightVersion != 3 {
				t.Errorf("result: bulk %v mean %v turns %d version %d", res.Bulk, res.MeanReward, res.Turns, res.WeightVersion)
			}
			results, version, err := rollout.Generate(ctx, h, n.System(), []engine.Request{{ID: "r1", Prompt: []int{1, 2, 3}, Params: engine.SamplingParams{N: 2, MaxTokens: 8}}})
			if err != nil || len(results) != 1 || len(results[0].Samples) != 2 || version != 3 {
				t.Fatalf("generate: %+v %d %v", results, version, err)
			}
			st := stats(t, h)
			if st.Completed != 2 || st.Episodes != 4 || st.WeightVersion != 3 || st.QueueDepth != 0 || st.Running != 0 || st.GeneratedTokens == 0 || st.TokensPerSecond <= 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestActorBadRequests(t *testing.T) {
	n := startNode(t)
	ctx := testCtx(t)
	if _, err := n.Spawn(ctx, rollout.ActorKind, cluster.SpawnOptions{Args: rollout.ActorConfig{Engine: "nope"}}); err == nil || !strings.Contains(err.Error(), `unknown engine "nope"`) {
		t.Errorf("unknown engine: %v", err)
	}
	if _, err := n.Spawn(ctx, rollout.ActorKind, cluster.SpawnOptions{Args: rollout.ActorConfig{Engine: "scripted", Verifier: "nope"}}); err == nil || !strings.Contains(err.Error(), `unknown verifier "nope"`) {
		t.Errorf("unknown verifier: %v", err)
	}
	if cuda.Available().Err() != nil {
		_, err := n.Spawn(ctx, rollout.ActorKind, cluster.SpawnOptions{Args: rollout.ActorConfig{Engine: "native", ModelFiles: modelFiles(t), WeightSync: true, Device: "cuda"}})
		if err == nil || !strings.Contains(err.Error(), "cuda: the CUDA backend cannot run here") {
			t.Errorf("a native engine on cuda without the CUDA backend: %v", err)
		}
	}
	h := spawn(t, n, rollout.ActorConfig{Engine: "scripted", Verifier: "exact"}, "")
	for _, c := range []struct {
		req  rollout.EpisodeRequest
		want string
	}{
		{rollout.EpisodeRequest{Kind: "chess", Examples: problems, N: 1, Params: engine.SamplingParams{MaxTokens: 8}}, `unknown episode kind "chess"`},
		{rollout.EpisodeRequest{Kind: rollout.EpisodeMLMT, Examples: problems, N: 1, Params: engine.SamplingParams{MaxTokens: 8}}, "hosts no feedback engine"},
		{rollout.EpisodeRequest{Kind: rollout.EpisodeSingle, Examples: problems, N: 1}, "MaxTokens 0"},
		{rollout.EpisodeRequest{Kind: rollout.EpisodeSingle, Examples: problems, N: 1, Params: engine.SamplingParams{MaxTokens: 8}, Templates: episodeTemplates("{{.Nope}}")}, `template "solver"`},
		{rollout.EpisodeRequest{Kind: rollout.EpisodeTools, Examples: problems, N: 1, Params: engine.SamplingParams{MaxTokens: 8}}, "does not expose its tokenizer"},
	} {
		if _, _, err := rollout.RunEpisodes(ctx, h, n.System(), c.req); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.req.Kind, err, c.want)
		}
	}
	if _, err := h.Call(ctx, rollout.Collect{Job: "job-999"}); err == nil || !strings.Contains(err.Error(), `no job "job-999"`) {
		t.Errorf("collect unknown job: %v", err)
	}
	if _, err := h.Call(ctx, rollout.Submit{}); err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Errorf("empty submit: %v", err)
	}
	if st := stats(t, h); st.Failed != 5 || st.Completed != 0 {
		t.Errorf("stats after failures: %+v", st)
	}
}

func TestActorQueueDepth(t *testing.T) {
	// A gate of its own: the one a previous run (-count=2) released stays
	// open, and the jobs never waited.
	gate.Lock()
	gate.ch = make(chan struct{})
	gate.Unlock()
	n := startNode(t)
	h := spawn(t, n, rollout.ActorConfig{Engine: "gated", Verifier: "exact", Concurrency: 1, MaxQueue: 3}, "")
	ctx := testCtx(t)
	req := rollout.EpisodeRequest{Kind: rollout.EpisodeSingle, Examples: problems, N: 1, Params: engine.SamplingParams{MaxTokens: 8}}
	var tickets []rollout.Ticket
	for range 3 {
		tk, err := cluster.Call[rollout.Ticket](ctx, h, rollout.Submit{Episode: &req})
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	// Wait (bounded by ctx) until one job holds the only slot.
	for st := stats(t, h); st.Running != 1 || st.QueueDepth != 2; st = stats(t, h) {
		select {
		case <-ctx.Done():
			t.Fatalf("stats never showed 1 running, 2 waiting: %+v", st)
		case <-time.After(5 * time.Millisecond):
		}
	}
	tk, err := cluster.Call[rollout.Ticket](ctx, h, rollout.Submit{Episode: &req})
	if err != nil {
		t.Fatalf("fourth job, third waiting: %v", err)
	}
	tickets = append(tickets, tk)
	if _, err := h.Call(ctx, rollout.Submit{Episode: &req}); err == nil || !strings.Contains(err.Error(), "queue full (3 jobs waiting)") {
		t.Errorf("fifth job: %v", err)
	}
	gate.Lock()
	close(gate.ch)
	gate.Unlock()
	for _, tk := range tickets {
		for {
			r, err := cluster.Call[rollout.JobResult](ctx, h, rollout.Collect{Job: tk.Job})
			if err != nil {
				t.Fatal(err)
			}
			if r.Done {
				if r.Error != "" || r.Turns != 2 {
					t.Errorf("job %s: %+v", tk.Job, r)
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if st := stats(t, h); st.Completed != 4 || st.QueueDepth != 0 {
		t.Errorf("stats after release: %+v", st)
	}
}

func episodeTemplates(solver string) episode.Templates { return episode.Templates{Solver: solver} }

// TestActorNativeEngine runs episodes on the native engine with a small
// random model: rewards are whatever the model earns; the trajectories must
// be exact: prompt ids are the chat template's, logprobs are finite and
// non-positive, the loss mask covers exactly the sampled tokens.
func TestActorNativeEngine(t *testing.T) {
	n := startNode(t)
	h := spawn(t, n, rollout.ActorConfig{Engine: "native-tiny", Verifier: "math"}, "")
	ctx := testCtx(t)
	seed := int64(5)
	for _, kind := range []string{rollout.EpisodeSingle, rollout.EpisodeMLMT, rollout.EpisodeTools} {
		req := rollout.EpisodeRequest{Kind: kind, Examples: problems, N: 2, StaticFeedback: true, MaxToolCalls: 1,
			Params: engine.SamplingParams{MaxTokens: 12, Temperature: 1, Seed: &seed}}
		turns, res, err := rollout.RunEpisodes(ctx, h, n.System(), req)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := map[string]int{rollout.EpisodeSingle: 4, rollout.EpisodeMLMT: 8, rollout.EpisodeTools: 4}[kind]
		if len(turns) != want || res.WeightVersion != 11 {
			t.Fatalf("%s: %d turns (want %d), version %d", kind, len(turns), want, res.WeightVersion)
		}
		tok := tokenizer.Builtin()
		for i, tr := range turns {
			if tr.WeightVersion != 11 || tr.PolicyID != "solver" || len(tr.ResponseIDs) == 0 {
				t.Errorf("%s turn %d: version %d policy %s %d tokens", kind, i, tr.WeightVersion, tr.PolicyID, len(tr.ResponseIDs))
			}
			for k, lp := range tr.LogProbs {
				sampled := tr.LossMask[k] == 1
				masked := tr.LossMask[k] == 0 && lp == 0 && kind == rollout.EpisodeTools
				if math.IsNaN(float64(lp)) || lp > 0 || !(sampled || masked) {
					t.Errorf("%s turn %d token %d: logprob %v mask %v", kind, i, k, lp, tr.LossMask[k])
				}
			}
			if tr.Turn == 0 {
				ex := problems[tr.GroupID]
				prompt := tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: firstPrompt(kind, ex.Prompt)}}, true)
				if !slices.Equal(toInt(tr.PromptIDs), prompt) {
					t.Errorf("%s turn %d: prompt ids are not the chat template's", kind, i)
				}
			}
		}
	}
	if st := stats(t, h); st.WeightVersion != 11 || st.Completed != 3 || st.Episodes != 12 {
		t.Errorf("stats %+v", st)
	}
}

func firstPrompt(kind, problem string) string {
	d := episode.DefaultTemplates()
	if kind == rollout.EpisodeTools {
		return strings.ReplaceAll(d.ToolSolver, "{{.Problem}}", problem)
	}
	return strings.ReplaceAll(d.Solver, "{{.Problem}}", problem)
}

func toInt(x []int32) []int {
	out := make([]int, len(x))
	for i, v := range x {
		out[i] = int(v)
	}
	return out
}

// The two-process test: a child process (this test binary) joins the
// cluster as a second node; the rollout actor is placed on it and its
// trajectories come back over the bulk path between the processes.

func TestMain(m *testing.M) { nodetest.Main(m) }

// keyedNode starts an in-process node with 2 CPUs and a fresh cluster
// key, for node processes to join (nodetest.Start); it stops with the
// test.
func keyedNode(ctx context.Context, t *testing.T, id string) (*cluster.Node, []byte) {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Start(ctx, cluster.Config{NodeID: id, Bind: "127.0.0.1:0", Key: key, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n, key
}

func TestActorAcrossProcesses(t *testing.T) {
	ctx := testCtx(t)
	n, key := keyedNode(ctx, t, "parent")
	nodetest.Start(t, n, nodetest.Options{ID: "child", CPUs: 2, Key: key})
	for _, threshold := range []int{0, 1} {
		h := spawn(t, n, rollout.ActorConfig{Engine: "scripted", FeedbackEngine: "scripted", FeedbackModel: "teacher",
			Verifier: "exact", BulkThreshold: threshold}, "child")
		if rec, _ := h.Record(); rec.Node != "child" {
			t.Fatalf("actor placed on %q, want the child node", rec.Node)
		}
		turns, res, err := rollout.RunEpisodes(ctx, h, n.System(), mlmtRequest)
		if err != nil {
			t.Fatal(err)
		}
		checkMLMT(t, turns)
		if (res.Bulk != nil) != (threshold == 1) {
			t.Errorf("threshold %d: bulk %v", threshold, res.Bulk)
		}
		if st := stats(t, h); st.Completed != 1 || st.Episodes != 4 {
			t.Errorf("stats %+v", st)
		}
	}
}

// TestActorStopWhileTheEngineLoads: a node that stops while a rollout
// actor's engine loads its checkpoint (here from a pipe that never ends,
// as from a very slow disk) ends the load: the spawn fails naming the
// engine and the stop, and the engine's memory goes back. The engine
// factories took no context: the load read on to the end of the file
// (minutes for a 7B), deaf to the node's stop.
func TestActorStopWhileTheEngineLoads(t *testing.T) {
	m, err := tinyModel()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"native", rollout.PushedNative} {
		t.Run(name, func(t *testing.T) {
			dir := nativetest.Save(t, m)
			if err := os.WriteFile(filepath.Join(dir, rollout.EngineConfigFile), []byte(`{"max_batch": 4}`), 0o644); err != nil {
				t.Fatal(err)
			}
			half := slowfile.Replace(t, filepath.Join(dir, "model.safetensors"))
			s, err := actor.Start(actor.Config{Logger: actor.DiscardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			err = slowfile.StopMidway(t, half, func() error {
				_, err := s.SpawnLocal(actor.LocalSpawn{Name: "loading", Kind: rollout.ActorKind, Args: rollout.ActorConfig{Engine: name, Model: dir}})
				return err
			}, s.Stop)
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), fmt.Sprintf("engine %q", name)) {
				t.Errorf("spawn while the node stopped: %v; want context.Canceled naming the engine", err)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestActorSaysItsCodeSandbox: a rollout actor with the code verifier and
// the python tool says in its node's log which sandbox runs their code.
func TestActorSaysItsCodeSandbox(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("the code sandbox needs /usr/bin/python3: %v", err)
	}
	var logged logbuf.Buffer
	s, err := actor.Start(actor.Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := s.SpawnLocal(actor.LocalSpawn{Name: "coder", Kind: rollout.ActorKind, Args: rollout.ActorConfig{Engine: "scripted", Verifier: "code", PythonTool: true}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("log:\n%s", logged.String())
	for _, use := range []string{"code verifier", "python tool"} {
		if !strings.Contains(logged.String(), `msg="code sandbox" actor=coder for="`+use+`" mode=`) {
			t.Errorf("the node's log does not say which sandbox the actor's %s uses", use)
		}
	}
}
