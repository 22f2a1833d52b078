package actor

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
)

// Membership is proven, not claimed: on a node with a Secret (the cluster
// key), every connection to the actor transport and the bulk path starts
// with a challenge-response in both directions before anything else on it
// is read. Both ends prove they hold the key by an HMAC-SHA256 over both
// ends' fresh nonces, keyed with a key derived from the cluster key
// (HKDF-SHA256), so a recorded handshake cannot be replayed and one side's
// proof cannot be reflected as the other's:
//
//	client → server  "RLM1", client nonce (32 bytes)
//	server → client  server nonce (32), HMAC(k, "rlnode server" ‖ Nc ‖ Ns)
//	client → server  HMAC(k, "rlnode client" ‖ Nc ‖ Ns)
//	server → client  one byte 0: accepted (else the server closes)
//
// Only the connection's setup costs anything; messages after it travel as
// before. The handshake authenticates the connection, it does not encrypt
// it: mutual TLS (Config.TLS) does, and runs underneath it.

const (
	proofMagic    = "RLM1"
	proofNonceLen = 32
	proofMACLen   = sha256.Size
	proofKeyInfo  = "rlnode actor transport member proof v1"
)

// ErrNotMember means the other end of a connection did not prove that it
// holds the cluster key.
var ErrNotMember = errors.New("peer did not prove the cluster key")

// memberProof runs the handshake with a key derived from the cluster key.
type memberProof struct{ key []byte }

func newMemberProof(secret []byte) (*memberProof, error) {
	if len(secret) == 0 {
		return nil, nil
	}
	k, err := hkdf.Key(sha256.New, secret, nil, proofKeyInfo, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("derive the transport key: %w", err)
	}
	return &memberProof{key: k}, nil
}

func (p *memberProof) mac(label string, nc, ns []byte) []byte {
	h := hmac.New(sha256.New, p.key)
	h.Write([]byte(label))
	h.Write(nc)
	h.Write(ns)
	return h.Sum(nil)
}

// client proves membership to the server at the other end of c and checks
// the server's proof. The caller bounds it with a deadline on c.
func (p *memberProof) client(c net.Conn) error {
	hello := make([]byte, len(proofMagic)+proofNonceLen)
	copy(hello, proofMagic)
	nc := hello[len(proofMagic):]
	_, _ = rand.Read(nc)
	if _, err := c.Write(hello); err != nil {
		return fmt.Errorf("member handshake: send challenge: %w", err)
	}
	var resp [proofNonceLen + proofMACLen]byte
	if _, err := io.ReadFull(c, resp[:]); err != nil {
		return fmt.Errorf("member handshake: read the server's proof (closed: a node without the cluster key, or another key?): %w", err)
	}
	ns := resp[:proofNonceLen]
	if !hmac.Equal(resp[proofNonceLen:], p.mac("rlnode server", nc, ns)) {
		return fmt.Errorf("member handshake: server: %w", ErrNotMember)
	}
	if _, err := c.Write(p.mac("rlnode client", nc, ns)); err != nil {
		return fmt.Errorf("member handshake: send proof: %w", err)
	}
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil || ok[0] != 0 {
		return fmt.Errorf("member handshake: the server refused this node's proof: %w", ErrNotMember)
	}
	return nil
}

// errNoHello: the connection closed before its first byte.
var errNoHello = errors.New("closed before the challenge")

// server checks the client's proof and proves membership back. The caller
// bounds it with a deadline on c.
func (p *memberProof) server(c net.Conn) error {
	var hello [len(proofMagic) + proofNonceLen]byte
	if _, err := io.ReadFull(c, hello[:len(proofMagic)]); err != nil {
		if errors.Is(err, io.EOF) { // not one byte: a liveness probe, or a client that left
			return fmt.Errorf("member handshake: %w", errNoHello)
		}
		return fmt.Errorf("member handshake: read challenge: %w", err)
	}
	if string(hello[:len(proofMagic)]) != proofMagic {
		return fmt.Errorf("member handshake: no challenge (%q): %w", hello[:len(proofMagic)], ErrNotMember)
	}
	if _, err := io.ReadFull(c, hello[len(proofMagic):]); err != nil {
		return fmt.Errorf("member handshake: read challenge: %w", err)
	}
	nc := hello[len(proofMagic):]
	resp := make([]byte, proofNonceLen, proofNonceLen+proofMACLen)
	_, _ = rand.Read(resp)
	ns := resp[:proofNonceLen]
	if _, err := c.Write(append(resp, p.mac("rlnode server", nc, ns)...)); err != nil {
		return fmt.Errorf("member handshake: send proof: %w", err)
	}
	var proof [proofMACLen]byte
	if _, err := io.ReadFull(c, proof[:]); err != nil {
		return fmt.Errorf("member handshake: read the client's proof: %w", err)
	}
	if !hmac.Equal(proof[:], p.mac("rlnode client", nc, ns)) {
		return fmt.Errorf("member handshake: client: %w", ErrNotMember)
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return fmt.Errorf("member handshake: accept: %w", err)
	}
	return nil
}
