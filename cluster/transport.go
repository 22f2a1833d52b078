package cluster

import (
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rlnode/rlnode/internal/connlimit"
)

// cappedTransport is memberlist's network transport with a cap on the TCP
// streams per remote address: streams beyond it are closed before
// memberlist reads them. memberlist handles a stream (a join, a push/pull,
// a large broadcast) and closes it, within TCPTimeout; members need a few
// at a time, so the cap (DefaultGossipConnsPerAddr) only stops a peer
// holding descriptors.
type cappedTransport struct {
	*memberlist.NetTransport
	gate    *connlimit.Gate
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
	refused func(peer string, err error)
	packets chan *memberlist.Packet
	gone    chan struct{} // closed once the listeners have exited
	goneOne sync.Once
	// cut, set by tests (Node.cutOff), drops every packet and stream in
	// either direction, as a network partition around the node would,
	// while the node runs on.
	cut atomic.Bool
}

// errCut is what a dial of a cut-off transport fails with.
var errCut = errors.New("gossip transport cut off (test partition)")

// newGossipTransport binds memberlist's transport on host:port (port 0
// picks one free for both UDP and TCP, retried as memberlist does), with
// at most streamsPerAddr streams open per remote address.
func newGossipTransport(host string, port, streamsPerAddr int, logger *log.Logger, refused func(string, error)) (*cappedTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{host}, BindPort: port, Logger: logger}
	tries := 1
	if port == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			// memberlist formats the net error with %v: keep what it was,
			// so a caller can tell a taken port (another node there?).
			return nil, &inUseError{msg: "gossip: " + listenReason(err)}
		}
		return nil, fmt.Errorf("gossip: %s", listenReason(err))
	}
	t := &cappedTransport{NetTransport: nt, gate: connlimit.New(connlimit.Limits{Total: streamsPerAddr}),
		streams: make(chan net.Conn), done: make(chan struct{}), refused: refused,
		packets: make(chan *memberlist.Packet), gone: make(chan struct{})}
	go t.admit()
	go t.forwardPackets()
	return t, nil
}

// forwardPackets hands memberlist the packets received, less those that
// arrive while the transport is cut off. Once shutting down it drops them
// instead: the UDP listener, which Shutdown waits for, must not block
// handing over a packet nobody reads.
func (t *cappedTransport) forwardPackets() {
	in := t.NetTransport.PacketCh()
	for {
		select {
		case <-t.gone:
			return
		case p := <-in:
			if t.cut.Load() {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
			}
		}
	}
}

// PacketCh returns the packets received.
func (t *cappedTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// WriteTo and WriteToAddress send a packet; one sent while cut off is
// lost on the way, silently, as on a network.
func (t *cappedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *cappedTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.cut.Load() {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, a)
}

// DialTimeout and DialAddressTimeout open a stream; while cut off the
// dial fails.
func (t *cappedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (t *cappedTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.cut.Load() {
		return nil, errCut
	}
	return t.NetTransport.DialAddressTimeout(a, timeout)
}

func (t *cappedTransport) admit() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case <-t.done:
			// The TCP listener, which Shutdown waits for, must not block
			// handing over a stream nobody reads: close what still comes
			// until it has stopped (a node stopping while a peer opened a
			// stream hung in Stop for good).
			for {
				select {
				case <-t.gone:
					return
				case c := <-in:
					c.Close()
				}
			}
		case c := <-in:
			if t.cut.Load() {
				c.Close()
				continue
			}
			slot, err := t.gate.Admit(c.RemoteAddr())
			if err != nil {
				t.refused(c.RemoteAddr().String(), err)
				c.Close()
				continue
			}
			select {
			case t.streams <- &connlimit.Conn{Conn: c, Slot: slot}:
			case <-t.done:
				c.Close()
				slot.Release()
				return
			}
		}
	}
}

// StreamCh returns the admitted streams.
func (t *cappedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops admitting streams and shuts the transport down.
func (t *cappedTransport) Shutdown() error {
	t.once.Do(func() { close(t.done) })
	err := t.NetTransport.Shutdown()
	t.goneOne.Do(func() { close(t.gone) })
	return err
}

// listenReason is memberlist's listen error without its own preamble
// ("failed to start TCP listener on "HOST" port N: listen tcp HOST:N: …"):
// the net package's part names the address and says what failed.
// inUseError is a gossip listener refused for a port something else
// holds; it is syscall.EADDRINUSE to errors.Is.
type inUseError struct{ msg string }

func (e *inUseError) Error() string { return e.msg }
func (e *inUseError) Unwrap() error { return syscall.EADDRINUSE }

func listenReason(err error) string {
	msg := err.Error()
	for _, op := range []string{"listen tcp", "listen udp"} {
		if i := strings.Index(msg, op); i > 0 {
			return msg[i:]
		}
	}
	return msg
}
