package actor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Benchmarks between two processes on loopback, our layer next to bare
// protoactor-go on the same payloads (README has the table):
//
//	go test ./actor -run '^$' -bench . -benchtime 2s
//
// Our layer carries Echo{Payload} (msgpack in an Any, resolved through the
// registry, reply matched by call id); bare protoactor carries a
// wrapperspb.BytesValue of the same bytes through RequestFuture.

const benchPayload = 100 // bytes per message

// FetchOffer asks the peer to pull a bulk offer; the reply is its length.
// With Reuse the peer pulls into a buffer it keeps from one fetch to the
// next (FetchRange), as a reader of same-sized payloads can: no fresh
// pages to fault in and clear.
// With View the peer maps it (FetchView) and reads one byte per page.
type FetchOffer struct {
	Ref   BulkRef
	Reuse bool
	View  bool
}

// fetchBuf is the fetcher's kept buffer for Reuse.
var fetchBuf struct {
	sync.Mutex
	b []byte
}

func init() {
	RegisterMessage(FetchOffer{})
	RegisterKind("test.fetcher", func(*Context, any) (Actor, error) { return fetcher{}, nil })
}

type fetcher struct{}

func (fetcher) Receive(ctx *Context, msg any) (any, error) {
	m, ok := msg.(FetchOffer)
	if !ok {
		return nil, fmt.Errorf("unexpected %T", msg)
	}
	if m.View {
		p, release, err := ctx.System().Bulk().FetchView(context.Background(), m.Ref)
		if err != nil {
			return nil, err
		}
		defer release()
		var x byte
		for i := 0; i < len(p); i += 4096 {
			x += p[i]
		}
		benchByte = x
		return Pong{Len: len(p)}, nil
	}
	if m.Reuse {
		fetchBuf.Lock()
		defer fetchBuf.Unlock()
		if int64(len(fetchBuf.b)) != m.Ref.Size {
			fetchBuf.b = make([]byte, m.Ref.Size)
		}
		if err := ctx.System().Bulk().FetchRange(context.Background(), m.Ref, 0, fetchBuf.b); err != nil {
			return nil, err
		}
		return Pong{Len: len(fetchBuf.b)}, nil
	}
	b, err := ctx.System().Bulk().Fetch(context.Background(), m.Ref)
	if err != nil {
		return nil, err
	}
	return Pong{Len: len(b)}, nil
}

// benchByte keeps a view's reads from being optimized away.
var benchByte byte

// bareEcho is a plain protoactor actor: it answers BytesValue with itself,
// and counts chunk bytes for the bulk comparison.
func bareEcho(c pa.Context) {
	if m, ok := c.Message().(*wrapperspb.BytesValue); ok {
		c.Respond(&wrapperspb.Int64Value{Value: int64(len(m.Value))})
	}
}

func benchPeer(b *testing.B) (*System, *peerProc) {
	b.Helper()
	// Both ends hold a cluster key, so every connection passes the member
	// handshake, as between the nodes of a cluster.
	s, err := Start(Config{Secret: []byte("bench key"), Logger: DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	return s, startPeer(b, "RLNODE_ACTOR_SECRET=bench key")
}

func reportRate(b *testing.B, ops int64, elapsed time.Duration, unit string) {
	b.ReportMetric(float64(ops)/elapsed.Seconds(), unit)
	b.ReportMetric(float64(elapsed.Microseconds())/float64(ops), "µs/call")
}

func BenchmarkRemoteSequential(b *testing.B) {
	s, p := benchPeer(b)
	ctx := context.Background()
	msg := Echo{Payload: make([]byte, benchPayload)}
	b.Run("rlnode", func(b *testing.B) {
		ref := p.ref("peer")
		if _, err := s.Call(ctx, ref, msg); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := s.Call(ctx, ref, msg); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int64(b.N), time.Since(start), "calls/s")
	})
	b.Run("protoactor", func(b *testing.B) {
		pid := &pa.PID{Address: p.addr, Id: "bare"}
		bv := &wrapperspb.BytesValue{Value: make([]byte, benchPayload)}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := s.as.Root.RequestFuture(pid, bv, 10*time.Second).Result(); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int64(b.N), time.Since(start), "calls/s")
	})
}

// pipelined runs b.N calls from `workers` goroutines, each with one call in
// flight, so about `workers` calls are outstanding at any time.
func pipelined(b *testing.B, workers int, call func() error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := call(); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "calls/s")
}

func BenchmarkRemotePipelined(b *testing.B) {
	s, p := benchPeer(b)
	ctx := context.Background()
	msg := Echo{Payload: make([]byte, benchPayload)}
	const inflight = 256
	b.Run("rlnode", func(b *testing.B) {
		ref := p.ref("peer")
		pipelined(b, inflight, func() error { _, err := s.Call(ctx, ref, msg); return err })
	})
	b.Run("protoactor", func(b *testing.B) {
		pid := &pa.PID{Address: p.addr, Id: "bare"}
		bv := &wrapperspb.BytesValue{Value: make([]byte, benchPayload)}
		pipelined(b, inflight, func() error {
			_, err := s.as.Root.RequestFuture(pid, bv, 30*time.Second).Result()
			return err
		})
	})
}

func BenchmarkInProcess(b *testing.B) {
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	ref, err := s.SpawnLocal(LocalSpawn{Name: "local", Kind: "test.counter"})
	if err != nil {
		b.Fatal(err)
	}
	bare, _ := s.as.Root.SpawnNamed(pa.PropsFromFunc(bareEcho), "bare-local")
	ctx := context.Background()
	msg := Echo{Payload: make([]byte, benchPayload)}
	b.Run("rlnode", func(b *testing.B) {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := s.Call(ctx, ref, msg); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int64(b.N), time.Since(start), "calls/s")
	})
	b.Run("protoactor", func(b *testing.B) {
		bv := &wrapperspb.BytesValue{Value: make([]byte, benchPayload)}
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if _, err := s.as.Root.RequestFuture(bare, bv, 10*time.Second).Result(); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, int64(b.N), time.Since(start), "calls/s")
	})
}

// BenchmarkBulk256MiB moves 256 MiB to the peer: over our bulk path (the
// peer pulls one offer into a fresh buffer; "rlnode-reused", into the
// buffer of its previous pull; "rlnode-view", FetchView: on one host the
// owner's copy mapped read-only, of which the peer reads a byte per page,
// elsewhere a fresh buffer), and through bare protoactor as 1 MiB
// BytesValue chunks with at most 8 in flight (larger windows overflow a
// gRPC batch).
func BenchmarkBulk256MiB(b *testing.B) {
	s, p := benchPeer(b)
	ctx := context.Background()
	const size = 256 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	fetcherRef := Ref{Name: "fetcher", Address: p.addr, ID: "a/fetcher"}
	for _, mode := range []string{"rlnode", "rlnode-reused", "rlnode-view"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			for i := -1; i < b.N; i++ { // i = -1 warms the connection and the buffer
				if i == 0 {
					b.ResetTimer()
				}
				ref := s.Bulk().Offer(data, 1, time.Minute)
				got, err := CallAs[Pong](ctx, s, fetcherRef, FetchOffer{Ref: ref, Reuse: mode == "rlnode-reused", View: mode == "rlnode-view"})
				if err != nil {
					b.Fatal(err)
				}
				if got.Len != size {
					b.Fatalf("peer got %d bytes", got.Len)
				}
			}
		})
	}
	b.Run("protoactor", func(b *testing.B) {
		pid := &pa.PID{Address: p.addr, Id: "bare"}
		const chunk = 1 << 20
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			window := make(chan *pa.Future, 8)
			errc := make(chan error, 1)
			go func() {
				var total int64
				for f := range window {
					r, err := f.Result()
					if err != nil {
						errc <- err
						return
					}
					total += r.(*wrapperspb.Int64Value).Value
				}
				if total != size {
					errc <- fmt.Errorf("peer got %d bytes", total)
					return
				}
				errc <- nil
			}()
			for off := 0; off < size; off += chunk {
				window <- s.as.Root.RequestFuture(pid, &wrapperspb.BytesValue{Value: data[off : off+chunk]}, time.Minute)
			}
			close(window)
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDestination256MiB is what a pull's destination costs apart
// from the transport: 256 MiB copied into a new buffer (as Fetch returns;
// its pages are faulted in and cleared, or cleared by the allocator when
// it reuses freed memory) against into a kept one (as FetchRange into the
// previous pull's buffer). Both transports pay it alike.
func BenchmarkDestination256MiB(b *testing.B) {
	const size = 256 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	for _, fresh := range []bool{true, false} {
		name := "new"
		if !fresh {
			name = "kept"
		}
		b.Run(name, func(b *testing.B) {
			kept := make([]byte, size)
			copy(kept, data)
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				dst := kept
				if fresh {
					dst = make([]byte, size)
				}
				copy(dst, data)
				benchSink = dst
			}
			b.StopTimer()
			benchSink = nil
		})
	}
}

// benchSink keeps a benchmark's result alive.
var benchSink []byte

// BenchmarkBulkNewConnection fetches 1 KiB on a fresh connection each
// time: what a dial costs, and what the member handshake adds to it.
func BenchmarkBulkNewConnection(b *testing.B) {
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"no_key", nil}, {"key", []byte("bench key")}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := Start(Config{Secret: tc.secret, Logger: DiscardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Stop()
			ctx := context.Background()
			data := make([]byte, 1024)
			for i := 0; i < b.N; i++ {
				if _, err := s.Bulk().Fetch(ctx, s.Bulk().Offer(data, 1, time.Minute)); err != nil {
					b.Fatal(err)
				}
				dropIdle(s.Bulk())
			}
		})
	}
}

// dropIdle closes the client connections b keeps for reuse.
func dropIdle(b *Bulk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for addr, cs := range b.idle {
		for _, c := range cs {
			c.Close()
		}
		delete(b.idle, addr)
	}
}

// BenchmarkBulkReaders is the transport under a weight publish: one offer
// of 40 MiB pulled at once by 1 and by 3 peer processes (each fetches the
// whole payload into a new buffer; "view": FetchView, a read-only view).
// On one host an offer of several readers, or one viewed, is copied once
// into a segment the readers read or map; RLNODE_BULK_TCP=1 gives
// loopback TCP.
func BenchmarkBulkReaders(b *testing.B) {
	s, err := Start(Config{Secret: []byte("bench key"), Logger: DiscardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	const size = 40 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	var peers []*peerProc
	for range 3 {
		peers = append(peers, startPeer(b, "RLNODE_ACTOR_SECRET=bench key"))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		readers int
		view    bool
	}{{1, false}, {3, false}, {1, true}, {3, true}} {
		readers := tc.readers
		name := fmt.Sprintf("readers=%d", readers)
		if tc.view {
			name += "/view"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for i := -1; i < b.N; i++ { // i = -1 warms the connections
				if i == 0 {
					b.ResetTimer()
				}
				ref := s.Bulk().Offer(data, readers, time.Minute)
				errs := make(chan error, readers)
				for _, p := range peers[:readers] {
					go func() {
						got, err := CallAs[Pong](ctx, s, Ref{Name: "fetcher", Address: p.addr, ID: "a/fetcher"}, FetchOffer{Ref: ref, View: tc.view})
						if err == nil && got.Len != size {
							err = fmt.Errorf("peer got %d bytes", got.Len)
						}
						errs <- err
					}()
				}
				for range readers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
