package weightsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/rollout/weights"
)

func startSyncer(t *testing.T, n *cluster.Node, cfg Config) *Syncer {
	t.Helper()
	s, err := Start(testCtx(t, 30*time.Second), n, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func register(t *testing.T, s *Syncer, refs ...actor.Ref) {
	t.Helper()
	for _, r := range refs {
		if err := s.Register(testCtx(t, 30*time.Second), r); err != nil {
			t.Fatal(err)
		}
	}
}

// Three engines on one checkpoint; a full publish, then a LoRA publish:
// after each, every engine serves the version and its logprobs are those
// of the learner's model with the new weights.
func TestPublishFullAndLoRA(t *testing.T) {
	n := embedded(t)
	base := nativetest.Model(t, nativetest.Config(), 1)
	dir := nativetest.Save(t, base)
	refs := spawnEngines(t, n, "eng-", dir, "", 3)
	s := startSyncer(t, n, Config{})
	register(t, s, refs...)
	ctx := testCtx(t, 60*time.Second)

	// Before: the engines serve the checkpoint.
	checkAgainst(t, "before", base, generate(t, n.System(), refs[0]), 0)

	learner := nativetest.Model(t, nativetest.Config(), 2)
	rep, err := s.Publish(ctx, 1, weights.FullUpdate(learner))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Applied) != 3 || len(rep.Failed) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range refs {
		checkAgainst(t, r.Name+" full", learner, generate(t, n.System(), r), 1)
	}
	st := s.Versions()
	if st.Latest != 1 || len(st.Engines) != 3 {
		t.Fatalf("status %+v", st)
	}
	for _, e := range st.Engines {
		if e.Version != 1 || e.Kind != "native" || e.Node != n.ID() {
			t.Errorf("engine status %+v", e)
		}
	}

	// LoRA: adapters on q and down projections of the learner's model,
	// with B non-zero so they change the outputs.
	if err := learner.AddLoRA(model.LoRAConfig{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "down_proj"}, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	for i, p := range learner.TrainableParams() {
		v := make([]float32, p.Len())
		for k := range v {
			v[k] = float32((k*7+i*13)%11-5) * 0.05
		}
		learner.B.Upload(p.W, v)
	}
	u, err := weights.LoRAUpdate(learner)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Tensors) != 2*2*2 || u.LoRA.Rank != 4 || strings.Join(u.LoRA.TargetModules, ",") != "down_proj,q_proj" {
		t.Fatalf("lora update: %d tensors, %+v", len(u.Tensors), u.LoRA)
	}
	if _, err := s.Publish(ctx, 2, u); err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		checkAgainst(t, r.Name+" lora", learner, generate(t, n.System(), r), 2)
	}
	// A second adapter replaces the first (merged onto the same base).
	for _, p := range learner.TrainableParams() {
		v := make([]float32, p.Len())
		learner.B.Download(v, p.W)
		for k := range v {
			v[k] = -v[k] * 0.5
		}
		learner.B.Upload(p.W, v)
	}
	u, _ = weights.LoRAUpdate(learner)
	if _, err := s.Publish(ctx, 3, u); err != nil {
		t.Fatal(err)
	}
	checkAgainst(t, "second lora", learner, generate(t, n.System(), refs[2]), 3)

	// Versions never go back.
	if _, err := s.Publish(ctx, 3, u); !errors.Is(err, ErrStaleVersion) {
		t.Fatalf("republish of version 3: %v", err)
	}
	// The actor answers other nodes' status queries.
	h, err := n.Lookup(ctx, "weightsync")
	if err != nil {
		t.Fatal(err)
	}
	remote, err := cluster.Call[Status](ctx, h, StatusRequest{})
	if err != nil || remote.Latest != 3 || len(remote.Engines) != 3 {
		t.Fatalf("status from the actor: %+v, %v", remote, err)
	}
}

func TestBadUpdates(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	refs := spawnEngines(t, n, "bad-", dir, "", 1)
	s := startSyncer(t, n, Config{})
	register(t, s, refs...)
	ctx := testCtx(t, 30*time.Second)
	cases := []struct {
		name string
		u    weights.Update
		want string
	}{
		{"empty", weights.Update{}, "no tensors"},
		{"shape", weights.Update{Tensors: map[string][]float32{"model.norm.weight": make([]float32, 32)}, Shapes: map[string][]int{"model.norm.weight": {31}}}, "32 values for shape [31]"},
		{"lora name", weights.Update{Tensors: map[string][]float32{"model.norm.weight": make([]float32, 32)}, LoRA: &weights.LoRA{Rank: 4, Alpha: 8}}, "not a PEFT adapter weight"},
		{"lora half", weights.Update{Tensors: map[string][]float32{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": make([]float32, 128)}, LoRA: &weights.LoRA{Rank: 4, Alpha: 8}}, "only one of lora_A and lora_B"},
	}
	for _, tc := range cases {
		if _, err := s.Publish(ctx, 1, tc.u); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Refused by the engine: an unknown tensor. The engine is named and
	// removed; nothing else changed.
	_, err := s.Publish(ctx, 1, weights.Update{Tensors: map[string][]float32{"model.nope.weight": {1}}})
	var ee *EngineError
	if !errors.As(err, &ee) || ee.Engine != "bad-a" || ee.Node != n.ID() || !strings.Contains(err.Error(), `"model.nope.weight"`) {
		t.Fatalf("unknown tensor: %v", err)
	}
	if st := s.Versions(); len(st.Engines) != 0 || len(st.Removed) != 1 || st.Removed[0].Name != "bad-a" {
		t.Fatalf("status %+v", st)
	}
	if _, err := s.WaitVersion(ctx, 1); !errors.Is(err, ErrNoEngines) {
		t.Fatalf("wait with no engines: %v", err)
	}
	if _, err := s.Publish(ctx, 1, weights.FullUpdate(nativetest.Model(t, nativetest.Config(), 2))); !errors.Is(err, ErrNoEngines) {
		t.Fatalf("publish with no engines: %v", err)
	}
	if st := s.Versions(); st.Latest != 0 {
		t.Fatalf("a refused publish moved the version to %d", st.Latest)
	}
}

// Asynchronous mode with k = 1: generation for step s may use version
// s-1; asking for step 2 while every engine serves 0 waits for a publish.
func TestStalenessBound(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	refs := spawnEngines(t, n, "st-", dir, "", 2)
	s := startSyncer(t, n, Config{MaxStaleness: 1})
	register(t, s, refs...)
	ctx := testCtx(t, 60*time.Second)

	for step := int64(0); step <= 1; step++ {
		if v, err := s.VersionFor(ctx, step); err != nil || v != 0 {
			t.Fatalf("step %d: version %d, %v", step, v, err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := s.VersionFor(short, 2)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "st-a on "+n.ID()+" serves 0") {
		t.Fatalf("step 2 at version 0 with k=1: %v", err)
	}

	got := make(chan int64, 1)
	go func() {
		v, err := s.VersionFor(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	learner := nativetest.Model(t, nativetest.Config(), 2)
	if _, err := s.Publish(ctx, 1, weights.FullUpdate(learner)); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 1 {
		t.Fatalf("step 2 released at version %d, want 1", v)
	}
	for _, r := range refs {
		checkAgainst(t, r.Name, learner, generate(t, n.System(), r), 1)
	}
}

// Synchronous mode: generation for step 1 waits for version 1 on every
// engine (the on-policy barrier).
func TestSynchronousBarrier(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	refs := spawnEngines(t, n, "sync-", dir, "", 2)
	s := startSyncer(t, n, Config{})
	register(t, s, refs...)
	ctx := testCtx(t, 60*time.Second)
	if v, err := s.VersionFor(ctx, 0); err != nil || v != 0 {
		t.Fatalf("step 0: %d, %v", v, err)
	}
	got := make(chan int64, 1)
	go func() {
		v, err := s.VersionFor(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	learner := nativetest.Model(t, nativetest.Config(), 4)
	if _, err := s.Publish(ctx, 1, weights.FullUpdate(learner)); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 1 {
		t.Fatalf("barrier released at %d", v)
	}
	// Every engine serves version 1 once the barrier is through.
	for _, r := range refs {
		v, err := n.System().Call(ctx, r, weights.VersionRequest{})
		if err != nil || v.(weights.EngineVersion).Version != 1 {
			t.Fatalf("%s: %+v, %v", r.Name, v, err)
		}
	}
}

// A closed engine, a stopped engine actor and an engine whose swap never
// finishes fail their pushes; the healthy engine still gets the
// version, and the failures are named and removed.
func TestFailingEnginesDoNotBlockOthers(t *testing.T) {
	n := embedded(t)
	base := nativetest.Model(t, nativetest.Config(), 1)
	dir := nativetest.Save(t, base)
	healthy := spawnEngines(t, n, "ok-", dir, "", 1)
	stopped := spawnEngines(t, n, "gone-", dir, "", 1)

	closedEng, err := native.Load(dir, native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closedRef, err := weights.Serve(n.System(), "closed", closedEng, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An engine that never finishes a swap (a wedged device, say).
	busyEng, err := native.Load(dir, native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busyEng.Close() })
	busyRef, err := weights.Serve(n.System(), "busy", stuckEngine{busyEng}, nil)
	if err != nil {
		t.Fatal(err)
	}

	s := startSyncer(t, n, Config{PushTimeout: 5 * time.Second}) // the stuck engine's push ends here
	register(t, s, healthy[0], stopped[0], closedRef, busyRef)
	ctx := testCtx(t, 60*time.Second)

	if err := n.StopActor(ctx, "gone-a"); err != nil {
		t.Fatal(err)
	}
	closedEng.Close()

	learner := nativetest.Model(t, nativetest.Config(), 2)
	rep, err := s.Publish(ctx, 1, weights.FullUpdate(learner))
	if !errors.Is(err, ErrEngineFailed) {
		t.Fatalf("publish: %v", err)
	}
	if len(rep.Applied) != 1 || rep.Applied[0].Name != "ok-a" {
		t.Fatalf("applied: %+v (err %v)", rep.Applied, err)
	}
	failed := map[string]string{}
	for _, f := range rep.Failed {
		failed[f.Engine] = f.Err.Error()
		if f.Node != n.ID() {
			t.Errorf("%s: node %q", f.Engine, f.Node)
		}
	}
	if !strings.Contains(failed["closed"], "closed") || !strings.Contains(failed["busy"], "deadline") {
		t.Errorf("failures: %v", failed)
	}
	// The stopped actor was removed by its watch, or failed its push.
	st := s.Versions()
	if len(st.Engines) != 1 || st.Engines[0].Name != "ok-a" || st.Engines[0].Version != 1 || len(st.Removed) != 3 {
		t.Fatalf("status %+v", st)
	}
	for _, name := range []string{"gone-a", "closed", "busy"} {
		if !strings.Contains(err.Error()+removedCauses(st), name) {
			t.Errorf("%s not reported: %v", name, err)
		}
	}
	checkAgainst(t, "healthy", learner, generate(t, n.System(), healthy[0]), 1)
	if v, err := s.WaitVersion(ctx, 1); err != nil || v != 1 {
		t.Fatalf("wait after the failures: %d, %v", v, err)
	}
}

func removedCauses(st Status) string {
	var b strings.Builder
	for _, r := range st.Removed {
		b.WriteString(r.Name + ": " + r.Removed + "\n")
	}
	return b.String()
}

// stuckEngine never completes a swap: SetWeights waits for its context.
type stuckEngine struct{ *native.Engine }

func (stuckEngine) SetWeights(ctx context.Context, version int64, w map[string][]float32) error {
	<-ctx.Done()
	return ctx.Err()
}

// Engines registered after a full and after a LoRA publish are caught up
// to the published weights before they count.
func TestLateEnginesCatchUp(t *testing.T) {
	n := embedded(t)
	dir := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	refs := spawnEngines(t, n, "late-", dir, "", 3)
	s := startSyncer(t, n, Config{})
	register(t, s, refs[0])
	ctx := testCtx(t, 60*time.Second)

	learner := nativetest.Model(t, nativetest.Config(), 2)
	if _, err := s.Publish(ctx, 1, weights.FullUpdate(learner)); err != nil {
		t.Fatal(err)
	}
	register(t, s, refs[1])
	checkAgainst(t, "after full", learner, generate(t, n.System(), refs[1]), 1)

	if err := learner.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, TargetModules: []string{"k_proj", "up_proj"}, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	for _, p := range learner.TrainableParams() {
		v := make([]float32, p.Len())
		for k := range v {
			v[k] = float32(k%7-3) * 0.04
		}
		learner.B.Upload(p.W, v)
	}
	u, err := weights.LoRAUpdate(learner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, 2, u); err != nil {
		t.Fatal(err)
	}
	// Through the actor, as another node would: from the checkpoint it
	// gets full v1, then LoRA v2.
	h, err := n.Lookup(ctx, "weightsync")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := cluster.Call[EngineStatus](ctx, h, RegisterEngine{Engine: refs[2]}); err != nil || st.Version != 2 || st.Name != "late-c" {
		t.Fatalf("register through the actor: %+v, %v", st, err)
	}
	checkAgainst(t, "after lora", learner, generate(t, n.System(), refs[2]), 2)
	if v, err := s.VersionFor(ctx, 2); err != nil || v != 2 {
		t.Fatalf("barrier at step 2: %d, %v", v, err)
	}
}

// Keep holds weights without pushing them: an engine that starts on other
// weights (version -1: none yet) serves them once it registers. Refused
// for LoRA and for an older version, and with an engine registered; once
// every engine is gone (removed), a newer version may be kept again.
func TestKeepCatchesUpNewEngines(t *testing.T) {
	n := embedded(t)
	ctx := testCtx(t, 60*time.Second)
	blank := nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1))
	spawnBlank := func(name string) actor.Ref {
		h, err := n.Spawn(ctx, weights.EngineKind, cluster.SpawnOptions{Name: name, Args: weights.EngineConfig{Model: blank, Version: -1}})
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := h.Record()
		return rec.Ref
	}
	s, err := Start(ctx, n, 3, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	learner := nativetest.Model(t, nativetest.Config(), 2)
	lora := weights.FullUpdate(learner)
	lora.LoRA = &weights.LoRA{Rank: 1, Alpha: 1}
	if err := s.Keep(ctx, 3, lora); err == nil || !strings.Contains(err.Error(), "must be full") {
		t.Fatalf("keep LoRA: %v", err)
	}
	if err := s.Keep(ctx, 2, weights.FullUpdate(learner)); !errors.Is(err, ErrStaleVersion) {
		t.Fatalf("keep version 2 after 3: %v", err)
	}
	if err := s.Keep(ctx, 3, weights.FullUpdate(learner)); err != nil {
		t.Fatal(err)
	}
	if err := s.Keep(ctx, 3, weights.FullUpdate(learner)); !errors.Is(err, ErrStaleVersion) {
		t.Fatalf("keep version 3 twice: %v", err)
	}
	if st := s.Versions(); st.Latest != 3 || len(st.Engines) != 0 {
		t.Fatalf("after Keep: %+v", st)
	}
	first := spawnBlank("blank-a")
	register(t, s, first)
	checkAgainst(t, "registered after Keep", learner, generate(t, n.System(), first), 3)
	if err := s.Keep(ctx, 4, weights.FullUpdate(learner)); !errors.Is(err, ErrEnginesRegistered) {
		t.Fatalf("keep with an engine registered: %v", err)
	}
	// Every engine gone: version 4 is kept for the next one.
	s.Remove(first.Name, "test")
	next := nativetest.Model(t, nativetest.Config(), 3)
	if _, err := s.Publish(ctx, 4, weights.FullUpdate(next)); !errors.Is(err, ErrNoEngines) {
		t.Fatalf("publish with no engine: %v", err)
	}
	if err := s.Keep(ctx, 4, weights.FullUpdate(next)); err != nil {
		t.Fatal(err)
	}
	second := spawnBlank("blank-b")
	register(t, s, second)
	checkAgainst(t, "registered after a second Keep", next, generate(t, n.System(), second), 4)
}

// farHost is an engine host that cannot reach the publisher's bulk
// address: it fetches every push from addr (a port that accepts and never
// answers, as one behind a firewall that drops the reply) instead.
type farHost struct {
	eng  *native.Engine
	recv *weights.Receiver
	addr string
}

func (h *farHost) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case weights.Push:
		m.Blob.Addr = h.addr
		if err := h.recv.Apply(ctx.Context(), ctx.System(), m); err != nil {
			return nil, err
		}
	case weights.VersionRequest:
	default:
		return nil, fmt.Errorf("farHost: unexpected %T", msg)
	}
	return weights.EngineVersion{Engine: ctx.Self().Name, Address: ctx.System().Address(), Version: h.eng.WeightVersion()}, nil
}

// A push the engine cannot fetch fails naming the bulk address it could
// not fetch from. Before, the engine's limit was the syncer's push timeout
// and the syncer's call, started first, gave up first: the failure read
// "context deadline exceeded" with no word of the fetch (seen failing).
func TestPushThatCannotBeFetchedNamesTheBulkAddress(t *testing.T) {
	n := embedded(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn // open, unanswered, until the listener closes
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	eng, err := native.Load(nativetest.Save(t, nativetest.Model(t, nativetest.Config(), 1)), native.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	far := &farHost{eng: eng, recv: &weights.Receiver{Engine: eng}, addr: silent.Addr().String()}
	ref, err := n.System().SpawnLocal(actor.LocalSpawn{Name: "far", Kind: weights.EngineKind, Factory: func(*actor.Context, any) (actor.Actor, error) {
		return far, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSyncer(t, n, Config{PushTimeout: 6 * time.Second})
	register(t, s, ref)
	_, err = s.Publish(testCtx(t, 60*time.Second), 1, weights.FullUpdate(nativetest.Model(t, nativetest.Config(), 2)))
	if !errors.Is(err, ErrEngineFailed) || !strings.Contains(err.Error(), "bulk fetch from "+silent.Addr().String()) {
		t.Fatalf("publish with the bulk address out of reach: %v; want the failure to name %s", err, silent.Addr())
	}
	t.Log(err)
}

// deafHost takes pushes and never answers them (until release closes).
type deafHost struct{ release chan struct{} }

func (h deafHost) Receive(ctx *actor.Context, msg any) (any, error) {
	if _, ok := msg.(weights.Push); ok {
		<-h.release
		return nil, errors.New("released")
	}
	return weights.EngineVersion{Engine: ctx.Self().Name, Address: ctx.System().Address()}, nil
}

// An engine that does not answer its push at all fails it saying so,
// with the push timeout, rather than a bare deadline.
func TestPushWithNoAnswerSaysSo(t *testing.T) {
	n := embedded(t)
	deaf := deafHost{release: make(chan struct{})}
	defer close(deaf.release)
	ref, err := n.System().SpawnLocal(actor.LocalSpawn{Name: "deaf", Kind: weights.EngineKind, Factory: func(*actor.Context, any) (actor.Actor, error) {
		return deaf, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSyncer(t, n, Config{PushTimeout: time.Second})
	register(t, s, ref)
	_, err = s.Publish(testCtx(t, 60*time.Second), 1, weights.FullUpdate(nativetest.Model(t, nativetest.Config(), 2)))
	if !errors.Is(err, ErrEngineFailed) || !strings.Contains(err.Error(), "engine deaf on node") || !strings.Contains(err.Error(), "no answer from the engine within the push timeout 1s") {
		t.Fatalf("publish to an engine that never answers: %v", err)
	}
}
