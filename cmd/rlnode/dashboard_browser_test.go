package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/dashboard"
	"github.com/rlnode/rlnode/traces"
)

// chromium finds a Chromium to drive, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on this machine (Debian: apt-get install chromium; scripts/setup.sh installs it)")
	return ""
}

// artifactDir is where the browser tests leave their screenshots:
// $RLNODE_TEST_ARTIFACTS when set, else the test's temporary folder.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("RLNODE_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser opens a headless Chromium; the test ends it.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTime(); cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", exe, err)
	}
	return ctx
}

// waitInPage evaluates expr in the page until it is true, for up to limit.
func waitInPage(t *testing.T, ctx context.Context, what, expr string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText`))
			t.Fatalf("%s: not seen within %v (last error %v); the page says:\n%s", what, limit, err, html)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("body")))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// dashboardURL finds the dashboard line of a node's banner.
func dashboardURL(t *testing.T, banner string) string {
	t.Helper()
	for _, line := range strings.Split(banner, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "dashboard:" {
			return f[1]
		}
	}
	t.Fatalf("no dashboard line in:\n%s", banner)
	return ""
}

// TestDashboardInBrowser drives Chromium through the dashboard of a live
// three-node cluster on 127.0.0.1 (one node serves it with --dashboard)
// and of `rlnode dashboard` over a real run: the cluster page lists the
// three nodes and marks one DEAD after its SIGKILL, without a reload; the
// runs page draws the run's reward curve with one point per RL step.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browser(t)
	art := artifactDir(t)
	home, runs := t.TempDir(), t.TempDir()

	// A real short run, and a copy of it cut mid-line.
	runDir := filepath.Join(runs, "quickstart-tiny")
	args := append([]string{"run", "quickstart", "--out", runDir}, tinyRun...)
	args = append(args, "--set", "schedule.steps=12")
	if out, errOut, code := runRlnode(t, home, args...); code != 0 {
		t.Fatalf("rlnode run: exit %d\n%s\n%s", code, out, errOut)
	}
	metrics, err := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rewards := 0
	for _, line := range strings.Split(strings.TrimSpace(string(metrics)), "\n") {
		var row struct {
			Reward *float64 `json:"reward_mean"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("metrics.jsonl: %v: %s", err, line)
		}
		if row.Reward != nil {
			rewards++
		}
	}
	if rewards != 12 {
		t.Fatalf("the run wrote %d rewards, want one per RL step (12)", rewards)
	}
	// A second run to compare with: another seed.
	run2 := filepath.Join(runs, "quickstart-seed2")
	args2 := append([]string{"run", "quickstart", "--out", run2}, args[4:]...)
	if out, errOut, code := runRlnode(t, home, append(args2, "--set", "seed=2")...); code != 0 {
		t.Fatalf("rlnode run (seed 2): exit %d\n%s\n%s", code, out, errOut)
	}
	cut := filepath.Join(runs, "cut")
	if err := os.MkdirAll(cut, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cut, "metrics.jsonl"), metrics[:len(metrics)-20], 0o644); err != nil {
		t.Fatal(err)
	}

	// Three nodes; alpha serves the dashboard.
	a := startRlnode(t, home, "start", "--bind", "127.0.0.1:0", "--node-id", "alpha", "--gpus", "0", "--dashboard=127.0.0.1:0", "--dashboard-runs", runs)
	keyFile := filepath.Join(home, "cluster.key")
	b := startRlnode(t, home, "join", a.gossip, "--bind", "127.0.0.1:0", "--key-file", keyFile, "--node-id", "beta", "--gpus", "0", "--label", "zone=b")
	c := startRlnode(t, home, "join", a.gossip, "--bind", "127.0.0.1:0", "--key-file", keyFile, "--node-id", "gamma", "--gpus", "0", "--cpus", "3")
	dumpOnFailure(t, a, b, c)
	dash := dashboardURL(t, a.out.String())

	if err := chromedp.Do(ctx, chromedp.Navigate(dash+"cluster")); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "three live nodes", `["alpha","beta","gamma"].every(id => document.querySelector('#nodes tr[data-node="'+id+'"][data-state="ALIVE"]'))`, time.Minute)
	screenshot(t, ctx, filepath.Join(art, "dashboard-cluster.png"))

	// SIGKILL gamma: the open page marks it DEAD by itself.
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	waitInPage(t, ctx, "gamma DEAD after its SIGKILL", `!!document.querySelector('#nodes tr[data-node="gamma"][data-state="DEAD"]')`, time.Minute)
	alive, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#nodes tr[data-state="ALIVE"]').length`))
	if err != nil || alive != 2 {
		t.Fatalf("after gamma's kill, %d nodes ALIVE (%v), want alpha and beta", alive, err)
	}
	screenshot(t, ctx, filepath.Join(art, "dashboard-cluster-dead.png"))

	// rlnode dashboard, a process of its own, over the runs folder and a
	// second trace store (a copy of the run's).
	extra := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(extra, os.DirFS(filepath.Join(runDir, "traces"))); err != nil {
		t.Fatal(err)
	}
	cmd := rlnodeCmd(t, home, "dashboard", "--bind", "127.0.0.1:0", "--runs", runs, "--traces", extra)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); pw.Close(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-done })
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		if sc.Scan() {
			first <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	var standalone string
	select {
	case line := <-first:
		standalone = strings.TrimPrefix(line, "dashboard: ")
	case <-done:
		t.Fatalf("rlnode dashboard exited: %s", errb.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("rlnode dashboard printed nothing in 30s: %s", errb.String())
	}

	runsURL := fmt.Sprintf("%sruns?run=%s", standalone, url.QueryEscape(runDir))
	if err := chromedp.Do(ctx, chromedp.Navigate(runsURL)); err != nil {
		t.Fatal(err)
	}
	sel := fmt.Sprintf(`document.querySelector('svg[data-metric="reward_mean"] polyline[data-run=%q]')`, runDir)
	waitInPage(t, ctx, "the reward curve", "!!"+sel, time.Minute)
	type curve struct {
		Points int `json:"points"` // the curve's data-points
		Coords int `json:"coords"` // x,y pairs in its points attribute
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[curve]("(() => { const l = "+sel+
		`; return {points: Number(l.dataset.points), coords: l.getAttribute("points").trim().split(/\s+/).length}; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if drawn.Points != rewards || drawn.Coords != rewards {
		t.Fatalf("the reward curve has %d points (%d drawn), want %d (one per RL step in metrics.jsonl)", drawn.Points, drawn.Coords, rewards)
	}
	// Interaction: tick the second run (both curves overlaid, the recipe
	// diff names the seed), switch to a log scale, hover a chart.
	click := fmt.Sprintf(`document.querySelector('input[type=checkbox][data-run=%q]').click(); true`, run2)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](click)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "two reward curves", `document.querySelectorAll('svg[data-metric="reward_mean"] polyline').length === 2`, 30*time.Second)
	waitInPage(t, ctx, "the recipe diff", `!!document.querySelector("#diff table") && document.querySelector("#diff table").innerText.includes("seed")`, 30*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("log").click(); true`)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "a log scale", `document.querySelector('.chart[data-metric="loss"] .sub').innerText.includes("log scale") && location.search.includes("log=1")`, 10*time.Second)
	hover := `(() => { const s = document.querySelector('svg[data-metric="loss"]'), r = s.getBoundingClientRect();
		s.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + r.width * 0.6, clientY: r.top + 50, bubbles: true}));
		return s.parentNode.querySelector(".tip").innerText; })()`
	tip, err := chromedp.Run(ctx, chromedp.Evaluate[string](hover))
	if err != nil || strings.Count(tip, "(step ") != 2 {
		t.Fatalf("hover read-out %q (%v), want one line per run", tip, err)
	}
	// Back to a linear scale (a run this short may have rewards of 0 only,
	// which a log scale cannot draw), then
	// drag across the reward chart: every chart zooms to those steps, the
	// server sending only the points within; a double-click undoes it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("log").click(); true`)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "the reward curve on a linear scale", "!!"+sel, 10*time.Second)
	drag := `(() => { const s = document.querySelector('svg[data-metric="reward_mean"]'), r = s.getBoundingClientRect();
		const at = (type, f) => s.dispatchEvent(new MouseEvent(type, {clientX: r.left + r.width * f, clientY: r.top + 60, bubbles: true}));
		at("mousedown", 0.35); at("mousemove", 0.5); at("mouseup", 0.75); return true; })()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](drag)); err != nil {
		t.Fatal(err)
	}
	zoomed := `(() => { const l = ` + sel + `; const n = l ? Number(l.dataset.points) : 0; return location.search.includes("from=") && n > 0 && n < ` + fmt.Sprint(rewards) + `; })()`
	waitInPage(t, ctx, "the zoomed reward curve", zoomed, 30*time.Second)
	unzoom := `document.querySelector('svg[data-metric="reward_mean"]').dispatchEvent(new MouseEvent("dblclick", {bubbles: true})); true`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](unzoom)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "every step again", `(() => { const l = `+sel+`; return !location.search.includes("from=") && l && Number(l.dataset.points) === `+fmt.Sprint(rewards)+`; })()`, 30*time.Second)

	// The cut run is listed with what is wrong with it.
	waitInPage(t, ctx, "the cut run's problem", `document.getElementById("runs").innerText.includes("ends inside a line")`, 10*time.Second)
	screenshot(t, ctx, filepath.Join(art, "dashboard-runs.png"))

	// A run deleted while its charts are open is said to be gone.
	if err := os.RemoveAll(run2); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "the deleted run", `document.getElementById("main").innerText.includes("is no longer there")`, 30*time.Second)

	// The Episodes page shows the run's recorded episodes, turn by turn;
	// one opens on the Traces page as a span tree.
	store := filepath.Join(runDir, "traces")
	recorded, _, err := traces.Load(store, traces.Any())
	if err != nil || len(recorded) == 0 {
		t.Fatalf("the run recorded no episodes in %s (%d traces, %v)", store, len(recorded), err)
	}
	perStep := map[int64]int{}
	for i := range recorded {
		perStep[recorded[i].Root().Step]++
	}
	step := recorded[0].Root().Step // the first RL step (after the SFT steps)
	for i := range recorded {
		step = min(step, recorded[i].Root().Step)
	}
	shown := min(perStep[step], 20) // the page shows 20 episodes at a time
	epURL := fmt.Sprintf("%sepisodes?run=%s&step=%d", standalone, url.QueryEscape(runDir), step)
	if err := chromedp.Do(ctx, chromedp.Navigate(epURL)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "the first step's episodes", fmt.Sprintf(`document.querySelectorAll(".episode").length === %d && document.getElementById("ep-step").options.length === %d`, shown, len(perStep)+1), time.Minute)
	firstCard := `document.querySelector(".episode")`
	trace, err := chromedp.Run(ctx, chromedp.Evaluate[string](firstCard+`.dataset.trace`))
	if err != nil {
		t.Fatal(err)
	}
	var opened *traces.Trace
	for i := range recorded {
		if recorded[i].ID.String() == trace {
			opened = &recorded[i]
		}
	}
	if opened == nil || opened.Root().Step != step {
		t.Fatalf("the first episode card names trace %q, not one of step %d in %s", trace, step, store)
	}
	turns, err := chromedp.Run(ctx, chromedp.Evaluate[int](firstCard+`.querySelectorAll(".turn").length`))
	if err != nil || turns != len(opened.Spans)-1 {
		t.Fatalf("the episode shows %d turns (%v), want %d (its trace's spans less the root)", turns, err, len(opened.Spans)-1)
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](firstCard+`.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	final, _ := opened.Reward("final")
	// The run recorded its prompts' text: the card shows the first turn's.
	var prompt string
	for _, s := range opened.Spans {
		if s.Turn == 0 && s.Operation != traces.OpInvokeAgent {
			prompt = strings.TrimSpace(traces.MessagesText(s.InputMessages))
		}
	}
	if prompt == "" {
		t.Fatalf("the episode's first turn recorded no prompt text: %+v", opened.Spans)
	}
	for _, want := range []string{"PROMPT", prompt, "RESPONSE", "verifier score", dashboard.Verdict(final, true)} {
		if !strings.Contains(text, want) {
			t.Fatalf("the episode card lacks %q:\n%s", want, text)
		}
	}
	screenshot(t, ctx, filepath.Join(art, "dashboard-episodes.png"))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](firstCard+`.querySelector("a.open-trace").click(); true`)); err != nil {
		t.Fatal(err)
	}
	root := opened.Root().SpanID.String()
	waitInPage(t, ctx, "the episode as a span tree", fmt.Sprintf(`document.querySelectorAll("#spans tr[data-span]").length === %d &&
		document.querySelectorAll('#spans tr[data-depth="1"][data-parent=%q]').length === %d &&
		!!document.querySelector('#spans tr[data-depth="0"][data-span=%q]')`, len(opened.Spans), root, len(opened.Spans)-1, root), time.Minute)
	waitInPage(t, ctx, "the run's store searched", fmt.Sprintf(`document.getElementById("trace-results").innerText.includes("%d traces in 1 store") && document.getElementById("f-store").value === %q`, len(recorded), store), 30*time.Second)
	screenshot(t, ctx, filepath.Join(art, "dashboard-traces.png"))
	// Every store: the run's and the copy given with --traces.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("f-store").value = ""; document.querySelector("#trace-filter button[type=submit]").click(); true`)); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "both stores searched", fmt.Sprintf(`document.getElementById("trace-results").innerText.includes("%d traces in 2 stores")`, 2*len(recorded)), 30*time.Second)

	// The standalone dashboard's cluster page asks a node on this host.
	if err := chromedp.Do(ctx, chromedp.Navigate(standalone+"cluster")); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "alpha and beta on rlnode dashboard's cluster page", `["alpha","beta"].every(id => document.querySelector('#nodes tr[data-node="'+id+'"][data-state="ALIVE"]'))`, time.Minute)
}

// The cluster page's placement-group table shows a group waiting for room
// PENDING with what it waits for, and each bundle's resources: the table
// read a bundle's fields as amounts and drew "{resources: NaN}".
func TestDashboardPlacementGroups(t *testing.T) {
	ctx := browser(t)
	node, err := cluster.Start(context.Background(), cluster.Config{Bind: "127.0.0.1:0", CPUs: 2, GPUs: 0, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	gctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := []cluster.Bundle{{Resources: cluster.Resources{cluster.CPU: 2}}}
	held, err := node.CreatePlacementGroup(gctx, all, cluster.StrictPack)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan string, 10)
	ended := make(chan error, 1)
	go func() {
		_, err := node.CreatePlacementGroupWith(gctx, all, cluster.StrictPack, cluster.GroupOptions{Wait: true, Pending: func(w string) { waiting <- w }})
		ended <- err
	}()
	<-waiting
	srv, err := dashboard.Serve("127.0.0.1:0", dashboard.Config{Cluster: dashboard.LocalNode{Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"cluster")); err != nil {
		t.Fatal(err)
	}
	waitInPage(t, ctx, "a CREATED and a PENDING group", `!!document.querySelector('#groups tr[data-state="CREATED"]') && !!document.querySelector('#groups tr[data-state="PENDING"]')`, time.Minute)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#groups tr[data-group]')].map(r => r.dataset.state + " | " + r.innerText.replace(/\s+/g, " "))`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, filepath.Join(artifactDir(t), "dashboard-groups.png"))
	text := strings.Join(rows, "\n")
	if len(rows) != 2 || strings.Contains(text, "NaN") || !strings.Contains(text, "{CPU: 2}") ||
		!strings.Contains(text, "CREATED | "+held.ID) || !strings.Contains(text, "missing CPU 2 (has 0) free; held by placement group "+held.ID) {
		t.Fatalf("placement groups table:\n%s", text)
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting group, its ctx ended: %v", err)
	}
}
