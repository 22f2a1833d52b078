package vllm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// launchNode is a one-node cluster that offers 2 GPUs and launches
// servers.
func launchNode(t *testing.T) *cluster.Node {
	t.Helper()
	n, err := cluster.Start(context.Background(), cluster.Config{CPUs: 2, GPUs: 2,
		Labels: map[string]string{LaunchLabel: "on"}, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n
}

// Two servers of one GPU each start on different devices, with dev mode,
// an API key and the options given; a client with the launch's key
// generates on them; Stop ends their processes.
func TestLaunchServers(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	rec := t.TempDir()
	t.Setenv("FAKEVLLM_RECORD", rec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := launchNode(t)
	model := t.TempDir()
	args := LaunchArgs{Model: model, ServedName: "policy", Args: []string{"--dtype", "bfloat16", "--enforce-eager"}}

	launchCommand.Store(nil)
	if _, err := LaunchServers(ctx, node, "unoffered", Launch{Servers: 1, GPUs: 1, LaunchArgs: args}); err == nil || !strings.Contains(err.Error(), "does not launch vLLM servers") {
		t.Fatalf("a node that does not offer servers: %v", err)
	}
	if err := OfferServers([]string{fake, "serve"}); err != nil {
		t.Fatal(err)
	}
	l, err := LaunchServers(ctx, node, "pol", Launch{Servers: 2, GPUs: 1, LaunchArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(ctx, Config{Servers: l.URLs, Model: "policy", APIKey: l.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Generate(ctx, []engine.Request{{ID: "a", Prompt: promptOf(1), Params: params(4)}, {ID: "b", Prompt: promptOf(2), Params: params(4)}})
	if err != nil || len(res) != 2 || len(res[0].Samples[0].TokenIDs) == 0 {
		t.Fatalf("generate on launched servers: %+v, %v", res, err)
	}
	// The /v1 routes want the launch's key.
	if _, err := New(ctx, Config{Servers: l.URLs, Model: "policy", APIKey: "wrong"}); err == nil {
		t.Error("a client with another API key was let in")
	}

	for i, u := range l.URLs {
		rec, _ := node.Record(fmt.Sprintf("pol-%d", i))
		if !strings.HasPrefix(rec.Note, "serving "+u+" on CUDA devices ") {
			t.Errorf("server %d's note %q, want where it serves and on which devices", i, rec.Note)
		}
	}
	recs := vllmtest.FakeRecords(t, rec)
	if len(recs) != 2 {
		t.Fatalf("%d servers recorded, want 2", len(recs))
	}
	var devices []string
	var pids []int
	for _, r := range recs {
		if r.DevMode != "1" || !r.KeySet || r.Served != "policy" || !slices.Equal(r.Options, args.Args) {
			t.Errorf("server started with %+v", r)
		}
		devices = append(devices, r.Devices)
		pids = append(pids, r.PID)
	}
	slices.Sort(devices)
	if !slices.Equal(devices, []string{"0", "1"}) {
		t.Errorf("CUDA_VISIBLE_DEVICES %v, want one device each: 0 and 1", devices)
	}

	// A server that dies by itself starts again in place: same URL, a new
	// process, one restart on its record; the client's requests reach it
	// again once it is reloaded (a restarted server serves no request
	// before).
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var restarted int
	deadline := time.Now().Add(30 * time.Second)
	for restarted == 0 {
		for _, r := range vllmtest.FakeRecords(t, rec) {
			if r.Port == recs[0].Port && r.PID != pids[0] {
				restarted = r.PID // the same port, a new process
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed server (pid %d) was not started again", pids[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	pids = append(pids, restarted)
	for i := range l.URLs {
		for {
			rec, _ := node.Record(fmt.Sprintf("pol-%d", i))
			if rec.State == "ALIVE" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("server %d is %s", i, rec.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := c.ReloadWeights(ctx, t.TempDir(), 7); err != nil {
		t.Fatalf("reload after a server's restart: %v", err)
	}
	if _, err := c.Generate(ctx, []engine.Request{{ID: "c", Prompt: promptOf(3), Params: params(4)}}); err != nil {
		t.Fatalf("generate after a server's restart: %v", err)
	}
	for restarts := 0; restarts != 1; {
		restarts = 0
		for i := range l.URLs {
			rec, _ := node.Record(fmt.Sprintf("pol-%d", i))
			restarts += rec.Restarts
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d restarts on the servers' records, want 1", restarts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.Stop(ctx)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server process %d still there after Stop (%v)", pid, err)
		}
	}
	// Their GPUs are free again: two more fit.
	l, err = LaunchServers(ctx, node, "again", Launch{Servers: 2, GPUs: 1, LaunchArgs: args})
	if err != nil {
		t.Fatalf("after Stop: %v", err)
	}
	l.Stop(ctx)
}

// A server that exits before it serves fails the launch with the end of
// its log; options a launch may not set are refused before anything runs.
func TestLaunchServersRefused(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	node := launchNode(t)
	if err := OfferServers([]string{fake, "serve"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKEVLLM_FAIL", "torch.OutOfMemoryError: CUDA out of memory")
	_, err := LaunchServers(ctx, node, "oom", Launch{Servers: 1, GPUs: 1, LaunchArgs: LaunchArgs{Model: t.TempDir(), ServedName: "policy"}})
	if err == nil || !strings.Contains(err.Error(), "CUDA out of memory") || !strings.Contains(err.Error(), "exited before it served") {
		t.Fatalf("a server that exits at start: %v", err)
	}
	for _, args := range [][]string{
		{"--trust-remote-code"},
		{"--port", "9"},
		{"--api-key=x"},
		{"--chat-template", "/etc/shadow"},
		{"--dtype"},
		{"--enforce-eager=yes"},
		slices.Repeat([]string{"--enforce-eager"}, MaxLaunchArgs+1),
	} {
		if err := CheckLaunchArgs(args); err == nil {
			t.Errorf("launch args %q accepted", args)
		}
		_, err := LaunchServers(ctx, node, "bad", Launch{Servers: 1, LaunchArgs: LaunchArgs{Model: t.TempDir(), ServedName: "policy", Args: args}})
		if err == nil {
			t.Errorf("launch with %q started", args)
		}
	}
	for _, a := range []LaunchArgs{{Model: "--trust-remote-code", ServedName: "policy"}, {Model: "relative/model", ServedName: "policy"},
		{Model: t.TempDir(), ServedName: "--trust-remote-code"}} {
		if _, err := LaunchServers(ctx, node, "odd", Launch{Servers: 1, LaunchArgs: a}); err == nil || !strings.Contains(err.Error(), "want an absolute folder") {
			t.Errorf("launch of %+v: %v", a, err)
		}
	}
	if err := CheckLaunchArgs([]string{"--max-model-len=4096", "--gpu-memory-utilization", "0.5", "--enable-lora"}); err != nil {
		t.Errorf("allowed options refused: %v", err)
	}
}

func TestChildDevices(t *testing.T) {
	for _, tc := range []struct {
		ordinals []int
		parent   string
		set      bool
		want     string
	}{
		{[]int{0, 1}, "", false, "0,1"},
		{[]int{1}, "4,6", true, "6"},
		{[]int{0, 1}, "GPU-aaa, GPU-bbb", true, "GPU-aaa,GPU-bbb"},
	} {
		if got := childDevices(tc.ordinals, tc.parent, tc.set); got != tc.want {
			t.Errorf("childDevices(%v, %q, %v) = %q, want %q", tc.ordinals, tc.parent, tc.set, got, tc.want)
		}
	}
}
