package actor

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// RLNODE_MAX_MESSAGE_SIZE sets the message limit of a node whose Config
// leaves it 0; one that is not a size fails Start, naming the variable.
func TestMaxMessageSizeEnv(t *testing.T) {
	t.Setenv(MaxMessageSizeEnv, "64KiB")
	s, err := Start(Config{Logger: DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if s.MaxMessageSize() != 64<<10 || s.InlineLimit() != 64<<10 {
		t.Errorf("limit %d, inline %d; want 65536 for both", s.MaxMessageSize(), s.InlineLimit())
	}
	s2, err := Start(Config{Logger: DiscardLogger(), MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if s2.MaxMessageSize() != 1<<20 || s2.InlineLimit() != DefaultInlineLimit {
		t.Errorf("a Config's own limit: %d, inline %d", s2.MaxMessageSize(), s2.InlineLimit())
	}
	for _, bad := range []string{"lots", "0", "-5"} {
		t.Setenv(MaxMessageSizeEnv, bad)
		if s, err := Start(Config{Logger: DiscardLogger()}); err == nil || !strings.Contains(err.Error(), MaxMessageSizeEnv) {
			if s != nil {
				s.Stop()
			}
			t.Errorf("%s=%q: %v, want an error naming the variable", MaxMessageSizeEnv, bad, err)
		}
	}
}

// A payload size another node announces is checked against this node's
// memory before anything is allocated for it: an absurd one is an error,
// not a panic (makeslice) or a crash out of memory.
func TestBulkFetchAbsurdSize(t *testing.T) {
	s := startTestSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data := []byte("payload")
	ref := s.Bulk().Offer(data, 2, time.Minute)
	for _, size := range []int64{1 << 62, HostMemory() + 1} {
		bad := ref
		bad.Size = size
		if _, err := s.Bulk().Fetch(ctx, bad); err == nil || !errors.Is(err, ErrTooLarge) {
			t.Errorf("fetch of %d bytes: %v, want ErrTooLarge", size, err)
		}
		if _, _, err := s.Bulk().FetchView(ctx, bad); err == nil || !errors.Is(err, ErrTooLarge) {
			t.Errorf("view of %d bytes: %v, want ErrTooLarge", size, err)
		}
	}
	if got, err := s.Bulk().Fetch(ctx, ref); err != nil || string(got) != "payload" {
		t.Fatalf("the offer itself: %q, %v", got, err)
	}
}
