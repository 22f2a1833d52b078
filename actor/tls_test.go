package actor

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func tlsFilesIn(dir string) *TLSFiles {
	return &TLSFiles{CertFile: filepath.Join(dir, "node.pem"), KeyFile: filepath.Join(dir, "node.key"), CAFile: filepath.Join(dir, "ca.pem")}
}

// writeTestPKI writes a CA and a node certificate for 127.0.0.1 into dir.
func writeTestPKI(t *testing.T, dir string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rlnode test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rlnode node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("node.pem", "CERTIFICATE", der)
	write("node.key", "EC PRIVATE KEY", keyDER)
}

func TestTLSTransport(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir)
	p := startPeer(t, "RLNODE_ACTOR_TLS_DIR="+dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := Start(Config{TLS: tlsFilesIn(dir), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if got, err := CallAs[Pong](ctx, s, p.ref("peer"), Ping{N: 4}); err != nil || got.N != 4 {
		t.Fatalf("call over TLS: %+v, %v", got, err)
	}
	big := bytes.Repeat([]byte("w"), 2<<20) // over the inline limit: bulk path, also TLS
	if e, err := CallAs[Echo](ctx, s, p.ref("peer"), Echo{Payload: big}); err != nil || !bytes.Equal(e.Payload, big) {
		t.Fatalf("bulk over TLS: %v", err)
	}

	// A node with a certificate from another CA is refused.
	other := t.TempDir()
	writeTestPKI(t, other)
	s2, err := Start(Config{TLS: tlsFilesIn(other), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	short, cancel2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel2()
	if _, err := s2.Call(short, p.ref("peer"), Ping{N: 1}); err == nil {
		t.Fatal("a node with a foreign certificate got an answer")
	}
	// So is a node without TLS.
	s3, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Stop()
	short3, cancel3 := context.WithTimeout(ctx, 3*time.Second)
	defer cancel3()
	if _, err := s3.Call(short3, p.ref("peer"), Ping{N: 1}); err == nil {
		t.Fatal("a plaintext node got an answer")
	}
	// Bad TLS files are a clear error at start.
	_, err = Start(Config{TLS: &TLSFiles{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: "x", CAFile: "y"}, Logger: DiscardLogger()})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("missing.pem")) {
		t.Fatalf("missing cert: %v", err)
	}
}
