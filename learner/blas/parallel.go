package blas

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Parallel products are cut into tasks that the calling goroutine and a
// pool of long-lived helper goroutines claim from a shared counter, so a
// slow or busy core delays only the tasks it holds. Helpers are started on
// demand and then park on a channel; a call never waits for a helper that
// has not yet picked it up.

// minTaskWork is the fewest multiply-adds worth a task of its own: below
// about 2^20 (≈10 µs on one core) handing work to another goroutine costs
// more than it saves.
const minTaskWork = 1 << 20

var threadSetting atomic.Int64

// SetThreads sets how many goroutines (the caller included) one product may
// use and returns the previous setting. n ≤ 0 means runtime.GOMAXPROCS(0),
// which is the default.
func SetThreads(n int) int {
	return int(threadSetting.Swap(int64(n)))
}

// Threads reports how many goroutines one product may use.
func Threads() int {
	if n := threadSetting.Load(); n > 0 {
		return int(n)
	}
	return runtime.GOMAXPROCS(0)
}

// gemmCall is one parallel Sgemm or SgemmBatched call shared by the
// goroutines working on it. It is recycled once the caller and every helper
// it was handed to have let go of it (refs).
type gemmCall struct {
	g    gemmArgs
	kern *microKernel

	// Single product: a tm×tn grid of rowChunk×colChunk blocks of C.
	tn, rowChunk, colChunk int
	// Batched product (batch > 0): task t is product t.
	batch, strideA, strideB, strideC int

	ntasks int64
	next   atomic.Int64
	wg     sync.WaitGroup
	refs   atomic.Int32
}

func (c *gemmCall) runTask(t int, buf []float32) {
	if c.batch > 0 {
		g := c.g
		g.a = g.a[t*c.strideA:]
		g.b = g.b[t*c.strideB:]
		g.c = g.c[t*c.strideC:]
		g.block(c.kern, buf, 0, g.m, 0, g.n)
		return
	}
	ti, tj := t/c.tn, t%c.tn
	i0, j0 := ti*c.rowChunk, tj*c.colChunk
	i1, j1 := min(c.g.m, i0+c.rowChunk), min(c.g.n, j0+c.colChunk)
	if i0 < i1 && j0 < j1 {
		c.g.block(c.kern, buf, i0, i1, j0, j1)
	}
}

// work claims and runs tasks until none are left.
func (c *gemmCall) work() {
	buf := getBuf(c.kern.bufLen())
	for {
		t := c.next.Add(1) - 1
		if t >= c.ntasks {
			break
		}
		c.runTask(int(t), buf.f)
		c.wg.Done()
	}
	putBuf(buf)
}

func (c *gemmCall) release() {
	if c.refs.Add(-1) == 0 {
		c.g, c.kern = gemmArgs{}, nil // drop references to the caller's slices
		select {
		case callFree <- c:
		default:
		}
	}
}

// run executes all tasks of c with up to threads goroutines and returns
// when they are done.
func (c *gemmCall) run(threads int) {
	helpers := int(min(int64(threads), c.ntasks)) - 1
	startHelpers(helpers)
	c.next.Store(0)
	c.wg.Add(int(c.ntasks))
	c.refs.Store(int32(1 + helpers))
	for range helpers {
		select {
		case helperQueue <- c:
		default:
			c.refs.Add(-1)
		}
	}
	c.work()
	c.wg.Wait()
	c.release()
}

var (
	helperQueue = make(chan *gemmCall, 256)
	helpersMu   sync.Mutex
	helpersN    atomic.Int64
)

func startHelpers(n int) {
	if int(helpersN.Load()) >= n {
		return
	}
	helpersMu.Lock()
	defer helpersMu.Unlock()
	for int(helpersN.Load()) < n {
		go helper()
		helpersN.Add(1)
	}
}

func helper() {
	for c := range helperQueue {
		c.work()
		c.release()
	}
}

// Free lists. Unlike sync.Pool they are not emptied by the garbage
// collector, so a training loop that allocates heavily elsewhere still finds
// its packing buffers (a few MiB each) here.
type packBuf struct{ f []float32 }

var (
	bufFree  = make(chan *packBuf, 64)
	callFree = make(chan *gemmCall, 64)
)

func getBuf(n int) *packBuf {
	select {
	case b := <-bufFree:
		if len(b.f) >= n {
			return b
		}
	default:
	}
	return &packBuf{f: make([]float32, n)}
}

func putBuf(b *packBuf) {
	select {
	case bufFree <- b:
	default:
	}
}

func getCall() *gemmCall {
	select {
	case c := <-callFree:
		return c
	default:
		return new(gemmCall)
	}
}
