package vllm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// locator stands in for Launched.Locate: where each server is, or why it
// is not found, as a test sets it.
type locator struct {
	mu    sync.Mutex
	at    map[int]Location
	err   map[int]error
	calls map[int]int
	// until, when set for a server, makes Locate fail for it until it has
	// been asked that many times, then find it at next.
	until map[int]int
	next  map[int]Location
}

func newLocator(fakes ...*vllmtest.Server) *locator {
	l := &locator{at: map[int]Location{}, err: map[int]error{}, calls: map[int]int{}, until: map[int]int{}, next: map[int]Location{}}
	for i, f := range fakes {
		l.at[i] = Location{URL: f.URL(), Process: fmt.Sprintf("node-%d/1", i)}
	}
	return l
}

func (l *locator) Locate(_ context.Context, i int) (Location, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[i]++
	if n, ok := l.until[i]; ok {
		if l.calls[i] <= n {
			return Location{}, fmt.Errorf("server actor vllm-%d is RESTARTING (node lost)", i)
		}
		return l.next[i], nil
	}
	if err := l.err[i]; err != nil {
		return Location{}, err
	}
	return l.at[i], nil
}

func (l *locator) set(i int, loc Location, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[i], l.err[i] = loc, err
}

// generateAt sends n requests tagged tag through c and checks that every
// result came from weights at version (what names the step on failure).
func generateAt(ctx context.Context, t *testing.T, c *Client, n int, tag, what, weights string, version int64) {
	t.Helper()
	reqs := requests(n, tag)
	res, err := c.Generate(ctx, reqs)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for i := range reqs {
		checkResult(t, res[i], reqs[i].Prompt, reqs[i].Params, weights, version)
	}
}

func requests(n int, tag string) []engine.Request {
	reqs := make([]engine.Request, n)
	for i := range reqs {
		reqs[i] = engine.Request{ID: fmt.Sprint(tag, i), Prompt: promptOf(i), Params: params(4)}
	}
	return reqs
}

// A launched server whose node is lost starts again elsewhere, at another
// URL. While it is not found it sits the weight updates out and gets no
// requests; the first update that finds it at its new URL reloads it, and
// only then do requests reach it, all of the version it was given.
func TestClientFollowsMovedServer(t *testing.T) {
	ctx := testCtx(t)
	a, b := newFake(t), newFake(t)
	loc := newLocator(a, b)
	c := newClient(t, Config{Locate: loc.Locate}, a, b)
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generate(ctx, requests(8, "a")); err != nil {
		t.Fatal(err)
	}

	// a's node is lost: its process is gone, its actor is restarting.
	a.Close()
	loc.set(0, Location{}, errors.New("server actor vllm-0 is RESTARTING (node lost)"))
	generateAt(ctx, t, c, 8, "b", "generate with a server gone", "v1", 1)
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err != nil {
		t.Fatalf("reload with a server not found: %v", err)
	}
	st := c.Servers()
	if st[0].Missing == "" || st[0].Lost == "" || st[1].Lost != "" || st[1].WeightVersion != 2 {
		t.Fatalf("after a reload without server 0: %+v", st)
	}
	if v := c.WeightVersion(); v != 2 {
		t.Errorf("WeightVersion %d, want 2 (the server that gets requests)", v)
	}

	// It serves again on another node.
	moved := newFake(t)
	loc.set(0, Location{URL: moved.URL(), Process: "node-2/7"}, nil)
	if _, err := c.Generate(ctx, requests(4, "c")); err != nil {
		t.Fatal(err)
	}
	if n := moved.Generated(); n != 0 {
		t.Fatalf("the moved server got %d requests before an update reached it", n)
	}
	if err := c.ReloadWeights(ctx, "/ckpt/step-3", 3); err != nil {
		t.Fatalf("reload once the server moved: %v", err)
	}
	if r := moved.Reloads(); len(r) != 1 || r[0].Path != "/ckpt/step-3" || r[0].Version != "3" {
		t.Fatalf("the moved server's reloads: %+v, want /ckpt/step-3 as version 3", r)
	}
	st = c.Servers()
	if st[0].URL != moved.URL() || st[0].Lost != "" || st[0].Missing != "" || st[0].WeightVersion != 3 {
		t.Fatalf("server 0 after the update that found it: %+v", st[0])
	}
	generateAt(ctx, t, c, 16, "d", "generate", "v3", 3)
	if moved.Generated() == 0 {
		t.Errorf("no request reached the moved server")
	}
}

// The only server moves: requests wait while it is not found, and the
// client gives it the last weights at its new URL before they go there.
func TestOnlyServerMovesAndIsHealed(t *testing.T) {
	ctx := testCtx(t)
	a := newFake(t)
	loc := newLocator(a)
	c := newClient(t, Config{Locate: loc.Locate}, a)
	if err := c.ReloadWeights(ctx, "/ckpt/step-4", 4); err != nil {
		t.Fatal(err)
	}
	a.Close()
	moved := newFake(t)
	loc.mu.Lock()
	loc.until[0] = loc.calls[0] + 3 // not found three times, then at its new URL
	loc.next[0] = Location{URL: moved.URL(), Process: "node-2/9"}
	loc.mu.Unlock()
	generateAt(ctx, t, c, 4, "h", "generate while the only server moves", "v4", 4)
	if r := moved.Reloads(); len(r) != 1 || r[0].Path != "/ckpt/step-4" {
		t.Errorf("the moved server's reloads: %+v, want the last weights, /ckpt/step-4", r)
	}
}

// A server in another process at the same URL (started again in place)
// counts as lost until an update reaches it; a staged server reads each
// folder from the path Stage gives; no server found fails the update,
// naming why.
func TestLocatedRestartsStagingAndNoneFound(t *testing.T) {
	ctx := testCtx(t)
	a, b := newFake(t), newFake(t)
	loc := newLocator(a, b)
	loc.at[1] = Location{URL: b.URL(), Process: "node-1/1", Staged: true}
	var staged []string
	var mu sync.Mutex
	stage := func(_ context.Context, i int, dir string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		staged = append(staged, fmt.Sprint(i, dir))
		return fmt.Sprintf("/staging/%d%s", i, dir), nil
	}
	c := newClient(t, Config{Locate: loc.Locate, Stage: stage}, a, b)
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	if r := a.Reloads(); len(r) != 1 || r[0].Path != "/ckpt/step-1" {
		t.Errorf("unstaged server reloaded %+v, want /ckpt/step-1", r)
	}
	if r := b.Reloads(); len(r) != 1 || r[0].Path != "/staging/1/ckpt/step-1" {
		t.Errorf("staged server reloaded %+v, want /staging/1/ckpt/step-1", r)
	}
	if err := c.LoadLoRA(ctx, "policy", "/ckpt/step-2", 2); err != nil {
		t.Fatal(err)
	}
	if l := b.LoRALoads(); len(l) != 1 || l[0].Path != "/staging/1/ckpt/step-2" {
		t.Errorf("staged server loaded the adapter from %+v, want /staging/1/ckpt/step-2", l)
	}
	if len(staged) != 2 {
		t.Errorf("staged %v, want server 1's two folders only", staged)
	}

	// b started again in place: same URL, another process.
	loc.set(1, Location{URL: b.URL(), Process: "node-1/2", Staged: true}, nil)
	err := c.LoadLoRA(ctx, "policy", "/ckpt/step-3", 3)
	if !errors.Is(err, ErrServerLost) {
		t.Fatalf("adapter onto a server in a new process: %v, want ErrServerLost (reload the base first)", err)
	}
	if st := c.Servers(); !strings.Contains(st[1].Lost, "started again") {
		t.Errorf("server 1 lost %q, want started again", st[1].Lost)
	}

	loc.set(0, Location{}, errors.New("server actor vllm-0 is gone: node lost"))
	loc.set(1, Location{}, errors.New("server actor vllm-1 is gone: node lost"))
	err = c.ReloadWeights(ctx, "/ckpt/step-4", 4)
	if err == nil || !strings.Contains(err.Error(), "no server to update") || !strings.Contains(err.Error(), "vllm-1 is gone") {
		t.Fatalf("reload with no server found: %v", err)
	}
}

// A server Locate finds whose process gives no answer (its node lost and
// not yet known as such: the connection is refused) sits the update out,
// lost, instead of failing it; it takes part again once it answers where
// it was found, and gets requests once an update reaches it.
func TestUpdateLeavesOutServerWithNoAnswer(t *testing.T) {
	ctx := testCtx(t)
	a, b := newFake(t), newFake(t)
	loc := newLocator(a, b)
	c := newClient(t, Config{Locate: loc.Locate}, a, b)
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatal(err)
	}
	dead := newFake(t)
	deadURL := dead.URL()
	dead.Close()
	loc.set(0, Location{URL: deadURL, Process: "node-0/2"}, nil)
	for v := int64(2); v <= 3; v++ {
		if err := c.ReloadWeights(ctx, fmt.Sprintf("/ckpt/step-%d", v), v); err != nil {
			t.Fatalf("version %d with a server that gives no answer: %v", v, err)
		}
		st := c.Servers()
		if !strings.Contains(st[0].Missing, "no answer") || st[0].Lost == "" || st[1].WeightVersion != v {
			t.Fatalf("version %d: %+v", v, st)
		}
		generateAt(ctx, t, c, 4, fmt.Sprint("v", v), fmt.Sprint("generate at version ", v), fmt.Sprint("v", v), v)
	}
	back, err := vllmtest.NewAt(vllmtest.Options{Model: fakeModel, Addr: strings.TrimPrefix(deadURL, "http://")})
	if err != nil {
		t.Skipf("cannot listen at %s again: %v", deadURL, err)
	}
	t.Cleanup(back.Close)
	if err := c.ReloadWeights(ctx, "/ckpt/step-4", 4); err != nil {
		t.Fatal(err)
	}
	if st := c.Servers()[0]; st.Lost != "" || st.Missing != "" || st.WeightVersion != 4 {
		t.Fatalf("server 0 answering again: %+v", st)
	}
	generateAt(ctx, t, c, 16, "w", "generate", "v4", 4)
	if back.Generated() == 0 {
		t.Error("no request reached the server that answers again")
	}
}

// A staged server whose copy fails because its actor is gone (its node
// lost while it copied: ErrServerMissing) sits the update out, lost and
// missing, and the others load it; a Stage failing otherwise fails the
// update.
func TestStageOfAMissingServerSitsOut(t *testing.T) {
	ctx := testCtx(t)
	a, b := newFake(t), newFake(t)
	loc := newLocator(a, b)
	loc.at[1] = Location{URL: b.URL(), Process: "node-1/1", Staged: true}
	var mu sync.Mutex
	stageErr := fmt.Errorf("%w: call vllm-1: %w", ErrServerMissing, actor.ErrNodeLost)
	stage := func(_ context.Context, i int, dir string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if stageErr != nil {
			return "", stageErr
		}
		return fmt.Sprintf("/staging/%d%s", i, dir), nil
	}
	c := newClient(t, Config{Locate: loc.Locate, Stage: stage}, a, b)
	if err := c.ReloadWeights(ctx, "/ckpt/step-1", 1); err != nil {
		t.Fatalf("reload with a staged server gone mid-copy: %v", err)
	}
	st := c.Servers()
	if st[0].WeightVersion != 1 || st[1].Missing == "" || st[1].Lost == "" {
		t.Fatalf("after the reload: %+v; want server 0 on version 1, server 1 lost and missing", st)
	}
	if r := b.Reloads(); len(r) != 0 {
		t.Errorf("the missing server was asked to reload %+v", r)
	}
	res, err := c.Generate(ctx, requests(4, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || b.Generated() != 0 {
		t.Errorf("%d results, %d generated by the missing server; want 4 and 0", len(res), b.Generated())
	}

	mu.Lock()
	stageErr = errors.New("disk full")
	mu.Unlock()
	loc.set(1, Location{URL: b.URL(), Process: "node-1/2", Staged: true}, nil)
	if err := c.ReloadWeights(ctx, "/ckpt/step-2", 2); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("reload with a Stage that fails for another reason: %v, want it to fail naming it", err)
	}
}

// Stage copies a folder ahead of its update, which reads that copy; a
// server that started again in between (another process) is staged again
// by the update, since its copy went with the old one.
func TestStageAheadOfUpdate(t *testing.T) {
	ctx := testCtx(t)
	a, b := newFake(t), newFake(t)
	loc := newLocator(a, b)
	loc.at[1] = Location{URL: b.URL(), Process: "node-1/1", Staged: true}
	var mu sync.Mutex
	var staged []string
	stage := func(_ context.Context, i int, dir string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		staged = append(staged, fmt.Sprint(i, dir))
		return fmt.Sprintf("/staging/%d-%d%s", i, len(staged), dir), nil
	}
	c := newClient(t, Config{Locate: loc.Locate, Stage: stage}, a, b)
	if err := c.Stage(ctx, "relative/step-1"); err == nil {
		t.Error("Stage of a relative folder: no error")
	}
	for v, restart := range []bool{false, true} {
		dir := fmt.Sprintf("/ckpt/step-%d", v+1)
		if err := c.Stage(ctx, dir); err != nil {
			t.Fatal(err)
		}
		if restart {
			loc.set(1, Location{URL: b.URL(), Process: "node-1/2", Staged: true}, nil)
		}
		if err := c.ReloadWeights(ctx, dir, int64(v+1)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"1/ckpt/step-1", "1/ckpt/step-2", "1/ckpt/step-2"}
	if fmt.Sprint(staged) != fmt.Sprint(want) {
		t.Errorf("staged %v, want %v: once ahead of each update, and again for the server that started again", staged, want)
	}
	r := b.Reloads()
	if len(r) != 2 || r[0].Path != "/staging/1-1/ckpt/step-1" || r[1].Path != "/staging/1-3/ckpt/step-2" {
		t.Errorf("the staged server reloaded %+v, want the copy Stage made, then the new process's own copy", r)
	}
	if r := a.Reloads(); len(r) != 2 || r[1].Path != "/ckpt/step-2" {
		t.Errorf("the unstaged server reloaded %+v, want the folders themselves", r)
	}
}
