package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeRSSUnderHostileRequests measures `rlnode serve`'s resident
// memory while 20 clients at once send oversized prompts. It is a
// measurement, run by hand (figures in docs/internals.md's serve section):
//
//	RLNODE_SERVE_RSS=1 go test ./cmd/rlnode -run TestServeRSS -v -timeout 30m
//
// RLNODE_SERVE_RSS_CAP_MB (default 6000) kills the server once its RSS
// passes that much, so an unbounded server cannot take the host down.
func TestServeRSSUnderHostileRequests(t *testing.T) {
	if os.Getenv("RLNODE_SERVE_RSS") == "" {
		t.Skip("a measurement: set RLNODE_SERVE_RSS=1 to run it")
	}
	capMB := 6000
	if v := os.Getenv("RLNODE_SERVE_RSS_CAP_MB"); v != "" {
		capMB, _ = strconv.Atoi(v)
	}
	const clients = 20
	const mb = 1 << 20
	text := randomWords(30 * mb)
	word := strings.Repeat("a", 600<<10)
	cases := []struct {
		name      string
		positions int
		prompt    func(i int) string
	}{
		{"10-29 MB prompts, context 128", 128, func(i int) string { return text[:(10+i)*mb] }},
		{"4 MiB - 1 KiB prompts, context 128", 128, func(int) string { return text[:4*mb-1024] }},
		{"4 MiB - 1 KiB prompts, context 32768", 32768, func(int) string { return text[:4*mb-1024] }},
		{"600 KiB prompts, context 32768", 32768, func(int) string { return text[:600<<10] }},
		{"600 KiB one-word prompts, context 32768", 32768, func(int) string { return word }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, cmd, exited, _ := startServe(t, "--model", tinyCheckpointContext(t, c.positions))
			pid := cmd.Process.Pid
			idle := procStatusKB(pid, "VmRSS")
			peak, killed := idle, false
			stop := make(chan struct{})
			var watch sync.WaitGroup
			watch.Add(1)
			go func() {
				defer watch.Done()
				for {
					select {
					case <-stop:
						return
					case <-exited:
						return
					case <-time.After(20 * time.Millisecond):
					}
					rss := procStatusKB(pid, "VmRSS")
					peak = max(peak, rss)
					if rss > capMB*1024 {
						killed = true
						cmd.Process.Kill()
						return
					}
				}
			}()
			client := &http.Client{Timeout: 15 * time.Minute}
			var mu sync.Mutex
			statuses := map[string]int{}
			start := time.Now()
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					prompt := c.prompt(i)
					var head, tail string
					path := "/v1/completions"
					if i%2 == 0 {
						head, tail = `{"model":"tiny","max_tokens":4,"prompt":"`, `"}`
					} else {
						path = "/v1/chat/completions"
						head, tail = `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"`, `"}]}`
					}
					req, _ := http.NewRequest("POST", url+path, io.MultiReader(strings.NewReader(head), strings.NewReader(prompt), strings.NewReader(tail)))
					req.ContentLength = int64(len(head) + len(prompt) + len(tail))
					req.Header.Set("Content-Type", "application/json")
					status := "error"
					if resp, err := client.Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						status = strconv.Itoa(resp.StatusCode)
					}
					mu.Lock()
					statuses[status]++
					mu.Unlock()
				}()
			}
			wg.Wait()
			took := time.Since(start)
			hwm := procStatusKB(pid, "VmHWM")
			close(stop)
			watch.Wait()
			peak = max(peak, hwm)
			state := "served"
			if killed {
				state = fmt.Sprintf("killed at the %d MB cap", capMB)
			}
			t.Logf("%s: RSS idle %d MB, peak %d MB (%s); %d clients in %v; answers %v",
				c.name, idle/1024, peak/1024, state, clients, took.Round(100*time.Millisecond), statuses)
		})
	}
}

// randomWords is n bytes of lowercase words, the same on every run.
func randomWords(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		for k := 1 + r.IntN(9); k > 0; k-- {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// procStatusKB reads a kB field of /proc/PID/status (0 if unreadable).
func procStatusKB(pid int, field string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb
		}
	}
	return 0
}
