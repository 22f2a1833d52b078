// Package bodyslot admits HTTP request bodies to be read a few at a time,
// so that clients sending large ones at once hold a few bodies' memory, and
// keeps slow senders from holding those places: one address may hold only
// some of them, and a body that arrives slower than a minimum rate is cut
// off. It owns the counting and the read deadlines; handlers answer what it
// refuses.
package bodyslot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/addrgroup"
)

// Defaults for a Gate's zero fields.
const (
	DefaultGrace   = 5 * time.Second
	DefaultMinRate = 16 << 10 // bytes per second
	DefaultMaxTime = 30 * time.Second
)

// ErrTooSlow is returned by a body read when the sender fell behind the
// gate's minimum rate or past its time.
var ErrTooSlow = errors.New("request body arrives too slowly")

// Gate counts the bodies being read (and then parsed). A body holds its
// place from Take to Release, and its share of its address's places until
// it has been read to its end. Its zero value is ready to use; fields must
// not change once it is in use.
type Gate struct {
	// Total bounds the bodies read at once (default min(GOMAXPROCS, 4));
	// PerAddr, those of one remote IP, an IPv6 one with its /64
	// (addrgroup; default Total/2, at least 1).
	Total, PerAddr int
	// A body must arrive at MinRate bytes a second on average once Grace
	// has passed since its place was taken, and whole within MaxTime.
	Grace   time.Duration
	MinRate int64
	MaxTime time.Duration

	once    sync.Once
	mu      sync.Mutex
	n       int
	byAddr  map[string]int // by addrgroup.OfHostPort; an entry lives while it counts a body
	changed chan struct{}  // closed and replaced when a place frees
}

func (g *Gate) init() {
	g.once.Do(func() {
		if g.Total <= 0 {
			g.Total = max(1, min(runtime.GOMAXPROCS(0), 4))
		}
		if g.PerAddr <= 0 {
			g.PerAddr = max(1, g.Total/2)
		}
		if g.Grace <= 0 {
			g.Grace = DefaultGrace
		}
		if g.MinRate <= 0 {
			g.MinRate = DefaultMinRate
		}
		if g.MaxTime <= 0 {
			g.MaxTime = DefaultMaxTime
		}
		g.byAddr = map[string]int{}
		g.changed = make(chan struct{})
	})
}

// Place is one body's place, from Take to Release.
type Place struct {
	g    *Gate
	addr string
	mu   sync.Mutex
	read bool // the body is in: the address's share is given back
	done bool
}

// Take waits for a place to read r's body in, within the caps; ok is
// false when the client left first.
func (g *Gate) Take(r *http.Request) (p *Place, ok bool) {
	g.init()
	addr := addrgroup.OfHostPort(r.RemoteAddr)
	for {
		g.mu.Lock()
		if g.n < g.Total && g.byAddr[addr] < g.PerAddr {
			g.n++
			g.byAddr[addr]++
			g.mu.Unlock()
			return &Place{g: g, addr: addr}, true
		}
		wait := g.changed
		g.mu.Unlock()
		select {
		case <-wait:
		case <-r.Context().Done():
			return nil, false
		}
	}
}

// bodyRead gives back the address's share once the body is in: parsing
// it takes no time a sender controls.
func (p *Place) bodyRead() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.read || p.done {
		return
	}
	p.read = true
	p.g.free(p.addr, false)
}

// Release gives the place back; it may be called more than once.
func (p *Place) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	if !p.read {
		p.g.free(p.addr, false)
	}
	p.g.free("", true)
}

func (g *Gate) free(addr string, total bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if total {
		g.n--
	} else if g.byAddr[addr]--; g.byAddr[addr] == 0 {
		delete(g.byAddr, addr)
	}
	close(g.changed)
	g.changed = make(chan struct{})
}

// Body is r's body, read under the gate's rate and time: the connection's
// read deadline follows the bytes received, and a read past it fails with
// ErrTooSlow. It takes no place (Place.Body does).
func (g *Gate) Body(w http.ResponseWriter, r *http.Request) io.ReadCloser {
	g.init()
	return &body{g: g, r: r.Body, rc: http.NewResponseController(w), start: time.Now(), note: noteOf(r)}
}

// Watch returns r with a note in its context that r's body (made by Body
// after this) keeps its read deadline and failure in, for Failure. A
// reverse proxy needs it: when the deadline passes, net/http cancels the
// request's context as the read fails, and the proxy's transport may
// report that cancellation before it sees the read's ErrTooSlow.
func Watch(r *http.Request) *http.Request {
	if noteOf(r) != nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), noteKey{}, &note{}))
}

// Failure is the ErrTooSlow error of the body of the request whose context
// ctx is (Watch), once its read failed or its read deadline has passed;
// nil otherwise.
func Failure(ctx context.Context) error {
	n, _ := ctx.Value(noteKey{}).(*note)
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.err != nil:
		return n.err
	case !n.deadline.IsZero() && !time.Now().Before(n.deadline):
		return fmt.Errorf("%w: %d bytes by its read deadline", ErrTooSlow, n.got)
	}
	return nil
}

type noteKey struct{}

type note struct {
	mu       sync.Mutex
	deadline time.Time // zero once the body is in
	got      int64
	err      error
}

func noteOf(r *http.Request) *note {
	n, _ := r.Context().Value(noteKey{}).(*note)
	return n
}

func (n *note) set(deadline time.Time, got int64, err error) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deadline, n.got = deadline, got
	if err != nil && n.err == nil {
		n.err = err
	}
}

// Body is Gate.Body for the place's request; read to its end, it gives
// back the address's share of places.
func (p *Place) Body(w http.ResponseWriter, r *http.Request) io.ReadCloser {
	return &body{g: p.g, r: r.Body, rc: http.NewResponseController(w), start: time.Now(), end: p.bodyRead, note: noteOf(r)}
}

type body struct {
	g     *Gate
	r     io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	got   int64
	err   error  // the first error read: the deadline is left alone after it
	end   func() // called at the body's end, when set
	note  *note  // Watch's, when set
}

func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		// After the end net/http reads the connection in the background
		// with no deadline (to see the client leave); setting one again
		// would cancel the request when it passed.
		return 0, b.err
	}
	d := min(b.g.Grace+time.Duration(float64(b.got)/float64(b.g.MinRate)*float64(time.Second)), b.g.MaxTime)
	deadline := b.start.Add(d)
	b.note.set(deadline, b.got, nil)
	b.rc.SetReadDeadline(deadline)
	n, err := b.r.Read(p)
	b.got += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.err = fmt.Errorf("%w: %d bytes in %v (at least %d bytes a second after %v, all within %v)",
			ErrTooSlow, b.got, time.Since(b.start).Round(time.Millisecond), b.g.MinRate, b.g.Grace, b.g.MaxTime)
		b.note.set(deadline, b.got, b.err)
		return n, b.err
	}
	b.err = err
	if err != nil {
		b.note.set(time.Time{}, b.got, nil) // in, or failed otherwise: no deadline to pass
	}
	if err == io.EOF && b.end != nil {
		b.end()
	}
	return n, err
}

func (b *body) Close() error { return b.r.Close() }
