package traces_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/traces"
	"github.com/rlnode/rlnode/train"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
)

// TestLearnerBatchFromRecordedTraces records chat calls through the
// recording proxy in front of a native engine (token ids and logprobs
// asked for), imports one more call over OTLP without token ids, gives the
// traces rewards, and checks that the learner's batch holds exactly the
// recorded tokens, and the re-tokenized ones for the imported call.
func TestLearnerBatchFromRecordedTraces(t *testing.T) {
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	e, err := native.Load(dir, native.Config{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	up := serveT(t, native.NewServer(e, "tiny", native.Limits{}, nil))
	store := t.TempDir()
	w, err := traces.OpenWriter(store, traces.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up)
	mux := http.NewServeMux()
	mux.Handle(traces.OTLPPath, &traces.OTLPReceiver{Sink: w, Source: "otlp"})
	mux.Handle("/", &traces.Recorder{Next: traces.NewProxy(u, nil), Sink: w, Source: "proxy"})
	proxy := serveT(t, mux)

	type answer struct {
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
		Choices        []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				Content []struct {
					Logprob float32 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	var answers []answer
	for seed := range 2 {
		body := `{"model":"tiny","messages":[{"role":"user","content":"Tom has 3 apples."}],"max_tokens":5,"seed":` +
			string(rune('1'+seed)) + `,"logprobs":true,"return_token_ids":true}`
		resp, err := http.Post(proxy+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if len(a.Choices) != 1 || len(a.Choices[0].TokenIDs) == 0 {
			t.Fatalf("answer %+v", a)
		}
		answers = append(answers, a)
	}
	imported := traces.NewSpan()
	imported.TraceID, imported.SpanID = oteltrace.TraceID{9, 9}, oteltrace.SpanID{9}
	imported.Name, imported.Operation, imported.RequestModel = "chat tiny", traces.OpChat, "tiny"
	imported.Start = time.Now()
	imported.End = imported.Start.Add(time.Millisecond)
	imported.InputMessages = `[{"role":"user","parts":[{"type":"text","content":"2+2?"}]}]`
	imported.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"It is 4."}],"finish_reason":"stop"}]`
	imported.Rewards = []traces.Reward{{Name: "human", Value: 0.5}}
	pb, _ := proto.Marshal(traces.ToOTLP([]traces.Span{imported}))
	if resp, err := http.Post(proxy+traces.OTLPPath, "application/x-protobuf", bytes.NewReader(pb)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("OTLP export: %v %v", resp, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	recorded, _, err := traces.Load(store, traces.Filter{Source: "proxy", MinReward: nan(), MaxReward: nan()})
	if err != nil || len(recorded) != 2 {
		t.Fatalf("recorded traces %d: %v", len(recorded), err)
	}
	for i, r := range []float64{1, 0} {
		if err := traces.Annotate(store, traces.Annotation{TraceID: recorded[i].ID.String(), Reward: traces.Reward{Name: "human", Value: r}}); err != nil {
			t.Fatal(err)
		}
	}
	all, skipped, err := traces.Load(store, traces.Any())
	if err != nil || len(skipped) > 0 || len(all) != 3 {
		t.Fatalf("traces %d, skipped %v: %v", len(all), skipped, err)
	}
	tok := tokenizer.Builtin()
	turns, dropped, err := traces.Trajectories(all, traces.TrajectoryOptions{Policy: "actor", Reward: "human", Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) > 0 || len(turns) != 3 {
		t.Fatalf("%d turns, dropped %+v", len(turns), dropped)
	}
	b, err := train.BatchFromTrajectories("actor", turns, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantPrompts := [][]int32{answers[0].PromptTokenIDs, answers[1].PromptTokenIDs,
		ints32(tok.EncodeChat([]tokenizer.Message{{Role: "user", Content: "2+2?"}}, true))}
	wantResponses := [][]int32{answers[0].Choices[0].TokenIDs, answers[1].Choices[0].TokenIDs, ints32(tok.Encode("It is 4."))}
	var wantLogprobs [][]float32
	for _, a := range answers {
		var lp []float32
		for _, c := range a.Choices[0].Logprobs.Content {
			lp = append(lp, c.Logprob)
		}
		wantLogprobs = append(wantLogprobs, lp)
	}
	wantLogprobs = append(wantLogprobs, make([]float32, len(wantResponses[2])))
	if !reflect.DeepEqual(b.Prompts, wantPrompts) || !reflect.DeepEqual(b.Responses, wantResponses) || !reflect.DeepEqual(b.SampleLogProbs, wantLogprobs) {
		t.Errorf("batch prompts %v\nresponses %v\nlogprobs %v\nwant %v\n%v\n%v", b.Prompts, b.Responses, b.SampleLogProbs, wantPrompts, wantResponses, wantLogprobs)
	}
	// The two recorded calls share a prompt: one GRPO group; the imported call is another.
	if !slices.Equal(b.Rewards, []float64{1, 0, 0.5}) || b.GroupIDs[0] != b.GroupIDs[1] || b.GroupIDs[2] == b.GroupIDs[0] {
		t.Errorf("batch rewards %v, groups %v", b.Rewards, b.GroupIDs)
	}
	if turns[2].Note != "re-tokenized; logprobs not recorded" || turns[0].Note != "" {
		t.Errorf("notes %q %q", turns[0].Note, turns[2].Note)
	}

	// A few reward-weighted SFT steps of the policy that answered, on the batch.
	cfg := learner.DefaultConfig()
	cfg.ModelDir, cfg.Algorithm, cfg.LR, cfg.RWBeta = dir, learner.RWSFT, 1e-2, 1
	l, err := learner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens := 0
	for _, r := range b.Responses {
		tokens += len(r)
	}
	var losses []float64
	for range 4 {
		st, err := l.Train(b)
		if err != nil {
			t.Fatal(err)
		}
		if st.Seqs != 3 || st.Tokens != tokens {
			t.Fatalf("trained %d sequences, %d tokens; the batch has 3, %d", st.Seqs, st.Tokens, tokens)
		}
		losses = append(losses, st.Loss)
	}
	if !(losses[3] < losses[0]) {
		t.Errorf("reward-weighted SFT on the traces: losses %v do not fall", losses)
	}
}

func ints32(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

func nan() float64 { return math.NaN() }
