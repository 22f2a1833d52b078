package ctxopt

import (
	"math"
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
	// Word features see numbers by their digit count: a question with
	// another 1-digit number is closer than one with a 4-digit number.
	same := NewEmbedder(32).Embed("Mia has 7 apples. She buys 3 more. How many apples does Mia have now?")
	big := NewEmbedder(32).Embed("Mia has 5000 apples. She buys 3 more. How many apples does Mia have now?")
	cos := func(x, y []float32) float64 {
		var s float64
		for i := range 32 {
			s += float64(x[i]) * float64(y[i])
		}
		return s
	}
	if !(cos(a, same) > cos(a, big)) || cos(a, same) > 0.999 {
		t.Errorf("similarity to a 1-digit variant %.3f, to a 4-digit one %.3f", cos(a, same), cos(a, big))
	}
	if !(big[32+1] > a[32+1]) {
		t.Errorf("a 4-digit number: statistics %v, a 1-digit one %v", big[32:], a[32:])
	}
	if got := len(NewEmbedder(8).Embed(string(make([]byte, 1<<20)))); got != 8+NumStats {
		t.Errorf("a huge question: %d values", got)
	}
}
