package env

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/env/envtest"
)

func openHTTP(t testing.TB, u string, opt HTTPOptions) *HTTP {
	t.Helper()
	h, err := NewHTTP(u, opt)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// bisect plays the guessing game by halving; it returns the rewards.
func bisect(ctx context.Context, e Env, task string) ([]float64, StepResult, error) {
	if _, err := e.Reset(ctx, 3, task); err != nil {
		return nil, StepResult{}, err
	}
	lo, hi := 1, 16
	var rewards []float64
	for {
		g := (lo + hi) / 2
		r, err := e.Step(ctx, Action{Name: "guess", Param: fmt.Sprint(g)})
		if err != nil {
			return rewards, r, err
		}
		rewards = append(rewards, r.Reward)
		if r.Done {
			return rewards, r, nil
		}
		if strings.Contains(r.Observation.Text, "guess higher") {
			lo = g + 1
		} else {
			hi = g - 1
		}
	}
}

// A server whose rewards (1e308 a step) would sum past the largest float:
// the first step passes MaxEpisodeReward and ends the episode, the error
// naming the server, the episode and the step.
func TestHTTPHugeRewards(t *testing.T) {
	u, _ := envtest.GuessServer(t, "--step-reward", "1e308")
	ctx := context.Background()
	h := openHTTP(t, u, HTTPOptions{})
	rewards, _, err := bisect(ctx, Checked(h), "11")
	want := fmt.Sprintf("http environment %s (episode %s): step 1 (guess(8)): reward 1e+308", u, h.Episode())
	if !errors.Is(err, ErrRewardBound) || !strings.Contains(err.Error(), want) || len(rewards) != 0 {
		t.Fatalf("rewards %v, error %v; want none and ErrRewardBound naming %q", rewards, err, want)
	}
}

func TestHTTPPlays(t *testing.T) {
	u, _ := envtest.GuessServer(t)
	ctx := context.Background()
	h := openHTTP(t, u, HTTPOptions{})
	e := Checked(h)
	// 11: guesses 8, 12, 10, 11.
	rewards, last, err := bisect(ctx, e, "11")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rewards) != "[-0.1 -0.1 -0.1 1]" || last.Info["outcome"] != "solved" || last.Invalid != "" {
		t.Fatalf("rewards %v, last %+v", rewards, last)
	}
	id, steps, err := h.State(ctx)
	if err != nil || id != h.Episode() || steps != 4 {
		t.Fatalf("state: %q %d %v; want %q 4", id, steps, err, h.Episode())
	}
	if _, err := e.Step(ctx, Action{Name: "guess", Param: "1"}); !errors.Is(err, ErrDone) {
		t.Fatalf("step after done: %v, want ErrDone", err)
	}
	if _, err := h.Step(ctx, Action{Name: "guess", Param: "1"}); !errors.Is(err, ErrDone) {
		t.Fatalf("unchecked step after done: %v, want ErrDone", err)
	}
	if _, steps, _ := h.State(ctx); steps != 4 {
		t.Fatalf("the server counted %d steps after done, want 4", steps)
	}

	// An unknown action and a malformed parameter are invalid steps; the
	// episode goes on.
	if _, err := e.Reset(ctx, 0, "7"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []Action{{Name: "jump"}, {Name: "guess", Param: "seven"}, {}} {
		r, err := e.Step(ctx, a)
		if err != nil || r.Reward != -0.5 || r.Invalid == "" || r.Done || len(r.Observation.Actions) != 1 {
			t.Fatalf("%+v: %+v, %v; want an invalid step", a, r, err)
		}
	}
	if r, err := e.Step(ctx, Action{Name: "guess", Param: "7"}); err != nil || !r.Done || r.Reward != 1 {
		t.Fatalf("right guess after invalid ones: %+v, %v", r, err)
	}

	// Episodes at once on one server keep apart; the same task and seed
	// give the same episode.
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := []string{"train", "heldout"}[i%2]
			r, last, err := bisect(ctx, Checked(openHTTP(t, u, HTTPOptions{})), task)
			switch {
			case err != nil:
				errs[i] = err
			case last.Info["outcome"] != "solved" || len(r) > 5:
				errs[i] = fmt.Errorf("%s: %v, %+v", task, r, last)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestHTTPFaults(t *testing.T) {
	u, _ := envtest.GuessServer(t)
	ctx := context.Background()
	tests := []struct {
		task  string
		opt   HTTPOptions
		is    error
		want  string
		steps int // steps the server counted
	}{
		{task: "fault:malformed", want: "malformed JSON"},
		{task: "fault:nan", is: ErrBadReward, want: "NaN or Infinity", steps: 1},
		{task: "fault:huge", want: "response over 1048576 bytes"},
		{task: "fault:status500", want: "status 500 Internal Server Error: {\"detail\": \"the environment crashed\"}", steps: 1},
		{task: "fault:noobs", want: "no observation object", steps: 1},
		{task: "fault:redirect", want: "status 307 Temporary Redirect"},
		{task: "fault:badname", want: `observation action 0: "Guess Now" is not an action name`, steps: 1},
		{task: "fault:badinvalid", want: "metadata.invalid: want a string saying why the action was not accepted, got true", steps: 1},
		{task: "fault:hang", opt: HTTPOptions{Timeout: 300 * time.Millisecond}, want: "no answer within 300ms"},
	}
	for _, tc := range tests {
		t.Run(tc.task, func(t *testing.T) {
			h := openHTTP(t, u, tc.opt)
			e := Checked(h)
			if _, err := e.Reset(ctx, 0, tc.task); err != nil {
				t.Fatal(err)
			}
			_, err := e.Step(ctx, Action{Name: "guess", Param: "2"})
			where := fmt.Sprintf("%s/step (episode %s, step 1)", u, h.Episode())
			if err == nil || !errors.Is(err, ErrHTTPEnv) || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one naming %q and saying %q", err, where, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v is not %v", err, tc.is)
			}
			if _, err := e.Step(ctx, Action{Name: "guess", Param: "2"}); !errors.Is(err, ErrDone) {
				t.Fatalf("step after an error: %v, want ErrDone", err)
			}
			if _, steps, err := h.State(ctx); err != nil || steps != tc.steps {
				t.Fatalf("the server counted %d steps (%v), want %d", steps, err, tc.steps)
			}
		})
	}

	// 503 is retried, once the server has it the step is not repeated.
	h := openHTTP(t, u, HTTPOptions{Backoff: time.Millisecond})
	if _, err := h.Reset(ctx, 0, "fault:flaky"); err != nil {
		t.Fatal(err)
	}
	if r, err := h.Step(ctx, Action{Name: "guess", Param: "5"}); err != nil || !r.Done {
		t.Fatalf("flaky step: %+v, %v; want it retried and solved", r, err)
	}
	if _, steps, _ := h.State(ctx); steps != 1 {
		t.Fatalf("flaky: the server counted %d steps, want 1", steps)
	}

	// Bad tasks and requests are refused at reset with the server's word.
	for task, want := range map[string]string{"17": "outside 1..16", "x": "unknown task"} {
		_, err := openHTTP(t, u, HTTPOptions{}).Reset(ctx, 0, task)
		if err == nil || !strings.Contains(err.Error(), u+"/reset") || !strings.Contains(err.Error(), want) {
			t.Fatalf("task %q: %v; want an error naming /reset saying %q", task, err, want)
		}
	}
	if _, err := openHTTP(t, u, HTTPOptions{}).Reset(ctx, -1, "3"); err == nil || !strings.Contains(err.Error(), "status 422") {
		t.Fatalf("negative seed: %v", err)
	}
}

func TestHTTPServerKilled(t *testing.T) {
	u, cmd := envtest.GuessServer(t)
	ctx := context.Background()
	h := openHTTP(t, u, HTTPOptions{Retries: 2, Backoff: time.Millisecond})
	e := Checked(h)
	if _, err := e.Reset(ctx, 1, "train"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(ctx, Action{Name: "guess", Param: "1"}); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	_, err := e.Step(ctx, Action{Name: "guess", Param: "2"})
	where := fmt.Sprintf("%s/step (episode %s, step 2)", u, h.Episode())
	// A kept-alive connection may meet the dead server as EOF (a step
	// that may have reached it is never sent again); a new one is refused,
	// and retried.
	if err == nil || !strings.Contains(err.Error(), where) ||
		!strings.HasSuffix(err.Error(), ": EOF") && !strings.Contains(err.Error(), "connection refused (after 3 attempts)") {
		t.Fatalf("step on a killed server: %v; want an error naming %q: EOF, or refused after 3 attempts", err, where)
	}
	if _, err := noRetry(t, u).Reset(ctx, 1, "train"); err == nil || !strings.Contains(err.Error(), u+"/reset") {
		t.Fatalf("reset on a killed server: %v", err)
	}
}

func noRetry(t *testing.T, u string) *HTTP {
	return openHTTP(t, u, HTTPOptions{Retries: -1})
}

func TestOpen(t *testing.T) {
	mk, err := Open(Spec{Name: "equations"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mk().(*Equations); !ok {
		t.Fatalf("equations opens %T", mk())
	}
	mk, err = Open(Spec{Name: "http", URL: "http://127.0.0.1:9/env/"})
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := mk().(*HTTP); !ok || h.URL() != "http://127.0.0.1:9/env" {
		t.Fatalf("http opens %#v", mk())
	}
	for _, s := range []Spec{
		{Name: "chess"},
		{Name: "http"},
		{Name: "http", URL: "ftp://host/"},
		{Name: "http", URL: "http://host/?a=1"},
		{Name: "http", URL: "localhost:8000"},
		{Name: "equations", URL: "http://host/"},
	} {
		if _, err := Open(s); err == nil {
			t.Errorf("Open(%+v): no error", s)
		}
	}
}

// BenchmarkHTTPStep is one step of the guessing game served by the Python
// reference server over loopback (a reset every few steps).
func BenchmarkHTTPStep(b *testing.B) {
	u, _ := envtest.GuessServer(b)
	ctx := context.Background()
	h, err := NewHTTP(u, HTTPOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%5 == 0 {
			if _, err := h.Reset(ctx, int64(i), "16"); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := h.Step(ctx, Action{Name: "guess", Param: "1"}); err != nil {
			b.Fatal(err)
		}
	}
}
