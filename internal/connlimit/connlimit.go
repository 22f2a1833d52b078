// Package connlimit caps the connections one remote address may hold open
// on a listening port, so that one peer cannot take every descriptor of a
// node. An address is counted with its group (addrgroup: an IPv6 address
// with its /64). It owns counting only; listeners close what it refuses.
package connlimit

import (
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/rlnode/rlnode/internal/addrgroup"
	"github.com/rlnode/rlnode/internal/ratelog"
)

// Limits are the caps per remote address (its IP, and an IPv6 one's /64:
// ports and the addresses of one's own /64 are free for an attacker to
// vary; see addrgroup). A connection is unproven from accept until it has
// shown that it may stay (a member handshake); Unproven caps those, Total
// caps every open connection. Zero means no cap.
type Limits struct {
	Unproven int
	Total    int
}

// Gate counts open connections by remote address group (addrgroup.Of).
// It is safe for concurrent use.
type Gate struct {
	lim    Limits
	mu     sync.Mutex
	byAddr map[string]*count // by addrgroup.Of; an entry lives while it counts a connection
}

type count struct{ unproven, total int }

// New returns a gate enforcing lim.
func New(lim Limits) *Gate { return &Gate{lim: lim, byAddr: map[string]*count{}} }

// Slot is one admitted connection's place in the count. Its methods may be
// called more than once and from any goroutine.
type Slot struct {
	g      *Gate
	key    string
	mu     sync.Mutex
	proven bool
	done   bool
}

// Admit counts a new connection from addr as unproven, or refuses it with
// an error naming addr's group and the cap it would exceed.
func (g *Gate) Admit(addr net.Addr) (*Slot, error) {
	key := addrgroup.Of(addr)
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.byAddr[key]
	if c == nil {
		c = &count{}
		g.byAddr[key] = c
	}
	if g.lim.Total > 0 && c.total >= g.lim.Total {
		return nil, fmt.Errorf("%s already holds %d connections (%s)", key, c.total, capName(key))
	}
	if g.lim.Unproven > 0 && c.unproven >= g.lim.Unproven {
		return nil, fmt.Errorf("%s already holds %d connections that have not proven membership (%s)", key, c.unproven, capName(key))
	}
	c.unproven++
	c.total++
	return &Slot{g: g, key: key}, nil
}

// Proven moves the connection from the unproven count to the proven ones.
func (s *Slot) Proven() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proven || s.done {
		return
	}
	s.proven = true
	s.g.mu.Lock()
	s.g.byAddr[s.key].unproven--
	s.g.mu.Unlock()
}

// Release takes the connection out of the count (it closed).
func (s *Slot) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return
	}
	s.done = true
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	c := s.g.byAddr[s.key]
	if !s.proven {
		c.unproven--
	}
	if c.total--; c.total == 0 {
		delete(s.g.byAddr, s.key)
	}
}

func capName(key string) string {
	if addrgroup.IsGroup(key) {
		return fmt.Sprintf("the cap per address; an IPv6 one counts with its /%d", addrgroup.IPv6Prefix)
	}
	return "the cap per address"
}

// Count returns the open and the unproven connections from the address
// group key (addrgroup.Of: "192.0.2.7", "2001:db8:1:2::/64").
func (g *Gate) Count(key string) (total, unproven int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.byAddr[key]; c != nil {
		return c.total, c.unproven
	}
	return 0, 0
}

// Conn is a connection that releases its slot when closed.
type Conn struct {
	net.Conn
	Slot *Slot
}

// Close closes the connection and releases its slot.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.Slot.Release()
	return err
}

// Listener caps the connections each remote address holds open on l: a
// connection over the cap is closed at once and Accept waits for the
// next. The connections it returns release their place when closed.
type Listener struct {
	net.Listener
	Gate *Gate
	// Refused, when set, is told of each connection closed for the cap
	// (it must not block: Accept waits for it).
	Refused func(addr net.Addr, err error)
}

// LogRefused sets Refused to warn on log, under msg, of each connection
// closed for the cap, naming its peer; a flood of them (one peer opening
// connection after connection) is rate-limited by ratelog.
func (l *Listener) LogRefused(log *slog.Logger, msg string) {
	var warn ratelog.Limiter
	l.Refused = func(addr net.Addr, err error) {
		warn.Warn(log, msg, "peer", addr.String(), "err", err)
	}
}

// Limit wraps l with a cap of total open connections per remote address
// (group).
func Limit(l net.Listener, total int) *Listener {
	return &Listener{Listener: l, Gate: New(Limits{Total: total})}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		slot, err := l.Gate.Admit(c.RemoteAddr())
		if err != nil {
			if l.Refused != nil {
				l.Refused(c.RemoteAddr(), err)
			}
			c.Close()
			continue
		}
		slot.Proven() // the cap is on open connections, not on a handshake
		return &Conn{Conn: c, Slot: slot}, nil
	}
}
