package ctxopt

import (
	"math"
	"slices"
	"testing"
)

func TestEmbedder(t *testing.T) {
	e := NewEmbedder(32)
	a := e.Embed("Mia has 5 apples. She buys 3 more. How many apples does Mia have now?")
	if len(a) != 32+NumStats {
		t.Fatalf("embedding of %d values, want %d", len(a), 32+NumStats)
	}
	var norm float64
	for _, v := range a[:32] {
		norm += float64(v) * float64(v)
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("hashed part has squared norm %v, want 1", norm)
	}
	if b := e.Embed("Mia has 5 apples. She buys 3 more. How many apples does Mia have now?"); &a[0] != &b[0] {
		t.Error("the same question was embedded twice (no cache)")
	}
	// Numbers count by their digits: 5 and 7 look alike, 5 and 5000 do not.
	same := NewEmbedder(32).Embed("Mia has 7 apples. She buys 3 more. How many apples does Mia have now?")
	if !slices.Equal(a, same) {
		t.Error("questions that differ only in same-length numbers embed differently")
	}
	big := NewEmbedder(32).Embed("Mia has 5000 apples. She buys 3 more. How many apples does Mia have now?")
	if slices.Equal(a, big) || !(big[32+1] > a[32+1]) {
		t.Errorf("a 4-digit number: statistics %v, a 1-digit one %v", big[32:], a[32:])
	}
	if got := len(NewEmbedder(8).Embed(string(make([]byte, 1<<20)))); got != 8+NumStats {
		t.Errorf("a huge question: %d values", got)
	}
}
