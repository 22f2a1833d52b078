package vllm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// hostileFaults are answers no sound server gives, each with what the
// error must say: every one is refused naming the server, and the request
// goes to another try (another server may be sound).
var hostileFaults = []struct {
	name  string
	fault vllmtest.Fault
	want  string
}{
	{"200 with an error body", vllmtest.FaultErrorBody, "HTTP 200 with an error body: engine step failed"},
	{"more tokens than max_tokens", vllmtest.FaultExtraToken, "more than the max_tokens 5 asked for"},
	{"token id outside the vocabulary", vllmtest.FaultOutOfVocab, "token_ids[0] = 5000 is outside the vocabulary [0, 5000)"},
	{"null logprob", vllmtest.FaultNullLogprob, "logprob 0 is null"},
	{"logprob beyond float32", vllmtest.FaultHugeLogprob, "is -1e+300, not a log-probability"},
	{"positive logprob", vllmtest.FaultPositive, "is 0.5, not a log-probability"},
	{"huge body", vllmtest.FaultHugeBody, "answer longer than the request can produce"},
	{"body trickling", vllmtest.FaultTrickle, "answer not complete within 300ms"},
	{"finish_reason error", vllmtest.FaultFinishError, `generation failed at the server (finish_reason "error")`},
}

// Before: a 200 with an error body failed as "0 choices", unsaid why and
// never retried; extra tokens, out-of-vocabulary ids, a chat logprob of
// null (read as 0) and logprobs beyond float32 (±Inf) or above 0 were
// handed to the learner; a body could take 256 MiB per request in flight.
func TestHostileAnswersRefusedAndRetried(t *testing.T) {
	for _, chat := range []bool{false, true} {
		for _, tc := range hostileFaults {
			name := tc.name
			if chat {
				name = "chat/" + name
			}
			t.Run(name, func(t *testing.T) {
				f := newFake(t)
				// Only the trickle needs the request cut short; the others
				// get time to spare, so that a loaded machine (the 4 MiB
				// body's encoding under -race) does not turn their refusal
				// into a timeout.
				timeout := 10 * time.Second
				if tc.fault == vllmtest.FaultTrickle {
					timeout = 300 * time.Millisecond
				}
				c := newClient(t, Config{MaxAttempts: 2, RequestTimeout: timeout, VocabSize: vllmtest.DefaultVocab}, f)
				req := engine.Request{ID: "h1", Prompt: promptOf(1), Params: params(5)}
				if chat {
					req = engine.Request{ID: "h1", Messages: []tokenizer.Message{{Role: "user", Content: "hi"}}, Params: params(5)}
				}
				// A broken answer, then a sound one: the retry's.
				f.AddFaults(tc.fault)
				res, err := c.Generate(testCtx(t), []engine.Request{req})
				if err != nil {
					t.Fatalf("one broken answer, then a sound one: %v", err)
				}
				if !chat {
					checkResult(t, res[0], req.Prompt, req.Params, "base", 0)
				}
				// Broken every time: the error names the server, the
				// request and what was wrong.
				f.AddFaults(tc.fault, tc.fault)
				_, err = c.Generate(testCtx(t), []engine.Request{req})
				var re *RequestError
				if !errors.As(err, &re) || !re.Exhausted {
					t.Fatalf("err = %v, want an exhausted *RequestError", err)
				}
				for _, s := range []string{f.URL(), `"h1"`, tc.want} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			})
		}
	}
}

// A completion whose prompt_token_ids are not the prompt sent: the learner
// would train on a prompt the policy never saw.
func TestPromptMismatchRefused(t *testing.T) {
	f := newFake(t)
	c := newClient(t, Config{MaxAttempts: 1}, f)
	f.AddFaults(vllmtest.FaultWrongPrompt)
	_, err := c.Generate(testCtx(t), []engine.Request{{ID: "p1", Prompt: promptOf(1), Params: params(3)}})
	if err == nil || !strings.Contains(err.Error(), "prompt_token_ids (3 ids) are not the 4 prompt ids sent") || !strings.Contains(err.Error(), f.URL()) {
		t.Fatalf("err = %v, want one naming the server and the prompt mismatch", err)
	}
}

func TestAnswerLimit(t *testing.T) {
	small := answerLimit(&engine.Request{Prompt: promptOf(1), Params: params(8)})
	if small < 64<<10 || small > 1<<20 {
		t.Errorf("limit for 8 tokens = %d, want between 64 KiB and 1 MiB", small)
	}
	big := answerLimit(&engine.Request{Prompt: promptOf(1), Params: engine.SamplingParams{MaxTokens: 1 << 20, N: 64}})
	if big != maxResponseBytes {
		t.Errorf("limit for 64 samples of 1M tokens = %d, want the cap %d", big, maxResponseBytes)
	}
	chat := answerLimit(&engine.Request{Messages: []tokenizer.Message{{Role: "user", Content: strings.Repeat("x", 100000)}}, Params: params(8)})
	if chat <= 100000*16 {
		t.Errorf("limit for a 100 kB chat prompt = %d, want room for its token ids", chat)
	}
}
