package jobs

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A node that takes a job request and never answers (its process
// stopped) is reported in words: rlnode job list said only "context
// deadline exceeded" after 30 s.
func TestClientNamesANodeThatDoesNotAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Client{Control: strings.TrimPrefix(srv.URL, "http://"), Token: "t"}.List(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("list from a node that does not answer: %v", err)
	}
}
