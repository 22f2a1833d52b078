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
