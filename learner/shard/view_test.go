package shard

import (
	"fmt"
	"testing"
)

// viewLayout covers every element once: whole pages of one owner's chunk
// as runs, the rest as spans of the bucket and owner they belong to.
func TestViewLayout(t *testing.T) {
	for _, c := range []struct{ total, bucket, size, page, wantFixes int }{
		{1, 7, 1, 1024, 0},
		{29, 7, 3, 1024, -1},
		{1025, 1024, 2, 1024, -1},
		{5000, 3000, 3, 1024, -1},
		{65536, 4096, 4, 1024, 0}, // chunks of 1,024: every page whole
		{3 * 8192, 8192, 2, 1024, 0},
		{70001, 4096, 4, 1024, 4}, // the last bucket (369 elements) shares one page
		{70000, 333, 4, 16, -1},
		{100, 1000, 4, 16, -1},
	} {
		t.Run(fmt.Sprintf("total%d_bucket%d_ranks%d_page%d", c.total, c.bucket, c.size, c.page), func(t *testing.T) {
			owner := make([]int, c.total)
			bucketOf := make([]int, c.total)
			for e := range c.total {
				b := e / c.bucket
				m := min(c.bucket, c.total-b*c.bucket)
				for k := range c.size {
					if lo, hi := chunk(m, c.size, k); e-b*c.bucket >= lo && e-b*c.bucket < hi {
						owner[e] = k
					}
				}
				bucketOf[e] = b
			}
			seen := make([]int, c.total)
			runs, fixes := viewLayout(c.total, c.bucket, c.size, c.page)
			for _, r := range runs {
				if r.lo%c.page != 0 || (r.hi%c.page != 0 && r.hi != c.total) || r.hi <= r.lo {
					t.Fatalf("run %+v is not whole pages", r)
				}
				for e := r.lo; e < r.hi; e++ {
					if owner[e] != r.owner {
						t.Fatalf("run %+v: element %d is rank %d's", r, e, owner[e])
					}
					seen[e]++
				}
			}
			nfix := 0
			for b, fs := range fixes {
				for _, f := range fs {
					nfix++
					for e := f.lo; e < f.hi; e++ {
						if owner[e] != f.owner || bucketOf[e] != b {
							t.Fatalf("span %+v of bucket %d: element %d is rank %d's of bucket %d", f, b, e, owner[e], bucketOf[e])
						}
						seen[e]++
					}
				}
			}
			for e, n := range seen {
				if n != 1 {
					t.Fatalf("element %d covered %d times", e, n)
				}
			}
			if c.wantFixes >= 0 && nfix != c.wantFixes {
				t.Errorf("%d copied spans, want %d", nfix, c.wantFixes)
			}
			if len(fixes) != (c.total+c.bucket-1)/c.bucket {
				t.Errorf("spans for %d buckets, want %d", len(fixes), (c.total+c.bucket-1)/c.bucket)
			}
		})
	}
	if r, f := viewLayout(0, 7, 2, 1024); r != nil || f != nil {
		t.Errorf("empty view: %v %v", r, f)
	}
}
