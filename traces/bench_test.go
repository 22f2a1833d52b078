package traces_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/native/nativetest"
	"github.com/rlnode/rlnode/traces"
	oteltrace "go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
)

func listen(b testing.TB, h http.Handler) string { return serveT(b, h) }

// serveT serves h on a free loopback port until the test ends.
func serveT(b testing.TB, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func openStore(b *testing.B) *traces.Writer {
	b.Helper()
	w, err := traces.OpenWriter(b.TempDir(), traces.WriterOptions{FlushInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return w
}

// otlpBatch is an export request of n chat spans like an instrumented agent
// sends (messages of a few hundred bytes, usage, model).
func otlpBatch(n int) []traces.Span {
	spans := make([]traces.Span, n)
	for i := range spans {
		s := traces.NewSpan()
		s.TraceID = oteltrace.TraceID{byte(i), byte(i >> 8), 1}
		s.SpanID = oteltrace.SpanID{byte(i), byte(i >> 8), 2}
		s.Name, s.Operation, s.RequestModel, s.Source = "chat gpt-x", traces.OpChat, "gpt-x", "bench"
		s.Start = time.Now()
		s.End = s.Start.Add(time.Millisecond)
		s.InputTokens, s.OutputTokens = 120, 40
		s.InputMessages = `[{"role":"user","parts":[{"type":"text","content":"` + string(bytes.Repeat([]byte("word "), 60)) + `"}]}]`
		s.OutputMessages = `[{"role":"assistant","parts":[{"type":"text","content":"` + string(bytes.Repeat([]byte("word "), 20)) + `"}]}]`
		spans[i] = s
	}
	return spans
}

// BenchmarkOTLPIngest posts export requests of 100 spans to the receiver
// over loopback HTTP from 4 clients; the receiver writes to a store.
func BenchmarkOTLPIngest(b *testing.B) {
	spans := otlpBatch(100)
	pb, _ := proto.Marshal(traces.ToOTLP(spans))
	js, _ := traces.EncodeOTLPJSON(traces.ToOTLP(spans))
	for _, enc := range []struct {
		name, ct string
		body     []byte
	}{{"protobuf", "application/x-protobuf", pb}, {"json", "application/json", js}} {
		b.Run(enc.name, func(b *testing.B) {
			w := openStore(b)
			url := listen(b, &traces.OTLPReceiver{Sink: w}) + traces.OTLPPath
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			b.SetParallelism(2) // 2 × GOMAXPROCS clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(url, enc.ct, bytes.NewReader(enc.body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.StopTimer()
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N*len(spans))/b.Elapsed().Seconds(), "spans/s")
			b.ReportMetric(float64(len(enc.body))/float64(len(spans)), "bytes/span")
		})
	}
}

// upstream is a native engine serving a small random model.
func upstream(b *testing.B) string {
	b.Helper()
	dir := nativetest.Save(b, nativetest.Model(b, nativetest.Config(), 1))
	e, err := native.Load(dir, native.Config{MaxBatch: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return listen(b, native.NewServer(e, "tiny", native.Limits{}, nil))
}

// BenchmarkProxyLatency alternates the same chat request sent directly to
// the upstream and through the recording proxy (recording into a store),
// and reports both latencies' p50 and p99 and the difference.
func BenchmarkProxyLatency(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%v", stream), func(b *testing.B) {
			up := upstream(b)
			w := openStore(b)
			u, _ := url.Parse(up)
			proxy := listen(b, &traces.Recorder{Next: traces.NewProxy(u, nil), Sink: w, Source: "bench"})
			body := []byte(fmt.Sprintf(`{"model":"tiny","messages":[{"role":"user","content":"Tom has 3 apples."}],"max_tokens":4,"temperature":0,"stream":%v,"return_token_ids":true}`, stream))
			client := &http.Client{}
			call := func(base string) time.Duration {
				t0 := time.Now()
				resp, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				return time.Since(t0)
			}
			call(up)
			call(proxy)
			var direct, proxied []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				direct = append(direct, call(up))
				proxied = append(proxied, call(proxy))
			}
			b.StopTimer()
			slices.Sort(direct)
			slices.Sort(proxied)
			us := func(d time.Duration) float64 { return float64(d) / 1e3 }
			b.ReportMetric(us(traces.Percentile(direct, 0.5)), "direct-p50-µs")
			b.ReportMetric(us(traces.Percentile(proxied, 0.5)), "proxy-p50-µs")
			b.ReportMetric(us(traces.Percentile(direct, 0.99)), "direct-p99-µs")
			b.ReportMetric(us(traces.Percentile(proxied, 0.99)), "proxy-p99-µs")
			b.ReportMetric(us(traces.Percentile(proxied, 0.5)-traces.Percentile(direct, 0.5)), "added-p50-µs")
			b.ReportMetric(us(traces.Percentile(proxied, 0.99)-traces.Percentile(direct, 0.99)), "added-p99-µs")
		})
	}
}

// BenchmarkProxyThroughput sends chat requests through the recording
// proxy from 2 × GOMAXPROCS clients: recorded spans per second.
func BenchmarkProxyThroughput(b *testing.B) {
	up := upstream(b)
	w := openStore(b)
	u, _ := url.Parse(up)
	proxy := listen(b, &traces.Recorder{Next: traces.NewProxy(u, nil), Sink: w, Source: "bench"})
	body := []byte(`{"model":"tiny","messages":[{"role":"user","content":"Tom has 3 apples."}],"max_tokens":1,"temperature":0}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var failed atomic.Int64
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(proxy+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				failed.Add(1)
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.StopTimer()
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if failed.Load() > 0 || w.Written() != int64(b.N) {
		b.Fatalf("%d requests failed, %d of %d spans written", failed.Load(), w.Written(), b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "spans/s")
}

// BenchmarkRunStepRecording is what rlnode run spends recording one RL
// step's episodes: the spans made from its turns and added to the store
// (add: what the run's goroutine pays), then written (add+flush: the
// Parquet file and its index line, which the writer's goroutine does in
// the background during a run), per step of
// quickstart's shape (32 prompts × 8 samples, one turn each, prompts of a
// few tokens) and of an agent's (16 episodes of 3 steps with a tool call
// each, 2 KiB prompts).
func BenchmarkRunStepRecording(b *testing.B) {
	shapes := []struct {
		name                    string
		episodes, steps, prompt int
		tools                   bool
	}{{"quickstart", 256, 1, 20, false}, {"agent", 16, 3, 2048, true}}
	for _, sh := range shapes {
		for _, flush := range []bool{false, true} {
			name := sh.name + "/add"
			if flush {
				name += "+flush"
			}
			b.Run(name, func(b *testing.B) {
				t0 := time.Now()
				var turns []data.Turn
				for e := range sh.episodes {
					for k := range sh.steps {
						tr := data.Turn{EpisodeID: fmt.Sprintf("g%d-s%d", e/8, e%8), GroupID: int64(e / 8), Sample: int32(e % 8), Turn: int32(k),
							PolicyID: "solver", WeightVersion: 3, PromptIDs: make([]int32, sh.prompt/4), ResponseIDs: make([]int32, 8),
							LogProbs: make([]float32, 8), LossMask: make([]float32, 8), FinishReason: "stop", ResponseText: "\\boxed{16}"}
						tr.Call = data.Call{Model: "scratch:Qwen2ForCausalLM/solver", Start: t0, End: t0.Add(300 * time.Millisecond)}
						tr.Call.CutPrompt(string(bytes.Repeat([]byte("x"), sh.prompt)), nil)
						if sh.tools {
							tr.Call.AddTool(data.ToolCall{Name: "calculate", Arguments: "671*91", Result: "61061", Start: t0, End: t0})
						}
						turns = append(turns, tr)
					}
				}
				w := openStore(b)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := w.Add(traces.SpansFromTurns("bench", i, turns, 1, t0)...); err != nil {
						b.Fatal(err)
					}
					if flush {
						if err := w.Flush(); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
