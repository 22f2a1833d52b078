package train

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rlnode/rlnode/internal/connlimit/connlimittest"
	"github.com/rlnode/rlnode/internal/logbuf"
)

// exposition is the text format of samples ("NAME{LABELS} VALUE" lines),
// each family with the HELP and TYPE that RunMetrics declares.
func exposition(samples string) string {
	help := map[string]string{
		"rlnode_tokens_total": "Tokens processed by the steps of this process.",
		"rlnode_step_seconds": "Seconds the last step spent per phase.",
	}
	for _, g := range runGauges {
		help[g.name] = g.help
	}
	var sb strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(samples), "\n") {
		name, _, _ := strings.Cut(line, "{")
		if !seen[name] {
			seen[name] = true
			typ := "gauge"
			if strings.HasSuffix(name, "_total") {
				typ = "counter"
			}
			fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s %s\n", name, help[name], name, typ)
		}
		sb.WriteString(line + "\n")
	}
	return sb.String()
}

func TestRunMetricsExposition(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	warmup := Metrics{Step: 1, Phase: "warmup", Loss: 2.5, LR: 1e-4, Tokens: 400, TrainSeconds: 0.5, SyncSeconds: 0.25,
		EvalAccuracy: f(0.125), EvalSeconds: 2, WeightVersion: 1, ElapsedSeconds: 3}
	rl := Metrics{Step: 2, Phase: "rl", RewardMean: f(0.5), Loss: 0.75, GradNorm: 1.5, LR: 2e-4, ApproxKL: 0.01, Entropy: 1.25,
		ClipFrac: 0.0625, Tokens: 600, GenSeconds: 1, TrainSeconds: 2, WeightVersion: 2, ElapsedSeconds: 6.5}
	cases := []struct {
		name   string
		steps  []Metrics
		finish bool
		end    error // Finish's argument
		want   string
	}{
		{"before the first step: no per-step values", nil, false, nil, `
rlnode_step{run="quick"} 0
rlnode_steps_planned{run="quick"} 7
rlnode_run_state{run="quick"} 0
rlnode_tokens_total{run="quick"} 0
`},
		{"after a warm-up step: no reward yet", []Metrics{warmup}, false, nil, `
rlnode_step{run="quick"} 1
rlnode_steps_planned{run="quick"} 7
rlnode_run_state{run="quick"} 0
rlnode_tokens_total{run="quick"} 400
rlnode_eval_accuracy{run="quick"} 0.125
rlnode_tokens_per_second{run="quick"} 800
rlnode_weight_version{run="quick"} 1
rlnode_loss{run="quick"} 2.5
rlnode_grad_norm{run="quick"} 0
rlnode_learning_rate{run="quick"} 0.0001
rlnode_approx_kl{run="quick"} 0
rlnode_entropy{run="quick"} 0
rlnode_clip_fraction{run="quick"} 0
rlnode_elapsed_seconds{run="quick"} 3
rlnode_step_seconds{phase="eval",run="quick"} 2
rlnode_step_seconds{phase="generate",run="quick"} 0
rlnode_step_seconds{phase="sync",run="quick"} 0.25
rlnode_step_seconds{phase="train",run="quick"} 0.5
`},
		{"an RL step keeps the last evaluation; finished", []Metrics{warmup, rl}, true, nil, `
rlnode_step{run="quick"} 2
rlnode_steps_planned{run="quick"} 7
rlnode_run_state{run="quick"} 1
rlnode_tokens_total{run="quick"} 1000
rlnode_reward_mean{run="quick"} 0.5
rlnode_eval_accuracy{run="quick"} 0.125
rlnode_tokens_per_second{run="quick"} 200
rlnode_weight_version{run="quick"} 2
rlnode_loss{run="quick"} 0.75
rlnode_grad_norm{run="quick"} 1.5
rlnode_learning_rate{run="quick"} 0.0002
rlnode_approx_kl{run="quick"} 0.01
rlnode_entropy{run="quick"} 1.25
rlnode_clip_fraction{run="quick"} 0.0625
rlnode_elapsed_seconds{run="quick"} 6.5
rlnode_step_seconds{phase="eval",run="quick"} 0
rlnode_step_seconds{phase="generate",run="quick"} 1
rlnode_step_seconds{phase="sync",run="quick"} 0
rlnode_step_seconds{phase="train",run="quick"} 2
`},
		{"stopped by an error before any step", nil, true, errors.New("interrupted"), `
rlnode_step{run="quick"} 0
rlnode_steps_planned{run="quick"} 7
rlnode_run_state{run="quick"} 2
rlnode_tokens_total{run="quick"} 0
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRunMetrics("quick", 7)
			for _, m := range c.steps {
				r.Observe(m)
			}
			if c.finish {
				r.Finish(c.end)
			}
			if err := testutil.CollectAndCompare(r, strings.NewReader(exposition(c.want))); err != nil {
				t.Error(err)
			}
		})
	}
}

// Agent runs export the agent figures of the last RL step and the last
// evaluation, and count environment steps, their seconds and failures over
// every step observed.
func TestRunMetricsAgent(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	n := func(v int) *int { return &v }
	steps := func(v int64) *int64 { return &v }
	first := Metrics{Step: 1, Phase: "rl", Tokens: 10, TrainSeconds: 1, CompletionRate: f(0.25), ActionsPerEpisode: f(3),
		InvalidActionRate: f(0.5), EpisodeReturn: f(1.5), ActionReward: map[string]float64{"guess": -0.5, "none": -1},
		ToolCalls: n(0), ToolErrors: n(0), EnvSteps: steps(40), EnvStepSeconds: f(0.01), EnvErrors: n(2)}
	second := Metrics{Step: 2, Phase: "rl", Tokens: 10, TrainSeconds: 1, CompletionRate: f(0.5), ActionsPerEpisode: f(2.5),
		InvalidActionRate: f(0.25), EpisodeReturn: f(2.25), ActionReward: map[string]float64{"guess": 0.5},
		ToolCalls: n(1), ToolErrors: n(0), EnvSteps: steps(60), EnvStepSeconds: f(0.02),
		EvalCompletionRate: f(0.75), EvalActionsPerEpisode: f(2), EvalInvalidActionRate: f(0), EvalEpisodeReturn: f(4.5),
		EvalActionReward: map[string]float64{"guess": 2}, EvalToolCalls: n(0), EvalToolErrors: n(0), EvalEnvErrors: n(1)}
	r := NewRunMetrics("game", 2)
	r.Observe(first)
	r.Observe(second)
	want := `
rlnode_completion_rate{run="game"} 0.5
rlnode_actions_per_episode{run="game"} 2.5
rlnode_invalid_action_rate{run="game"} 0.25
rlnode_episode_return{run="game"} 2.25
rlnode_eval_completion_rate{run="game"} 0.75
rlnode_eval_episode_return{run="game"} 4.5
rlnode_env_steps_total{run="game"} 100
rlnode_env_step_seconds_total{run="game"} 1.6
rlnode_env_errors_total{run="game"} 3
rlnode_action_reward{action="guess",run="game"} 0.5
rlnode_eval_action_reward{action="guess",run="game"} 2
`
	help := map[string]string{
		"rlnode_env_steps_total":        "Environment steps taken by the RL steps' agent episodes of this process.",
		"rlnode_env_step_seconds_total": "Wall seconds spent in those environment steps.",
		"rlnode_env_errors_total":       "Environment steps that failed (each ended its episode), RL steps and evaluations.",
		"rlnode_action_reward":          "Mean reward per action kind, last RL step.",
		"rlnode_eval_action_reward":     "Mean reward per action kind, last evaluation.",
	}
	for _, g := range agentGauges {
		help["rlnode_"+g.name] = g.help + ", last RL step."
		help["rlnode_eval_"+g.name] = g.help + ", last evaluation."
	}
	var names []string
	var sb strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		name, _, _ := strings.Cut(line, "{")
		names = append(names, name)
		typ := "gauge"
		if strings.HasSuffix(name, "_total") {
			typ = "counter"
		}
		fmt.Fprintf(&sb, "# HELP %s %s\n# TYPE %s %s\n%s\n", name, help[name], name, typ, line)
	}
	if err := testutil.CollectAndCompare(r, strings.NewReader(sb.String()), names...); err != nil {
		t.Error(err)
	}
	// A run without agent episodes exports none of them.
	plain := NewRunMetrics("quick", 1)
	plain.Observe(Metrics{Step: 1, Tokens: 10, TrainSeconds: 1})
	if c := testutil.CollectAndCount(plain, names...); c != 0 {
		t.Errorf("a run without agent episodes exports %d agent series", c)
	}
}

// Serve answers scrapes on the address it bound and closes it on stop; a
// taken address is an error before anything is served.
func TestRunMetricsServe(t *testing.T) {
	r := NewRunMetrics("quick", 3)
	r.Observe(Metrics{Step: 1, Tokens: 10, TrainSeconds: 1})
	addr, stop, err := r.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"\nrlnode_step{run=\"quick\"} 1\n", "\nrlnode_tokens_per_second{run=\"quick\"} 10\n", "\ngo_goroutines "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if _, _, err := NewRunMetrics("other", 1).Serve(addr); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("second Serve on %s: %v, want address already in use", addr, err)
	}
	stop()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still listens after stop", addr)
	}
}

// TestRunMetricsServeCapsConnectionsPerAddress: one address may hold 32
// connections open on the metrics endpoint; the next is closed unanswered.
// (It held every connection a client kept alive, with no idle timeout,
// so a client beyond loopback could take every descriptor of the run.)
// The connection closed for the cap is logged, naming its peer and the
// cap's count (before, it was closed in silence: a scraper's failures had
// no reason anywhere in the run's log).
func TestRunMetricsServeCapsConnectionsPerAddress(t *testing.T) {
	var logs logbuf.Buffer
	r := NewRunMetrics("quick", 3)
	r.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	addr, stop, err := r.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	connlimittest.HoldsAtMost(t, addr, "/metrics", DefaultMetricsConnsPerAddr)
	out := logs.String()
	if !strings.Contains(out, "metrics endpoint: refusing a connection") || !strings.Contains(out, "peer=127.0.0.1:") ||
		!strings.Contains(out, fmt.Sprintf("127.0.0.1 already holds %d connections", DefaultMetricsConnsPerAddr)) {
		t.Errorf("the connection over the cap was not logged with its peer and count:\n%s", out)
	}
}
