package actor

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rlnode/rlnode/internal/connlimit"
	"google.golang.org/grpc/credentials"
)

// handshakeTimeout bounds a connection's setup (TLS and the member
// handshake) on the actor transport and the bulk path.
const handshakeTimeout = 10 * time.Second

// connectTries is how many times a connection to a peer is tried before
// the calls waiting for it fail (ErrConnLost).
const connectTries = 3

// memberCreds are the actor transport's gRPC credentials: the connection
// cap per remote address, then TLS when configured, then the member
// handshake when the node has a secret. With neither, the transport is in
// the clear and open, as gRPC's insecure credentials are.
type memberCreds struct {
	proof *memberProof                     // nil: no member handshake
	tls   credentials.TransportCredentials // nil: no TLS
	gate  *connlimit.Gate                  // server side only
	onErr func(peer string, err error)     // a refused connection, for the log
}

type memberAuthInfo struct{ credentials.CommonAuthInfo }

func (memberAuthInfo) AuthType() string { return "rlnode-member" }

func (m *memberCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info := raw, credentials.AuthInfo(memberAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}})
	if m.tls != nil {
		var err error
		if conn, info, err = m.tls.ClientHandshake(ctx, authority, raw); err != nil {
			return nil, nil, err
		}
	}
	if m.proof != nil {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(handshakeTimeout)
		}
		_ = raw.SetDeadline(deadline)
		err := m.proof.client(conn)
		_ = raw.SetDeadline(time.Time{})
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("actor transport to %s: %w", authority, err)
		}
	}
	return conn, info, nil
}

func (m *memberCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	peer := raw.RemoteAddr().String()
	slot, err := m.gate.Admit(raw.RemoteAddr())
	if err != nil {
		m.onErr(peer, err)
		return nil, nil, fmt.Errorf("actor transport: refusing %s: %w", peer, err)
	}
	conn, info := raw, credentials.AuthInfo(memberAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}})
	fail := func(err error) (net.Conn, credentials.AuthInfo, error) {
		slot.Release()
		m.onErr(peer, err)
		return nil, nil, err
	}
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	if m.tls != nil {
		if conn, info, err = m.tls.ServerHandshake(raw); err != nil {
			return fail(err)
		}
	}
	if m.proof != nil {
		if err := m.proof.server(conn); err != nil {
			conn.Close()
			return fail(err)
		}
	}
	slot.Proven()
	// gRPC clears the deadline once its own setup on the connection is done.
	return &connlimit.Conn{Conn: conn, Slot: slot}, info, nil
}

func (m *memberCreds) Info() credentials.ProtocolInfo {
	if m.tls != nil {
		return m.tls.Info()
	}
	return credentials.ProtocolInfo{SecurityProtocol: "rlnode-member"}
}

func (m *memberCreds) Clone() credentials.TransportCredentials {
	c := *m
	if m.tls != nil {
		c.tls = m.tls.Clone()
	}
	return &c
}

// OverrideServerName is deprecated in gRPC; it is passed on to TLS.
func (m *memberCreds) OverrideServerName(name string) error {
	if m.tls != nil {
		return m.tls.OverrideServerName(name)
	}
	return nil
}
