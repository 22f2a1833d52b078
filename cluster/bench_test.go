package cluster

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFailureDetection measures how long a three-node cluster takes to
// notice a node killed with SIGKILL, and a node leaving gracefully, with
// FastDetection (sigkill, graceful) and LANDetection (lan/sigkill) on every
// node. Each round starts a fresh victim and lets probes settle for a
// second first: memberlist's Lifeguard slows probing after failed probes,
// so back-to-back kills would measure its back-off rather than detection.
//
//	go test ./cluster -run '^$' -bench Detection -benchtime 5x
func BenchmarkFailureDetection(b *testing.B) {
	for _, c := range []struct{ name, preset, mode string }{
		{"sigkill", "fast", "sigkill"}, {"graceful", "fast", "graceful"}, {"lan/sigkill", "lan", "sigkill"},
	} {
		b.Run(c.name, func(b *testing.B) {
			det, env := benchPreset(b, c.preset)
			key := make([]byte, 32)
			a := startLocalNodeWith(b, "observer-"+c.preset+"-"+c.mode, key, det)
			startNodeProcess(b, "bystander-"+c.preset+"-"+c.mode, key, a.GossipAddress(), 0, "", env)
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				id := fmt.Sprintf("victim-%s-%s-%d", c.preset, c.mode, i)
				tn := startVictim(b, a, id, key, env)
				b.StartTimer()
				start := time.Now()
				if c.mode == "sigkill" {
					_ = tn.Cmd.Process.Signal(syscall.SIGKILL)
				} else {
					tn.Stdin.Close()
				}
				for a.isAlive(id) {
					if time.Since(start) > 30*time.Second {
						b.Fatal("death not noticed within 30s")
					}
					time.Sleep(2 * time.Millisecond)
				}
				total += time.Since(start)
				<-tn.Exited
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/detection")
		})
	}
}

// BenchmarkStallTolerance freezes a joined node with SIGSTOP for a while,
// resumes it, and reports the share of rounds in which the observer took
// it for lost (lost/round) during the stall or the 3 s after it: the price
// of FastDetection's speed on a host that starves a node of CPU.
//
//	go test ./cluster -run '^$' -bench StallTolerance -benchtime 3x
func BenchmarkStallTolerance(b *testing.B) {
	for _, c := range []struct {
		preset string
		stall  time.Duration
	}{{"fast", time.Second}, {"fast", 2 * time.Second}, {"lan", 2 * time.Second}, {"lan", 3 * time.Second}} {
		b.Run(fmt.Sprintf("%s/%s", c.preset, c.stall), func(b *testing.B) {
			det, env := benchPreset(b, c.preset)
			key := make([]byte, 32)
			a := startLocalNodeWith(b, "observer-stall", key, det)
			startNodeProcess(b, "bystander-stall", key, a.GossipAddress(), 0, "", env)
			lost := 0
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("stalled-%s-%d", c.preset, i)
				tn := startVictim(b, a, id, key, env)
				_ = tn.Cmd.Process.Signal(syscall.SIGSTOP)
				resumed, seen := false, false
				for start := time.Now(); time.Since(start) < c.stall+3*time.Second; time.Sleep(5 * time.Millisecond) {
					if !resumed && time.Since(start) >= c.stall {
						_ = tn.Cmd.Process.Signal(syscall.SIGCONT)
						resumed = true
					}
					seen = seen || !a.isAlive(id)
				}
				if seen {
					lost++
				}
				tn.Stdin.Close()
				<-tn.Exited
			}
			b.ReportMetric(float64(lost)/float64(b.N), "lost/round")
		})
	}
}

// benchPreset is a preset's settings for the local node and the
// environment that gives them to node processes.
func benchPreset(b *testing.B, name string) (Detection, string) {
	det, err := ParseDetection(name)
	if err != nil {
		b.Fatal(err)
	}
	return det, "RLNODE_TEST_DETECTION=" + name
}

// startVictim starts a node process, waits until a sees it and lets
// probes settle for a second.
func startVictim(b *testing.B, a *Node, id string, key []byte, env string) *testNode {
	tn := startNodeProcess(b, id, key, a.GossipAddress(), 0, "", env)
	for deadline := time.Now().Add(10 * time.Second); !a.isAlive(id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("victim never joined")
		}
	}
	time.Sleep(time.Second)
	return tn
}

// BenchmarkTask times one task's round trip (test.square, sequential),
// beside an actor call of the same size to the same node as the
// reference: on this process's node and on a child node process.
//
//	go test ./cluster -run '^$' -bench 'Task$' -benchtime 2000x
func BenchmarkTask(b *testing.B) {
	key := testKey(b)
	a := startLocalNode(b, "bench-task", key)
	child := startNodeProcess(b, "bench-task-b", key, a.GossipAddress(), 0, "")
	waitFor(b, "2 nodes", 10*time.Second, func() bool { return nodeCount(a) == 2 })
	ctx := context.Background()
	for _, where := range []struct{ name, node string }{{"local", a.ID()}, {"remote", child.id}} {
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: "bench-" + where.name, Node: where.node})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(where.name+"/task", func(b *testing.B) {
			for i := range b.N {
				if v, err := Submit[int](ctx, a, "test.square", i, TaskOptions{Node: where.node}).Get(ctx); err != nil || v != i*i {
					b.Fatal(v, err)
				}
			}
		})
		b.Run(where.name+"/call", func(b *testing.B) {
			for range b.N {
				if _, err := Call[Sum](ctx, h, Add{N: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
