package cluster

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFailureDetection measures how long a three-node cluster takes to
// notice a node killed with SIGKILL (memberlist probes, FastDetection
// settings), and a node leaving gracefully. Each round starts a fresh
// victim and lets probes settle for a second first: memberlist's Lifeguard
// slows probing after failed probes, so back-to-back kills would measure
// its back-off rather than detection.
//
//	go test ./cluster -run '^$' -bench Detection -benchtime 5x
func BenchmarkFailureDetection(b *testing.B) {
	for _, mode := range []string{"sigkill", "graceful"} {
		b.Run(mode, func(b *testing.B) {
			key := make([]byte, 32)
			a := startLocalNode(b, "observer-"+mode, key)
			startNodeProcess(b, "bystander-"+mode, key, a.GossipAddress(), 0, "")
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				id := fmt.Sprintf("victim-%s-%d", mode, i)
				tn := startNodeProcess(b, id, key, a.GossipAddress(), 0, "")
				for deadline := time.Now().Add(10 * time.Second); !a.isAlive(id); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatal("victim never joined")
					}
				}
				time.Sleep(time.Second)
				b.StartTimer()
				start := time.Now()
				if mode == "sigkill" {
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
