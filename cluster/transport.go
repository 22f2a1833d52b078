package cluster

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"

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
}

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
		return nil, fmt.Errorf("gossip: %s", listenReason(err))
	}
	t := &cappedTransport{NetTransport: nt, gate: connlimit.New(connlimit.Limits{Total: streamsPerAddr}),
		streams: make(chan net.Conn), done: make(chan struct{}), refused: refused}
	go t.admit()
	return t, nil
}

func (t *cappedTransport) admit() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case <-t.done:
			return
		case c := <-in:
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
	return t.NetTransport.Shutdown()
}

// listenReason is memberlist's listen error without its own preamble
// ("failed to start TCP listener on "HOST" port N: listen tcp HOST:N: …"):
// the net package's part names the address and says what failed.
func listenReason(err error) string {
	msg := err.Error()
	for _, op := range []string{"listen tcp", "listen udp"} {
		if i := strings.Index(msg, op); i > 0 {
			return msg[i:]
		}
	}
	return msg
}
