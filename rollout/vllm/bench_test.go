package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// BenchmarkClientOverhead measures what the client adds to a request,
// against a local server that answers at once with a canned vLLM completion
// (128 prompt tokens, 16 generated with logprobs and token ids). The peer is
// the bare net/http client doing the same requests — JSON-encode the same
// body, POST it, read and decode the same answer — with no balancing,
// retries, validation or conversion.
//
// "latency" alternates one client request and one bare request, one at a
// time, so both see the same machine load, and reports the p50/p99 of each
// and the p99 the client adds. "throughput" runs each with 8 requests in
// flight and reports requests/s.
//
//	go test -run '^$' -bench ClientOverhead -benchtime 20000x ./rollout/vllm/
func BenchmarkClientOverhead(b *testing.B) {
	srv := instantServer(b)
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	reqs := []engine.Request{{ID: "bench", Prompt: prompt, Params: engine.SamplingParams{MaxTokens: 16, Temperature: 1}}}
	c, err := New(context.Background(), Config{Servers: []string{srv.URL}, Model: "bench", MaxInFlight: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	client := func(ctx context.Context) error {
		res, err := c.Generate(ctx, reqs)
		if err == nil && len(res[0].Samples[0].TokenIDs) != 16 {
			err = fmt.Errorf("got %d tokens", len(res[0].Samples[0].TokenIDs))
		}
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	bare := func(ctx context.Context) error {
		body, err := json.Marshal(completionRequest{Model: "bench", Prompt: prompt, MaxTokens: 16, N: 1,
			Temperature: 1, TopP: 1, ReturnTokenIDs: true})
		if err != nil {
			return err
		}
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/completions", bytes.NewReader(body))
		if err != nil {
			return err
		}
		hr.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(hr)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var cr completionResponse
		if err := json.Unmarshal(data, &cr); err != nil {
			return err
		}
		if len(cr.Choices[0].TokenIDs) != 16 {
			return fmt.Errorf("got %d tokens", len(cr.Choices[0].TokenIDs))
		}
		return nil
	}

	b.Run("latency", func(b *testing.B) {
		ctx := context.Background()
		lc := make([]time.Duration, b.N)
		lb := make([]time.Duration, b.N)
		for i := range b.N {
			t0 := time.Now()
			if err := client(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := bare(ctx); err != nil {
				b.Fatal(err)
			}
			lc[i], lb[i] = t1.Sub(t0), time.Since(t1)
		}
		b.StopTimer()
		pc50, pc99 := percentile(lc, 0.50), percentile(lc, 0.99)
		pb50, pb99 := percentile(lb, 0.50), percentile(lb, 0.99)
		b.ReportMetric(pc50, "client-p50-µs")
		b.ReportMetric(pc99, "client-p99-µs")
		b.ReportMetric(pb50, "bare-p50-µs")
		b.ReportMetric(pb99, "bare-p99-µs")
		b.ReportMetric(pc99-pb99, "added-p99-µs")
	})
	for _, peer := range []struct {
		name string
		do   func(context.Context) error
	}{{"client", client}, {"bare-net-http", bare}} {
		b.Run("throughput/"+peer.name, func(b *testing.B) { runLoad(b, 8, peer.do) })
	}
}

// percentile is the p-quantile of d in microseconds (d is sorted).
func percentile(d []time.Duration, p float64) float64 {
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
}

// runLoad runs b.N calls of do from conc goroutines and reports
// requests/s and latency percentiles.
func runLoad(b *testing.B, conc int, do func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := do(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(percentile(lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(lat, 0.99), "p99-µs")
}

// instantServer answers /health, /v1/models and /v1/completions at once,
// the completion with one canned 16-token vLLM answer.
func instantServer(b *testing.B) *httptest.Server {
	ids := make([]int, 16)
	lps := make([]float64, 16)
	toks := make([]string, 16)
	for i := range ids {
		ids[i] = 2000 + i
		lps[i] = -0.25 * float64(i%5)
		toks[i] = fmt.Sprintf("t%d", ids[i])
	}
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	answer, err := json.Marshal(map[string]any{
		"id": "cmpl-bench", "object": "text_completion", "created": 1, "model": "bench",
		"choices": []any{map[string]any{"index": 0, "text": vllmtest.Text(ids),
			"logprobs":      map[string]any{"text_offset": make([]int, 16), "token_logprobs": lps, "tokens": toks, "top_logprobs": make([]any, 16)},
			"finish_reason": "length", "stop_reason": nil, "token_ids": ids, "prompt_token_ids": prompt}},
		"usage": map[string]int{"prompt_tokens": 128, "completion_tokens": 16, "total_tokens": 144},
	})
	if err != nil {
		b.Fatal(err)
	}
	models := []byte(`{"object":"list","data":[{"id":"bench","object":"model","owned_by":"vllm","root":"bench","parent":null}]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/completions":
			w.Write(answer)
		case "/v1/models":
			w.Write(models)
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkClientCPU is the CPU cost of one request with the network taken
// out: both the client and the bare peer talk to the canned answer through
// an in-memory http.RoundTripper, so ns/op and allocs/op are their own work
// (encoding, decoding, and for the client validation, dispatch and
// conversion to engine.Result).
//
//	go test -run '^$' -bench ClientCPU -benchmem ./rollout/vllm/
func BenchmarkClientCPU(b *testing.B) {
	srv := instantServer(b)
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader([]byte("{}")))
	if err != nil {
		b.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	models, _ := json.Marshal(modelList{Object: "list", Data: []modelCard{{ID: "bench", Object: "model"}}})
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		body := answer
		if r.URL.Path == "/v1/models" {
			body = models
		}
		return &http.Response{StatusCode: 200, Body: io.NopCloser(bytes.NewReader(body)), Header: http.Header{}, Request: r}, nil
	})}
	prompt := make([]int, 128)
	for i := range prompt {
		prompt[i] = 1000 + i
	}
	b.Run("client", func(b *testing.B) {
		c, err := New(context.Background(), Config{Servers: []string{"http://bench.invalid"}, Model: "bench", HTTPClient: hc})
		if err != nil {
			b.Fatal(err)
		}
		reqs := []engine.Request{{ID: "bench", Prompt: prompt, Params: engine.SamplingParams{MaxTokens: 16, Temperature: 1}}}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Generate(ctx, reqs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare-net-http", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			body, _ := json.Marshal(completionRequest{Model: "bench", Prompt: prompt, MaxTokens: 16, N: 1, Temperature: 1, TopP: 1, ReturnTokenIDs: true})
			hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bench.invalid/v1/completions", bytes.NewReader(body))
			hr.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(hr)
			if err != nil {
				b.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var cr completionResponse
			if err := json.Unmarshal(data, &cr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
