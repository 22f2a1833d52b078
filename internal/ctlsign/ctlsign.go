// Package ctlsign signs requests to a node's control endpoint with the
// cluster key, so that a host without a node of the cluster (a laptop, a
// login host) can submit and manage jobs: whoever holds the key may join
// the cluster and run actors on it already, and a signed request proves
// that without sending the key.
//
// A request carries
//
//	Authorization: RLNODE-HMAC-SHA256 t=UNIX_SECONDS,n=NONCE,b=BODY_SHA256,s=SIGNATURE
//
// SIGNATURE is the hex HMAC-SHA256, under a key derived from the cluster
// key, of the method, the request URI (path and query), the Host, t, n
// and b (the hex SHA-256 of the body), one per line. A node takes a
// request whose t is within Window of its clock and whose nonce it has
// not seen in that window: a copy of a request, replayed, is refused, and
// so is one whose method, path, query, host or body was changed on the
// way. The signature is checked before the body is read (b carries its
// hash), so a request without the key costs the node no body bytes.
// Neither the request nor the answer is encrypted.
package ctlsign

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Scheme is the Authorization scheme of a signed request.
const Scheme = "RLNODE-HMAC-SHA256"

// Window is how far a request's time may be from the node's clock.
const Window = 5 * time.Minute

// MaxNonces bounds the nonces a Verifier remembers (those of the last
// 2×Window); past it, signed requests are refused until older ones
// expire.
const MaxNonces = 100_000

// subkey derives the signing key from the cluster key, so the key that
// encrypts gossip is not used as is for a second purpose.
func subkey(clusterKey []byte) []byte {
	m := hmac.New(sha256.New, clusterKey)
	m.Write([]byte("rlnode control request signing v1"))
	return m.Sum(nil)
}

func signature(key []byte, method, uri, host string, t int64, nonce, bodyHash string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%d\n%s\n%s", method, uri, host, t, nonce, bodyHash)
	return hex.EncodeToString(m.Sum(nil))
}

func bodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Sign sets r's Authorization header: r signed with the cluster key at
// time now. body is r's body (nil for none); r.Host, or r.URL.Host when
// empty, is the host signed, as net/http sends it.
func Sign(r *http.Request, clusterKey, body []byte, now time.Time) {
	SignHash(r, clusterKey, bodyHash(body), now)
}

// SignHash is Sign for a body given by its hex SHA-256 (a body streamed
// from a file, too large to hold in memory).
func SignHash(r *http.Request, clusterKey []byte, bodySHA256 string, now time.Time) {
	var raw [16]byte
	_, _ = rand.Read(raw[:])
	nonce := hex.EncodeToString(raw[:])
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	t := now.Unix()
	s := signature(subkey(clusterKey), r.Method, r.URL.RequestURI(), host, t, nonce, bodySHA256)
	r.Header.Set("Authorization", fmt.Sprintf("%s t=%d,n=%s,b=%s,s=%s", Scheme, t, nonce, bodySHA256, s))
}

// IsSigned says whether r claims to be signed (its Authorization names
// Scheme), whether or not the signature holds.
func IsSigned(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Authorization"), Scheme+" ")
}

// Signed is the time and nonce r's Authorization carries, for a request
// Verify took: together they name that one request (its copies, sent to
// another node, carry the same), as a node that derives a name from it
// needs.
func Signed(r *http.Request) (t time.Time, nonce string, ok bool) {
	unix, nonce, _, _, err := parse(r.Header.Get("Authorization"))
	if err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(unix, 0), nonce, true
}

// Verifier checks signed requests under one cluster key.
type Verifier struct {
	key    []byte
	now    func() time.Time
	mu     sync.Mutex
	nonces map[string]int64 // nonce → the unix second it may be forgotten
	sweep  int64
}

// NewVerifier checks requests signed with clusterKey; now is the clock
// (nil: time.Now).
func NewVerifier(clusterKey []byte, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{key: subkey(clusterKey), now: now, nonces: map[string]int64{}}
}

// ErrRefused is what every refusal of Verify wraps.
var ErrRefused = errors.New("signed request refused")

// Verify checks r's signature and then reads its body (at most maxBody
// bytes), checks it against the hash signed and puts it back for the
// handler. A request that fails is refused with an error saying why; one
// whose signature does not hold has none of its body read.
func (v *Verifier) Verify(r *http.Request, maxBody int64) error {
	sg, err := v.checkSignature(r, maxBody)
	if err != nil {
		return err
	}
	var body []byte
	if r.Body != nil {
		body, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			return fmt.Errorf("%w: reading its body: %v", ErrRefused, err)
		}
		if int64(len(body)) > maxBody {
			return fmt.Errorf("%w: body over %d bytes", ErrRefused, maxBody)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if bodyHash(body) != sg.hash {
		return fmt.Errorf("%w: its body is not the one signed (changed on the way)", ErrRefused)
	}
	return v.takeNonce(sg)
}

// VerifyStream checks r's signature and takes its nonce, reading none of
// its body: the handler reads the body (of at most maxBody bytes) as it
// comes, and the read that reaches its end fails, with an error wrapping
// ErrRefused, unless the bytes read are the ones signed. For an upload
// too large to hold in memory: the handler must not act on the body
// before its last read succeeded.
func (v *Verifier) VerifyStream(r *http.Request, maxBody int64) error {
	sg, err := v.checkSignature(r, maxBody)
	if err != nil {
		return err
	}
	if err := v.takeNonce(sg); err != nil {
		return err
	}
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	r.Body = &signedBody{rc: body, want: sg.hash, h: sha256.New(), left: maxBody}
	return nil
}

// signedBody hashes a body as it is read and fails its last read when the
// hash is not the one signed, or when it runs past its bound.
type signedBody struct {
	rc   io.ReadCloser
	want string
	h    hash.Hash
	left int64
	err  error
}

func (b *signedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	b.left -= int64(n)
	switch {
	case b.left < 0:
		b.err = fmt.Errorf("%w: body over its bound", ErrRefused)
		return 0, b.err
	case errors.Is(err, io.EOF):
		if hex.EncodeToString(b.h.Sum(nil)) != b.want {
			b.err = fmt.Errorf("%w: its body is not the one signed (changed on the way)", ErrRefused)
			return n, b.err
		}
	}
	return n, err
}

func (b *signedBody) Close() error { return b.rc.Close() }

// signedAs is what a request's signature names: its time, nonce and
// body hash.
type signedAs struct {
	t           int64
	nonce, hash string
}

// checkSignature checks r's time and signature, and that its declared
// length is within maxBody; it returns what the signature names.
func (v *Verifier) checkSignature(r *http.Request, maxBody int64) (signedAs, error) {
	t, nonce, hash, sig, err := parse(r.Header.Get("Authorization"))
	if err != nil {
		return signedAs{}, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	now := v.now()
	// Compared in seconds, never subtracted first: a t near the ends of
	// int64 would wrap around into the window.
	if w := int64(Window / time.Second); t < now.Unix()-w || t > now.Unix()+w {
		way := "behind"
		if t > now.Unix() {
			way = "ahead of"
		}
		off := "over 100 years"
		if d := t - now.Unix(); d > -100*365*86400 && d < 100*365*86400 {
			off = (time.Duration(max(d, -d)) * time.Second).String()
		}
		return signedAs{}, fmt.Errorf("%w: its time is %s %s this node's clock (at most %v either way): keep both hosts' clocks in sync (NTP)", ErrRefused, off, way, Window)
	}
	want := signature(v.key, r.Method, r.URL.RequestURI(), r.Host, t, nonce, hash)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return signedAs{}, fmt.Errorf("%w: the signature does not match: signed with another cluster key, or the request was changed on the way (its method, path, query or Host %q)", ErrRefused, r.Host)
	}
	if r.ContentLength > maxBody {
		return signedAs{}, fmt.Errorf("%w: body of %d bytes: over %d bytes", ErrRefused, r.ContentLength, maxBody)
	}
	return signedAs{t: t, nonce: nonce, hash: hash}, nil
}

// takeNonce refuses a request whose nonce was taken before (a replay),
// and remembers it for the signature's window.
func (v *Verifier) takeNonce(sg signedAs) error {
	t, nonce := sg.t, sg.nonce
	v.mu.Lock()
	defer v.mu.Unlock()
	unix := v.now().Unix()
	if unix >= v.sweep {
		for n, until := range v.nonces {
			if until < unix {
				delete(v.nonces, n)
			}
		}
		v.sweep = unix + 10
	}
	if _, seen := v.nonces[nonce]; seen {
		return fmt.Errorf("%w: its nonce was used before (a replayed request)", ErrRefused)
	}
	if len(v.nonces) >= MaxNonces {
		return fmt.Errorf("%w: over %d signed requests in %v; try again later", ErrRefused, MaxNonces, 2*Window)
	}
	v.nonces[nonce] = t + int64(Window/time.Second) + 1
	return nil
}

// parse reads "SCHEME t=…,n=…,b=…,s=…".
func parse(h string) (t int64, nonce, hash, sig string, err error) {
	rest, ok := strings.CutPrefix(h, Scheme+" ")
	if !ok {
		return 0, "", "", "", errors.New("no " + Scheme + " authorization")
	}
	if len(rest) > 256 {
		return 0, "", "", "", errors.New("authorization over 256 bytes")
	}
	var haveT bool
	for _, part := range strings.Split(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			t, err = strconv.ParseInt(val, 10, 64)
			if err != nil {
				return 0, "", "", "", fmt.Errorf("t=%q: not a unix time", val)
			}
			haveT = true
		case "n":
			nonce = val
		case "b":
			hash = val
		case "s":
			sig = val
		default:
			return 0, "", "", "", fmt.Errorf("unknown field %q", k)
		}
	}
	if !haveT || len(nonce) != 32 || len(hash) != 64 || len(sig) != 64 {
		return 0, "", "", "", errors.New("want t=UNIX,n=32 hex digits,b=64 hex digits,s=64 hex digits")
	}
	if _, err := hex.DecodeString(nonce); err != nil {
		return 0, "", "", "", errors.New("nonce: not hex")
	}
	return t, nonce, hash, sig, nil
}
