package actor

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// TLSFiles names the PEM files for mutual TLS on the actor transport and the
// bulk path: this node's certificate and key, and the CA that signed every
// node's certificate. Certificates must name the node's advertised host
// (IP or DNS SAN).
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

// load builds the server and client TLS configs.
func (f *TLSFiles) load() (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		// Name the file that could not be read once, and which it is.
		what := "cert"
		if pe.Path == f.KeyFile {
			what = "key"
		}
		return nil, nil, fmt.Errorf("TLS: %s %s: %w", what, pe.Path, pe.Err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("TLS: load cert %s / key %s: %w", f.CertFile, f.KeyFile, err)
	}
	pem, err := os.ReadFile(f.CAFile)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return nil, nil, fmt.Errorf("TLS: CA %s: %w", f.CAFile, pe.Err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("TLS: read CA %s: %w", f.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("TLS: CA %s: no PEM certificate found", f.CAFile)
	}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}
	return server, client, nil
}
