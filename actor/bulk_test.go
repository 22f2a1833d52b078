package actor

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestBulkOfferFetch(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB, several chunks
	ref := s.Bulk().Offer(data, 2, time.Minute)
	if ref.Size != int64(len(data)) || len(ref.ID) != 32 {
		t.Fatalf("ref %+v", ref)
	}
	// Ranges do not use up readers; whole reads do.
	part := make([]byte, 100)
	if err := s.Bulk().FetchRange(ctx, ref, 17, part); err != nil || !bytes.Equal(part, data[17:117]) {
		t.Fatalf("range: %v", err)
	}
	if err := s.Bulk().FetchRange(ctx, ref, int64(len(data))-10, make([]byte, 20)); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("range past the end: %v", err)
	}
	for i := 0; i < 2; i++ {
		got, err := s.Bulk().Fetch(ctx, ref)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("reader %d: %v", i, err)
		}
	}
	if _, err := s.Bulk().Fetch(ctx, ref); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("third read of a two-reader offer: %v", err)
	}
	// TTL and Release withdraw offers.
	short := s.Bulk().Offer(data, 5, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	if _, err := s.Bulk().Fetch(ctx, short); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("expired offer: %v", err)
	}
	rel := s.Bulk().Offer(data, 5, time.Minute)
	s.Bulk().Release(rel)
	if _, err := s.Bulk().Fetch(ctx, rel); !errors.Is(err, ErrBulkAbsent) {
		t.Fatalf("released offer: %v", err)
	}
	if _, err := s.Bulk().Fetch(ctx, BulkRef{Addr: ref.Addr, ID: "short", Size: 1}); err == nil {
		t.Fatal("malformed id accepted")
	}
	if _, err := s.Bulk().Fetch(ctx, BulkRef{Addr: ref.Addr, ID: ref.ID, Size: -1}); err == nil {
		t.Fatal("negative size accepted")
	}
}

func TestBulkRefusesNonMembers(t *testing.T) {
	s := startTestSystem(t)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fetcher := Ref{Name: "fetcher", Address: p.addr, ID: "a/fetcher"}
	data := make([]byte, 1<<20)
	got, err := CallAs[Pong](ctx, s, fetcher, FetchOffer{Ref: s.Bulk().Offer(data, 1, time.Minute)})
	if err != nil || got.Len != len(data) {
		t.Fatalf("member fetch: %+v, %v", got, err)
	}
	// A request naming a node outside the membership gets the denied status
	// and no bytes.
	s.SetPeerFilter(func(addr string) bool { return addr == p.addr })
	ref := s.Bulk().Offer(data, 1, time.Minute)
	c, err := net.Dial("tcp", ref.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := "192.0.2.7:4000" // a documentation address: never dialled, only named
	req := append([]byte(bulkMagic), ref.ID...)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint64(req, uint64(len(data)))
	req = binary.BigEndian.AppendUint16(req, uint16(len(from)))
	req = append(req, from...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c)
	if len(reply) != 1 || reply[0] != bulkStatusDenied {
		t.Fatalf("non-member got %d bytes, first %v", len(reply), reply[:min(len(reply), 1)])
	}
	// The offer is still there for members.
	got, err = CallAs[Pong](ctx, s, fetcher, FetchOffer{Ref: ref})
	if err != nil || got.Len != len(data) {
		t.Fatalf("member fetch after a refusal: %+v, %v", got, err)
	}
}
