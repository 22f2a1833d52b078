//go:build linux

package actor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Refs carries a list of bulk references; a peer decodes it as any message
// with a slice in it.
type Refs struct {
	List []*BulkRef
	raw  []byte // when set, the body sent instead (a hostile member's)
}

// EncodeMsgpack writes raw when it is set: the bytes a hostile member
// would send under Refs' name.
func (r Refs) EncodeMsgpack(enc *msgpack.Encoder) error {
	if r.raw != nil {
		_, err := enc.Writer().Write(r.raw)
		return err
	}
	return enc.Encode(struct{ List []*BulkRef }{r.List})
}

func init() { RegisterMessage(Refs{}) }

// TestHostileBodyLengths: a member that sends a message whose body
// declares more values than it holds (an array of 2³²−1 elements in 11
// bytes, a map, a string, nesting deeper than any message) gets an error
// naming what was wrong, and the receiving node lives on and answers the
// next call. Before, msgpack made the whole slice at its declared length
// first: 11 bytes asked for 32 GiB, and the node's process died with
// "fatal error: runtime: out of memory".
func TestHostileBodyLengths(t *testing.T) {
	s, err := Start(Config{Secret: []byte("k1"), Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	p := startPeer(t, "RLNODE_ACTOR_SECRET=k1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deep := make([]byte, 0, 100_010)
	deep = append(deep, 0x81, 0xa4, 'L', 'i', 's', 't')
	for range 100_000 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0)
	for _, c := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"an array of 2^32-1 elements in 11 bytes", []byte{0x81, 0xa4, 'L', 'i', 's', 't', 0xdd, 0xff, 0xff, 0xff, 0xff}, "4294967295 values"},
		{"a map of 2^32-1 entries", []byte{0x81, 0xa4, 'L', 'i', 's', 't', 0x91, 0xdf, 0xff, 0xff, 0xff, 0xff}, "values"},
		{"a string of 2 GiB", []byte{0x81, 0xa4, 'L', 'i', 's', 't', 0x91, 0x81, 0xa1, 'a', 0xdb, 0x7f, 0xff, 0xff, 0xff}, "bytes"},
		{"arrays nested 100,000 deep", deep, "deep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Call(ctx, bulkerRef(p), Refs{raw: c.raw})
			t.Logf("Call: %v", err)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("a body with %s: %v; want an error saying %q", c.name, err, c.want)
			}
			// The peer lives on and answers.
			if _, err := CallAs[Offered](ctx, s, bulkerRef(p), OfferPattern{Size: 1, Seed: 1, Count: 1}); err != nil {
				t.Fatalf("the peer after a body with %s: %v", c.name, err)
			}
		})
	}
}
