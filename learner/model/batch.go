package model

import (
	"fmt"
	"sort"
)

// Sequence is one prompt and the response whose tokens are scored.
type Sequence struct {
	Prompt   []int32
	Response []int32
}

// Batch is a rows×seqLen grid of tokens holding one or more sequences per
// row, and the positions whose next-token log probabilities are wanted.
type Batch struct {
	Rows, SeqLen int
	Tokens       []int32 // rows*seqLen; padding is token 0
	Positions    []int32 // rotary position of each token, restarting per sequence
	Starts       []int32 // index within its row where each token's sequence begins
	Outputs      []int32 // flat token index whose logits score Targets[i]
	Targets      []int32 // the scored next tokens
	Spans        []Span  // where each sequence's scores lie in Outputs
}

// Span locates sequence Seq: it sits in row Row from column Col, and its
// N response tokens are scored at Outputs[Off:Off+N].
type Span struct {
	Seq, Row, Col, Off, N int
}

// NewBatch lays out seqs in rows of seqLen tokens (seqLen 0: the longest
// sequence). With pack, sequences share rows (first fit, longest first),
// their positions restarting at 0 and attention blocked between them;
// without, each sequence gets its own padded row. Padding forms its own
// segment and is never scored.
func NewBatch(seqs []Sequence, seqLen int, pack bool, vocab int) (*Batch, error) {
	longest := 0
	for i, s := range seqs {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("batch: sequence %d: empty prompt (the first response token needs a token before it)", i)
		}
		for _, part := range []struct {
			field string
			ids   []int32
		}{{"prompt", s.Prompt}, {"response", s.Response}} {
			for j, t := range part.ids {
				if t < 0 || int(t) >= vocab {
					return nil, fmt.Errorf("batch: sequence %d: %s[%d]: token id %d out of range [0, %d)", i, part.field, j, t, vocab)
				}
			}
		}
		longest = max(longest, len(s.Prompt)+len(s.Response))
	}
	if len(seqs) == 0 {
		return nil, fmt.Errorf("batch: no sequences")
	}
	if seqLen == 0 {
		seqLen = longest
	}
	if longest > seqLen {
		return nil, fmt.Errorf("batch: a sequence of %d tokens exceeds the row length %d", longest, seqLen)
	}
	// Assign sequences to rows.
	rowOf := make([]int, len(seqs))
	colOf := make([]int, len(seqs))
	var used []int
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	if pack {
		sort.SliceStable(order, func(a, b int) bool {
			return len(seqs[order[a]].Prompt)+len(seqs[order[a]].Response) > len(seqs[order[b]].Prompt)+len(seqs[order[b]].Response)
		})
	}
	for _, i := range order {
		n := len(seqs[i].Prompt) + len(seqs[i].Response)
		r := len(used)
		if pack {
			for j, u := range used {
				if u+n <= seqLen {
					r = j
					break
				}
			}
		}
		if r == len(used) {
			used = append(used, 0)
		}
		rowOf[i], colOf[i] = r, used[r]
		used[r] += n
	}
	b := &Batch{Rows: len(used), SeqLen: seqLen}
	N := b.Rows * seqLen
	b.Tokens = make([]int32, N)
	b.Positions = make([]int32, N)
	b.Starts = make([]int32, N)
	for r, u := range used { // padding: one segment from u to the end
		for c := u; c < seqLen; c++ {
			b.Positions[r*seqLen+c] = int32(c - u)
			b.Starts[r*seqLen+c] = int32(u)
		}
	}
	for i, s := range seqs {
		base := rowOf[i]*seqLen + colOf[i]
		all := append(append([]int32(nil), s.Prompt...), s.Response...)
		for j, t := range all {
			b.Tokens[base+j] = t
			b.Positions[base+j] = int32(j)
			b.Starts[base+j] = int32(colOf[i])
		}
		sp := Span{Seq: i, Row: rowOf[i], Col: colOf[i], Off: len(b.Outputs), N: len(s.Response)}
		for k, t := range s.Response {
			b.Outputs = append(b.Outputs, int32(base+len(s.Prompt)+k-1))
			b.Targets = append(b.Targets, t)
		}
		b.Spans = append(b.Spans, sp)
	}
	return b, nil
}

// Split cuts per-output values (log probs, entropies) into per-sequence
// slices, in the order the sequences were given.
func (b *Batch) Split(v []float32) [][]float32 {
	out := make([][]float32, len(b.Spans))
	for _, s := range b.Spans {
		out[s.Seq] = v[s.Off : s.Off+s.N]
	}
	return out
}

// Join is Split's inverse: per-sequence values laid out as Outputs.
func (b *Batch) Join(per [][]float32) ([]float32, error) {
	if len(per) != len(b.Spans) {
		return nil, fmt.Errorf("batch: %d sequences of values for %d sequences", len(per), len(b.Spans))
	}
	out := make([]float32, len(b.Outputs))
	for _, s := range b.Spans {
		if len(per[s.Seq]) != s.N {
			return nil, fmt.Errorf("batch: sequence %d: %d values for %d response tokens", s.Seq, len(per[s.Seq]), s.N)
		}
		copy(out[s.Off:], per[s.Seq])
	}
	return out, nil
}
