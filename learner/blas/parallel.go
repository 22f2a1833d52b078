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
//
// One Sgemm call runs one phase per column panel of op(B): the first tasks
// of a phase pack the panel (shared by all), the rest wait for that and
// then each compute a block of C, packing their own rows of op(A) where
// the kernel does not read them in place. A skinny Sgemm (skinny.go) runs
// one phase of column strips. One SgemmBatched call runs one phase whose
// tasks are whole products.

// minTaskWork is the fewest multiply-adds worth a task of its own: below
// about 2^20 (≈10 µs on one core) handing work to another goroutine costs
// more than it saves.
const minTaskWork = 1 << 20

// tasksPerThread over-decomposes a phase so that a thread slowed by other
// load leaves its share to the others.
const tasksPerThread = 3

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

// gemmCall is one phase shared by the goroutines working on it. It is
// recycled once the caller and every helper it was handed to have let go
// of it (refs).
type gemmCall struct {
	g    gemmArgs
	kern *microKernel

	// Panel phase: nPack packing tasks, then a tm×tn grid of compute
	// tasks over the rowSlivers×colSlivers register tiles of the panel.
	p                      panel
	nPack                  int
	rowSlivers, colSlivers int
	tm, tn                 int
	packed                 sync.WaitGroup

	// Batched phase (batch > 0): task t is product t.
	batch, strideA, strideB, strideC int

	// Skinny phase (skinnyA != nil): task t computes columns
	// [t*colChunk, (t+1)*colChunk) from the copy of op(A) in skinnyA.
	skinnyA  []float32
	colChunk int

	ntasks int64
	next   atomic.Int64
	done   sync.WaitGroup
	refs   atomic.Int32
}

// taskBufs are the buffers one goroutine holds while working on a phase.
type taskBufs struct{ a, panel *packBuf }

func (c *gemmCall) runTask(t int, bufs *taskBufs) {
	if c.batch > 0 {
		g := c.g
		g.a, g.b, g.c = g.a[t*c.strideA:], g.b[t*c.strideB:], g.c[t*c.strideC:]
		if g.skinnyOK(c.kern) {
			bufs.get(c.kern, g.skinnyALen())
			g.copySkinnyA(bufs.panel.f)
			g.skinnyCols(c.kern, bufs.panel.f, bufs.a.f, 0, g.n)
			return
		}
		bufs.get(c.kern, g.panelLen(c.kern))
		g.serial(c.kern, bufs.a.f, bufs.panel.f)
		return
	}
	if c.skinnyA != nil {
		bufs.get(c.kern, 0)
		c.g.skinnyCols(c.kern, c.skinnyA, bufs.a.f, t*c.colChunk, min(c.g.n, (t+1)*c.colChunk))
		return
	}
	if t < c.nPack {
		s0, s1 := part(c.colSlivers, c.nPack, t)
		c.g.packPanel(c.kern, &c.p, s0, s1)
		c.packed.Done()
		return
	}
	t -= c.nPack
	c.packed.Wait()
	mr, nr := c.kern.mr, c.kern.nr
	r0, r1 := part(c.rowSlivers, c.tm, t/c.tn)
	s0, s1 := part(c.colSlivers, c.tn, t%c.tn)
	i1, c0, c1 := min(c.g.m, r1*mr), s0*nr, min(c.p.w, s1*nr)
	if c0 >= c1 {
		return
	}
	bufs.get(c.kern, 0)
	for i0 := r0 * mr; i0 < i1; i0 += c.kern.mc {
		c.g.computeBlock(c.kern, bufs.a.f, &c.p, i0, min(i0+c.kern.mc, i1), c0, c1)
	}
}

// get makes sure the task buffer, and a panel buffer of panelLen floats
// when panelLen > 0, are held.
func (b *taskBufs) get(kern *microKernel, panelLen int) {
	if b.a == nil {
		b.a = getBuf(&taskFree, kern.bufLen())
	}
	if panelLen > 0 && b.panel == nil {
		b.panel = getBuf(&panelFree, max(panelLen, panelBudget))
	}
}

func (b *taskBufs) put() {
	if b.a != nil {
		putBuf(&taskFree, b.a)
	}
	if b.panel != nil {
		putBuf(&panelFree, b.panel)
	}
}

// work claims and runs tasks until none are left.
func (c *gemmCall) work() {
	var bufs taskBufs
	for {
		t := c.next.Add(1) - 1
		if t >= c.ntasks {
			break
		}
		c.runTask(int(t), &bufs)
		c.done.Done()
	}
	bufs.put()
}

func (c *gemmCall) release() {
	if c.refs.Add(-1) == 0 {
		c.g, c.kern, c.p, c.skinnyA = gemmArgs{}, nil, panel{}, nil // drop the caller's slices
		select {
		case callFree <- c:
		default:
		}
	}
}

// run executes all tasks of c with up to threads goroutines and returns
// when they are done. c must not be used afterwards.
func (c *gemmCall) run(threads int) {
	helpers := int(min(int64(threads), c.ntasks)) - 1
	startHelpers(helpers)
	c.done.Add(int(c.ntasks))
	c.refs.Store(int32(1 + helpers))
	c.next.Store(0)
	for range helpers {
		select {
		case helperQueue <- c:
		default:
			c.refs.Add(-1)
		}
	}
	c.work()
	c.done.Wait()
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
	taskFree  = make(chan *packBuf, 64)
	panelFree = make(chan *packBuf, 64)
	callFree  = make(chan *gemmCall, 64)
)

func getBuf(free *chan *packBuf, n int) *packBuf {
	select {
	case b := <-*free:
		if len(b.f) >= n {
			return b
		}
	default:
	}
	return &packBuf{f: make([]float32, n)}
}

func putBuf(free *chan *packBuf, b *packBuf) {
	select {
	case *free <- b:
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
