package cluster

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

// Hold blocks a test.gate actor until gateOpen is closed.
type Hold struct{}

var gateOpen = make(chan struct{})

type gate struct{}

func (gate) Receive(*actor.Context, any) (any, error) {
	<-gateOpen
	return nil, nil
}

func init() {
	actor.RegisterMessage(Hold{})
	actor.RegisterKind("test.gate", func(*actor.Context, any) (actor.Actor, error) { return gate{}, nil })
}

// The embedded default: a program with no cluster flags is a single-node
// cluster in one process.
func TestEmbeddedSingleNode(t *testing.T) {
	n, err := Start(context.Background(), Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(n.Views()) != 1 {
		t.Fatalf("embedded node sees %d nodes", len(n.Views()))
	}
	var hs []*Handle
	for i := 0; i < 3; i++ {
		h, err := n.Spawn(ctx, "test.counter", SpawnOptions{Resources: Resources{CPU: 0.5}})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// Resources are accounted: 3×0.5 of 2 CPUs used, a 1-CPU actor no longer fits.
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Resources: Resources{CPU: 1}}); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("overcommit: %v", err)
	}
	if st := n.Status(); st.Nodes[0].Used[CPU] != 1.5 || len(st.Actors) != 3 {
		t.Fatalf("status: used %v, %d actors", st.Nodes[0].Used, len(st.Actors))
	}

	// A pool sends each call to the replica with the fewest outstanding:
	// three blocked calls land on three replicas.
	var gates []*Handle
	for i := 0; i < 3; i++ {
		h, err := n.Spawn(ctx, "test.gate", SpawnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gates = append(gates, h)
	}
	pool, err := NewPool(gates...)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pool.Call(ctx, Hold{}); err != nil {
				t.Error(err)
			}
		}()
		waitFor(t, "call in flight", 30*time.Second, func() bool {
			sum := int64(0)
			for _, o := range pool.Outstanding() {
				sum += o
			}
			return sum == int64(i+1)
		})
	}
	if o := pool.Outstanding(); o[0] != 1 || o[1] != 1 || o[2] != 1 {
		t.Fatalf("outstanding per replica %v, want [1 1 1]", o)
	}
	close(gateOpen)
	wg.Wait()
	if _, err := NewPool(); err == nil {
		t.Fatal("empty pool accepted")
	}

	// The control endpoint serves status and Prometheus metrics on loopback.
	t.Setenv("RLNODE_HOME", t.TempDir())
	ctrl, closeCtrl, err := n.ServeControl("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closeCtrl()
	if ri, err := FindRunning(n.GossipAddress()); err != nil || ri.Control != ctrl {
		t.Fatalf("run file: %+v, %v", ri, err)
	}
	resp, err := http.Get("http://" + ctrl + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`rlnode_actors{state="ALIVE"} 6`, "rlnode_nodes 1", `rlnode_node_resources{kind="used",resource="CPU"} 1.5`,
		"# TYPE rlnode_calls_sent_total counter", "\ngo_goroutines "} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	if !regexp.MustCompile(`rlnode_calls_sent_total [1-9]`).Match(metrics) {
		t.Errorf("no calls counted:\n%s", metrics)
	}
	if st, err := FetchStatus(ctx, ctrl); err != nil || len(st.Actors) != 6 {
		t.Fatalf("status over HTTP: %d actors, %v", len(st.Actors), err)
	}

	// Stopping frees resources and tells watchers.
	w := n.Watch(ctx, hs[0].Name())
	if err := hs[0].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case no := <-w:
		if no.State != Dead || no.Cause != "stopped" {
			t.Fatalf("notice %+v", no)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no death notice")
	}
	if _, err := hs[0].Call(ctx, Add{N: 1}); !errors.Is(err, actor.ErrActorDied) || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("call to stopped actor: %v", err)
	}
	waitFor(t, "resources freed", 30*time.Second, func() bool { return n.Status().Nodes[0].Used[CPU] == 1 })

	// A watch on an already-dead actor answers at once.
	select {
	case no := <-n.Watch(ctx, hs[0].Name()):
		if no.State != Dead {
			t.Fatalf("late watch: %+v", no)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("late watch got nothing")
	}

	// Placement group then removal releases its reservation.
	pg, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 0.5}}, {Resources: Resources{CPU: 0.5}}}, StrictPack)
	if err != nil {
		t.Fatal(err)
	}
	if u := n.Status().Nodes[0].Used[CPU]; u != 2 {
		t.Fatalf("after reserving: used CPU %v, want 2", u)
	}
	if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "pg-member", Group: pg, Bundle: 0, Resources: Resources{CPU: 0.5}}); err != nil {
		t.Fatal(err)
	}
	if err := n.RemovePlacementGroup(ctx, pg.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "group released", 30*time.Second, func() bool { return n.Status().Nodes[0].Used[CPU] == 1 })
	if rec, _ := n.Directory().Actor("pg-member"); rec.State != Dead {
		t.Fatalf("group member after removal: %+v", rec.State)
	}
}

// A stopping node's own record keeps saying Leaving after its actors die
// and give their resources back; before, the release republished the node
// without the flag, and the leader took the stop for a crash.
func TestStopKeepsLeavingRecord(t *testing.T) {
	n, err := Start(context.Background(), Config{Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := n.Spawn(ctx, "test.counter", SpawnOptions{Name: "held", Resources: Resources{CPU: 1}})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := n.Directory().Node(n.ID())
	n.Stop()
	rec, ok := n.Directory().Node(n.ID())
	if !ok || !rec.Leaving {
		t.Fatalf("node record after Stop: %+v (want Leaving)", rec)
	}
	if rec.Version <= before.Version || rec.Used[CPU] != 0 {
		t.Fatalf("node record after Stop does not show the release: used %v, version %d (was %d)", rec.Used, rec.Version, before.Version)
	}
	if ar, _ := h.Record(); ar.State != Dead || ar.Cause != "node stopped" {
		t.Fatalf("actor record after Stop: %+v", ar)
	}
	own := n.ownRecords()
	if len(own.Nodes) != 1 || len(own.Actors) != 1 || own.Actors[0].Name != "held" {
		t.Fatalf("records sent on leaving: %d nodes, %+v", len(own.Nodes), own.Actors)
	}
}

func TestParseDetection(t *testing.T) {
	for _, c := range []struct {
		name string
		want Detection
	}{{"fast", FastDetection}, {"lan", LANDetection}} {
		if got, err := ParseDetection(c.name); err != nil || got != c.want {
			t.Errorf("ParseDetection(%q) = %+v, %v", c.name, got, err)
		}
	}
	if LANDetection.ProbeInterval <= FastDetection.ProbeInterval || LANDetection.SuspicionMult <= FastDetection.SuspicionMult {
		t.Errorf("lan %+v is not slower than fast %+v", LANDetection, FastDetection)
	}
	for _, bad := range []string{"", "LAN", "slow"} {
		if _, err := ParseDetection(bad); err == nil || !strings.Contains(err.Error(), "fast or lan") {
			t.Errorf("ParseDetection(%q): %v", bad, err)
		}
	}
}

// An amount below zero, NaN or infinite is refused at Spawn and in a
// placement group's bundles: a spawn asking for CPU −1 used to be
// placed and made the node's free CPUs exceed its total, letting later
// actors overcommit it.
func TestSpawnRefusesNegativeResources(t *testing.T) {
	n, err := Start(context.Background(), Config{CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range []Resources{{CPU: -1}, {"foo": math.NaN()}, {GPU: math.Inf(1)}} {
		if _, err := n.Spawn(ctx, "test.counter", SpawnOptions{Resources: r}); err == nil || !strings.Contains(err.Error(), "want a finite number ≥ 0") {
			t.Errorf("spawn with %v: %v", r, err)
		}
		if _, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}, {Resources: r}}, Pack); err == nil || !strings.Contains(err.Error(), "bundle 1: resource") {
			t.Errorf("group with %v: %v", r, err)
		}
	}
	if st := n.Status(); st.Nodes[0].Free[CPU] != 2 || len(st.Actors) != 0 {
		t.Fatalf("free %v, %d actors, after refused spawns", st.Nodes[0].Free, len(st.Actors))
	}
}

// A node's own CPUs and resources are checked the same way: --cpus -1
// used to start a node offering every core, and NaN one that any request
// fitted.
func TestStartRefusesBadResources(t *testing.T) {
	for _, cfg := range []Config{{CPUs: -1}, {CPUs: math.NaN()}, {CPUs: math.Inf(1)}, {Resources: Resources{"foo": -2}}} {
		cfg.Logger = actor.DiscardLogger()
		n, err := Start(context.Background(), cfg)
		if err == nil {
			n.Stop()
			t.Errorf("CPUs %v, resources %v: started", cfg.CPUs, cfg.Resources)
		} else if !strings.Contains(err.Error(), "want a finite number ≥ 0") {
			t.Errorf("CPUs %v, resources %v: %v", cfg.CPUs, cfg.Resources, err)
		}
	}
}
