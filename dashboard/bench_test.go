package dashboard

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// writeLongRun writes a run of rows steps whose rows carry the fields a
// quickstart run writes (24 numbers), an evaluation every 25 steps.
func writeLongRun(tb testing.TB, dir string, rows int) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	recipe := fmt.Sprintf("name: quickstart\nsft:\n  steps: 0\nschedule:\n  steps: %d\n", rows)
	if err := os.WriteFile(filepath.Join(dir, RecipeFile), []byte(recipe), 0o644); err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	for i := 1; i <= rows; i++ {
		x := float64(i)
		eval := ""
		if i%25 == 0 {
			eval = fmt.Sprintf(`"eval_accuracy":%.4f,`, 0.4*(1-math.Exp(-x/3000)))
		}
		fmt.Fprintf(&b, `{"step":%d,"phase":"rl","reward_mean":%.6f,%s"loss":%.6f,"grad_norm":%.5f,"lr":0.001,"clip_frac":%.5f,"clip_frac_high":0,"approx_kl":%.6f,"ref_kl":0,"entropy":%.5f,"tokens":%d,"seqs":256,"response_len_mean":7.8,"groups_all_correct":0.03,"groups_none_correct":%.4f,"weight_version":%d,"weight_lag":0,"gen_s":0.0071,"train_s":0.021,"sync_s":0.0052,"elapsed_s":%.3f}`+"\n",
			i, 0.1+0.3*(1-math.Exp(-x/2500))+0.05*math.Sin(x), eval, 0.1*math.Cos(x/7), 1+math.Abs(math.Sin(x/3)), 0.01*math.Abs(math.Sin(x)), 1e-4*(1+math.Sin(x/11)), 0.3+0.01*math.Sin(x/5), 2000+i%17, 0.6-0.0001*x, i, 0.04*x)
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkSeries10k: /api/series for a run of 10,000 rows, 400 points a
// metric; cold reads and parses metrics.jsonl, warm finds it parsed.
func BenchmarkSeries10k(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "long")
	writeLongRun(b, dir, 10000)
	req := httptest.NewRequest(http.MethodGet, "/api/series?points=400&run="+url.QueryEscape(dir), nil)
	req.Host = "127.0.0.1"
	serve := func(h http.Handler) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"raw":10000`) {
			b.Fatalf("HTTP %d: %.200s", w.Code, w.Body.String())
		}
		return w.Body.Len()
	}
	b.Run("cold", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			serve(Handler(b.Context(), Config{RunDirs: []string{filepath.Dir(dir)}}, false))
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
	})
	b.Run("warm", func(b *testing.B) {
		h := Handler(b.Context(), Config{RunDirs: []string{filepath.Dir(dir)}}, false)
		n := serve(h)
		cpu := cpuTime()
		for b.Loop() {
			serve(h)
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
		b.ReportMetric(float64(n), "response-bytes")
	})
}

// BenchmarkRunsPage10k loads the runs page of a 10,000-row run in headless
// Chromium, from a dashboard started afresh (the server parses the file):
// page-ms is the time from navigation until every chart is drawn, as the
// page measures it (performance.now()).
func BenchmarkRunsPage10k(b *testing.B) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		b.Skip("no chromium")
	}
	dir := filepath.Join(b.TempDir(), "long")
	writeLongRun(b, dir, 10000)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(b.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	var total float64
	for b.Loop() {
		srv, err := Serve("127.0.0.1:0", Config{RunDirs: []string{filepath.Dir(dir)}})
		if err != nil {
			b.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"runs?run="+url.QueryEscape(dir))); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		var ms string
		for ms == "" {
			ms, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").dataset.chartsDrawnMs || ""`))
			if time.Now().After(deadline) {
				b.Fatal("charts not drawn in a minute")
			}
			time.Sleep(5 * time.Millisecond)
		}
		v, _ := strconv.ParseFloat(ms, 64)
		total += v
		n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg polyline").length`))
		if n < 20 {
			b.Fatalf("%d curves drawn", n)
		}
		srv.Close()
	}
	b.ReportMetric(total/float64(b.N), "page-ms")
}

// cpuTime is the CPU time this process has used (user and system): on a
// shared machine it moves less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeEpisodeStore records steps × 100 one-turn episodes of a run as
// `rlnode run` does, in the run folder's traces/.
func writeEpisodeStore(tb testing.TB, run string, steps int) {
	tb.Helper()
	w, err := traces.OpenWriter(filepath.Join(run, RunTracesFolder), traces.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	prompt := make([]int32, 64)
	for step := 1; step <= steps; step++ {
		turns := make([]data.Turn, 100)
		for i := range turns {
			turns[i] = data.Turn{EpisodeID: fmt.Sprintf("s%d-e%d", step, i), GroupID: int64(i / 4), PolicyID: "policy", WeightVersion: int64(step),
				PromptIDs: prompt, ResponseIDs: prompt[:32], LogProbs: make([]float32, 32), ResponseText: "the answer is 42", FinishReason: "stop",
				Reward: float64(i % 2), FinalReward: float64(i % 2)}
		}
		if err := w.Add(traces.SpansFromTurns("long", step, turns, 1, t0.Add(time.Duration(step)*time.Second))...); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkTraces10k: a run's store of 10,000 episodes (20,000 spans):
// /api/traces (a page of 50, stats over all), /api/episodes (a page of 20
// of one step) and /api/trace. Cold reads the store; warm finds it read.
func BenchmarkTraces10k(b *testing.B) {
	run := filepath.Join(b.TempDir(), "long")
	writeLongRun(b, run, 100)
	writeEpisodeStore(b, run, 100)
	store := filepath.Join(run, RunTracesFolder)
	cfg := Config{RunDirs: []string{filepath.Dir(run)}}
	serve := func(h http.Handler, path, want string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "127.0.0.1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || !strings.Contains(w.Body.String(), want) {
			b.Fatalf("%s: HTTP %d: %.300s", path, w.Code, w.Body.String())
		}
		return w.Body.Len()
	}
	search := "/api/traces?store=" + url.QueryEscape(store)
	b.Run("search-cold", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			serve(Handler(b.Context(), cfg, false), search, `"total":10000`)
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
	})
	h := Handler(b.Context(), cfg, false)
	serve(h, search, `"total":10000`)
	b.Run("search-warm", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			serve(h, search, `"total":10000`)
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
	})
	b.Run("search-filtered-warm", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			serve(h, search+"&reward=final&min_reward=1", `"total":5000`)
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
	})
	b.Run("episodes-warm", func(b *testing.B) {
		cpu := cpuTime()
		for b.Loop() {
			serve(h, "/api/episodes?step=50&run="+url.QueryEscape(run), `"total":100`)
		}
		b.ReportMetric((cpuTime()-cpu).Seconds()*1000/float64(b.N), "cpu-ms/op")
	})
}
