package train

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/ratelog"
)

// The values of rlnode_run_state.
const (
	runRunning  = 0
	runFinished = 1
	runFailed   = 2 // stopped by an error or an interrupt
)

// RunMetrics exports a run's latest step to Prometheus, every metric
// labelled run="NAME". Observe and Finish may be called from any
// goroutine; a scrape reads the values as they stand. Values the run has
// not produced yet (reward before the first RL step, accuracy before the
// first evaluation, the per-step figures before the first step) are left
// out rather than shown as 0.
type RunMetrics struct {
	// ConnsPerAddr caps the connections one address (an IPv6 one with its
	// /64) may hold open on the endpoint Serve opens; 0:
	// DefaultMetricsConnsPerAddr. Set it before Serve.
	ConnsPerAddr int

	planned int
	descs   map[string]*prometheus.Desc

	mu     sync.Mutex
	last   *Metrics
	tokens int64
	eval   *float64
	reward *float64
	// Environment steps, their wall time and failures, summed over the
	// RL steps of this process (agent runs only).
	envSteps, envErrors int64
	envSeconds          float64
	state               int // runRunning, runFinished or runFailed

	log atomic.Pointer[slog.Logger] // SetLogger's
	// The agent figures of the last RL step and of the last evaluation
	// (agent episodes only).
	agent, evalAgent *AgentStats
}

// agentGauges are the gauges of agent runs, each exported for the last
// RL step and, eval_, for the last evaluation; rlnode_action_reward and
// rlnode_eval_action_reward are labelled with the action.
var agentGauges = []struct{ name, help string }{
	{"completion_rate", "Share of agent episodes that ended solved"},
	{"actions_per_episode", "Actions per agent episode"},
	{"invalid_action_rate", "Share of actions the environment refused (or turns with none)"},
	{"episode_return", "Mean undiscounted return of the agent episodes"},
	{"tool_calls", "Tool calls of the agent episodes"},
	{"tool_errors", "Tool calls that failed"},
}

// runGauges are the gauges of RunMetrics besides rlnode_step_seconds, by
// name, with their help text.
var runGauges = []struct{ name, help string }{
	{"rlnode_step", "Last finished optimizer step (warm-up and RL steps count)."},
	{"rlnode_steps_planned", "Optimizer steps the recipe plans (warm-up plus RL)."},
	{"rlnode_run_state", "0 while the run lasts, 1 finished, 2 stopped by an error or an interrupt."},
	{"rlnode_reward_mean", "Mean verifier reward of the last RL step's samples."},
	{"rlnode_eval_accuracy", "Held-out accuracy at the last evaluation (greedy, or mean@n with eval.samples)."},
	{"rlnode_tokens_per_second", "Tokens per second of generation and training in the last step."},
	{"rlnode_weight_version", "Policy version the engines serve after the last step."},
	{"rlnode_loss", "Loss of the last step."},
	{"rlnode_grad_norm", "Gradient norm of the last step (before clipping)."},
	{"rlnode_learning_rate", "Learning rate of the last step."},
	{"rlnode_approx_kl", "Approximate KL between the sampling and the trained policy in the last step."},
	{"rlnode_entropy", "Mean token entropy in the last step."},
	{"rlnode_clip_fraction", "Fraction of clipped tokens in the last step."},
	{"rlnode_elapsed_seconds", "Seconds since the run (or its resumption) started."},
}

// NewRunMetrics returns the exporter of run name, which plans planned
// optimizer steps (warm-up plus RL).
func NewRunMetrics(name string, planned int) *RunMetrics {
	run := prometheus.Labels{"run": name}
	r := &RunMetrics{planned: planned, descs: map[string]*prometheus.Desc{}}
	for _, g := range runGauges {
		r.descs[g.name] = prometheus.NewDesc(g.name, g.help, nil, run)
	}
	for _, g := range agentGauges {
		r.descs["rlnode_"+g.name] = prometheus.NewDesc("rlnode_"+g.name, g.help+", last RL step.", nil, run)
		r.descs["rlnode_eval_"+g.name] = prometheus.NewDesc("rlnode_eval_"+g.name, g.help+", last evaluation.", nil, run)
	}
	r.descs["rlnode_action_reward"] = prometheus.NewDesc("rlnode_action_reward", "Mean reward per action kind, last RL step.", []string{"action"}, run)
	r.descs["rlnode_eval_action_reward"] = prometheus.NewDesc("rlnode_eval_action_reward", "Mean reward per action kind, last evaluation.", []string{"action"}, run)
	r.descs["rlnode_env_steps_total"] = prometheus.NewDesc("rlnode_env_steps_total", "Environment steps taken by the RL steps' agent episodes of this process.", nil, run)
	r.descs["rlnode_env_step_seconds_total"] = prometheus.NewDesc("rlnode_env_step_seconds_total", "Wall seconds spent in those environment steps.", nil, run)
	r.descs["rlnode_env_errors_total"] = prometheus.NewDesc("rlnode_env_errors_total", "Environment steps that failed (each ended its episode), RL steps and evaluations.", nil, run)
	r.descs["rlnode_tokens_total"] = prometheus.NewDesc("rlnode_tokens_total", "Tokens processed by the steps of this process.", nil, run)
	r.descs["rlnode_step_seconds"] = prometheus.NewDesc("rlnode_step_seconds", "Seconds the last step spent per phase.", []string{"phase"}, run)
	return r
}

// Observe records a finished step (Config.Progress calls it).
func (r *RunMetrics) Observe(m Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = &m
	r.tokens += int64(m.Tokens)
	if m.EvalAccuracy != nil {
		v := *m.EvalAccuracy
		r.eval = &v
	}
	if m.RewardMean != nil {
		v := *m.RewardMean
		r.reward = &v
	}
	if m.CompletionRate != nil {
		r.agent = &AgentStats{CompletionRate: *m.CompletionRate, ActionsPerEpisode: deref(m.ActionsPerEpisode), InvalidActionRate: deref(m.InvalidActionRate),
			MeanReturn: deref(m.EpisodeReturn), ActionReward: m.ActionReward, ToolCalls: deref(m.ToolCalls), ToolErrors: deref(m.ToolErrors)}
	}
	if m.EvalCompletionRate != nil {
		r.evalAgent = &AgentStats{CompletionRate: *m.EvalCompletionRate, ActionsPerEpisode: deref(m.EvalActionsPerEpisode), InvalidActionRate: deref(m.EvalInvalidActionRate),
			MeanReturn: deref(m.EvalEpisodeReturn), ActionReward: m.EvalActionReward, ToolCalls: deref(m.EvalToolCalls), ToolErrors: deref(m.EvalToolErrors)}
	}
	if m.EnvSteps != nil {
		r.envSteps += *m.EnvSteps
		r.envSeconds += float64(*m.EnvSteps) * deref(m.EnvStepSeconds)
	}
	r.envErrors += int64(deref(m.EnvErrors) + deref(m.EvalEnvErrors))
}

func deref[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// Finish records how the run ended: err is Run's error (nil: finished).
func (r *RunMetrics) Finish(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = runFinished
	if err != nil {
		r.state = runFailed
	}
}

// Describe implements prometheus.Collector.
func (r *RunMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range r.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (r *RunMetrics) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gauge := func(name string, v float64) {
		ch <- prometheus.MustNewConstMetric(r.descs[name], prometheus.GaugeValue, v)
	}
	step := 0.0
	if r.last != nil {
		step = float64(r.last.Step)
	}
	gauge("rlnode_step", step)
	gauge("rlnode_steps_planned", float64(r.planned))
	gauge("rlnode_run_state", float64(r.state))
	ch <- prometheus.MustNewConstMetric(r.descs["rlnode_tokens_total"], prometheus.CounterValue, float64(r.tokens))
	if r.agent != nil || r.evalAgent != nil {
		for _, c := range []struct {
			name string
			v    float64
		}{{"rlnode_env_steps_total", float64(r.envSteps)}, {"rlnode_env_step_seconds_total", r.envSeconds}, {"rlnode_env_errors_total", float64(r.envErrors)}} {
			ch <- prometheus.MustNewConstMetric(r.descs[c.name], prometheus.CounterValue, c.v)
		}
	}
	if r.reward != nil {
		gauge("rlnode_reward_mean", *r.reward)
	}
	if r.eval != nil {
		gauge("rlnode_eval_accuracy", *r.eval)
	}
	for _, a := range []struct {
		prefix string
		s      *AgentStats
	}{{"rlnode_", r.agent}, {"rlnode_eval_", r.evalAgent}} {
		if a.s == nil {
			continue
		}
		gauge(a.prefix+"completion_rate", a.s.CompletionRate)
		gauge(a.prefix+"actions_per_episode", a.s.ActionsPerEpisode)
		gauge(a.prefix+"invalid_action_rate", a.s.InvalidActionRate)
		gauge(a.prefix+"episode_return", a.s.MeanReturn)
		gauge(a.prefix+"tool_calls", float64(a.s.ToolCalls))
		gauge(a.prefix+"tool_errors", float64(a.s.ToolErrors))
		for _, k := range actionKinds(a.s.ActionReward) {
			ch <- prometheus.MustNewConstMetric(r.descs[a.prefix+"action_reward"], prometheus.GaugeValue, a.s.ActionReward[k], k)
		}
	}
	m := r.last
	if m == nil {
		return
	}
	if s := m.GenSeconds + m.TrainSeconds; s > 0 {
		gauge("rlnode_tokens_per_second", float64(m.Tokens)/s)
	}
	gauge("rlnode_weight_version", float64(m.WeightVersion))
	gauge("rlnode_loss", m.Loss)
	gauge("rlnode_grad_norm", m.GradNorm)
	gauge("rlnode_learning_rate", m.LR)
	gauge("rlnode_approx_kl", m.ApproxKL)
	gauge("rlnode_entropy", m.Entropy)
	gauge("rlnode_clip_fraction", m.ClipFrac)
	gauge("rlnode_elapsed_seconds", m.ElapsedSeconds)
	for _, p := range []struct {
		phase string
		v     float64
	}{{"generate", m.GenSeconds}, {"train", m.TrainSeconds}, {"sync", m.SyncSeconds}, {"eval", m.EvalSeconds}} {
		ch <- prometheus.MustNewConstMetric(r.descs["rlnode_step_seconds"], prometheus.GaugeValue, p.v, p.phase)
	}
}

// SetLogger sets where the endpoint Serve opened warns of connections it
// closed for its cap per address; it may be called once Serve runs (a run
// makes its logger later). Until then, nothing is logged.
func (r *RunMetrics) SetLogger(l *slog.Logger) { r.log.Store(l) }

// DefaultMetricsConnsPerAddr caps the connections one address may hold
// open on the metrics endpoint, which shares the run's process and
// descriptors, unless RunMetrics.ConnsPerAddr says otherwise.
const DefaultMetricsConnsPerAddr = 32

// Serve serves the run's metrics, with the Go runtime's and the
// process's (go_*, process_*), at http://ADDR/metrics until stop is
// called. It returns the address it listens on (port 0 picks one).
func (r *RunMetrics) Serve(addr string) (bound string, stop func(), err error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(r); err != nil {
		return "", nil, fmt.Errorf("metrics on %s: %w", addr, err)
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	// Scrapers beyond loopback may reach it: one address holds a few
	// connections, and idle or slow ones are cut off.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second}
	perAddr := r.ConnsPerAddr
	if perAddr <= 0 {
		perAddr = DefaultMetricsConnsPerAddr
	}
	capped := connlimit.Limit(ln, perAddr)
	var warn ratelog.Limiter
	capped.Refused = func(addr net.Addr, err error) {
		if log := r.log.Load(); log != nil {
			warn.Warn(log, "metrics endpoint: refusing a connection", "peer", addr.String(), "err", err)
		}
	}
	go func() { _ = srv.Serve(capped) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}
	return ln.Addr().String(), stop, nil
}
