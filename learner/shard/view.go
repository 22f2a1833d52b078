package shard

import (
	"context"
	"fmt"
)

// Views: after a collective on shared buffers, chunk c of every bucket is
// final in its owner's buffer. Rather than copy it into every rank's
// buffer (n stores of each element), each rank reads the result through
// its view: an address range as long as the buffer whose pages are the
// owners' own pages, mapped again read-only (a page that holds elements of
// two owners is a private page, filled by copying those elements after
// each collective). A reduction then stores each sum once, and a ZeRO-1
// weight all-gather stores nothing. The price is one more wait: a rank
// may not write its buffer again until every other rank has read its view
// (release, awaitReleased).

// wordReleased is the word of bucket 0's line in which a rank says it has
// read its view of a collective to the end.
const wordReleased = 3

// span of elements [lo, hi) of the buffer, owned by rank owner.
type ownedSpan struct{ lo, hi, owner int }

// viewLayout cuts a view of total elements, in buckets of bucket split
// among size ranks as the ring splits them, into runs of whole pages
// (page elements each; the last may end at total) that lie in one owner's
// chunk, mapped from that owner's buffer, and the spans of the pages
// shared by two or more owners, by bucket, copied after each collective.
func viewLayout(total, bucket, size, page int) (runs []ownedSpan, fixes [][]ownedSpan) {
	if total <= 0 || bucket <= 0 || size <= 0 || page <= 0 {
		return nil, nil
	}
	var own []ownedSpan // every owner's chunks, in order
	var ofBucket []int
	for b, base := 0, 0; base < total; b, base = b+1, base+bucket {
		m := min(bucket, total-base)
		for k := range size {
			if lo, hi := chunk(m, size, k); hi > lo {
				own = append(own, ownedSpan{base + lo, base + hi, k})
				ofBucket = append(ofBucket, b)
			}
		}
	}
	fixes = make([][]ownedSpan, (total+bucket-1)/bucket)
	i := 0
	for plo := 0; plo < total; plo += page {
		phi := min(plo+page, total)
		for own[i].hi <= plo {
			i++
		}
		if o := own[i]; o.lo <= plo && o.hi >= phi {
			if n := len(runs); n > 0 && runs[n-1].owner == o.owner && runs[n-1].hi == plo {
				runs[n-1].hi = phi
			} else {
				runs = append(runs, ownedSpan{plo, phi, o.owner})
			}
			continue
		}
		for j := i; j < len(own) && own[j].lo < phi; j++ {
			s := ownedSpan{max(own[j].lo, plo), min(own[j].hi, phi), own[j].owner}
			fixes[ofBucket[j]] = append(fixes[ofBucket[j]], s)
		}
	}
	return runs, fixes
}

// fixView copies bucket b's elements of the view's shared pages from their
// owners' buffers. The bucket's chunks must be final.
func (s *shmGroup) fixView(b uint32) {
	v := s.view
	if int(b) >= len(v.fixes) {
		return
	}
	for _, f := range v.fixes[b] {
		copy(v.data[f.lo:f.hi], s.bufs[f.owner][f.lo:f.hi])
	}
}

// reduceToView is reduceScatter, after which this rank's view of bucket b
// holds the sums.
func (s *shmGroup) reduceToView(ctx context.Context, g *ring, tag Tag, off, m int) error {
	if err := s.reduceScatter(ctx, g, tag, off, m); err != nil {
		return err
	}
	s.fixView(tag.Bucket)
	return nil
}

// gatherToView is allGather read through the view: once every owner says
// its chunk of bucket b is final, the view holds all of them. No element
// is copied but those of shared pages.
func (s *shmGroup) gatherToView(ctx context.Context, g *ring, tag Tag, off, m int) error {
	want := seq(tag.Op)
	s.publish(tag.Bucket, wordReduced, want)
	g.sent(tag)
	if err := s.awaitAll(ctx, tag, wordReduced, want); err != nil {
		return fmt.Errorf("all-gather: %w", err)
	}
	s.fixView(tag.Bucket)
	return nil
}

// release says this rank has read its view of collective tag.Op: the
// other ranks may write their buffers again.
func (s *shmGroup) release(op uint64) { s.publish(0, wordReleased, seq(op)) }

// awaitReleased waits until every other rank has read its view of
// collective tag.Op.
func (s *shmGroup) awaitReleased(ctx context.Context, tag Tag) error {
	tag.Bucket = 0
	if err := s.awaitAll(ctx, tag, wordReleased, seq(tag.Op)); err != nil {
		return fmt.Errorf("before writing its buffer again: %w", err)
	}
	return nil
}
