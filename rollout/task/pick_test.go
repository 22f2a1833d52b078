package task

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestPick checks the hidden-information kind: level+1 distinct
// candidates in the question, a hint naming one by position, the answer
// that candidate; every position about equally often (the question alone
// cannot tell which one is meant); held-out questions never in train.
func TestPick(t *testing.T) {
	for _, level := range []int{1, 2, 5} {
		t.Run(fmt.Sprint("level ", level), func(t *testing.T) {
			n := level + 1
			train := map[string]bool{}
			for _, split := range []Split{Train, HeldOut} {
				pos := make([]int, n)
				for _, p := range gen(t, Config{Seed: 3, Kinds: []string{Pick}, Level: level, HeldOutPercent: 30}, split, 2000) {
					rest, ok := strings.CutPrefix(p.Question, "Pick: ")
					if !ok {
						t.Fatalf("%s: question %q", p.ID, p.Question)
					}
					nums := strings.Fields(rest)
					if len(nums) != n {
						t.Fatalf("%s: %q: %d candidates, want %d", p.ID, p.Question, len(nums), n)
					}
					seen := map[string]bool{}
					for _, s := range nums {
						v, err := strconv.Atoi(s)
						if err != nil || v < pickMin || v > pickMax || seen[s] {
							t.Fatalf("%s: %q: candidate %q", p.ID, p.Question, s)
						}
						seen[s] = true
					}
					k := -1
					for i := range nums {
						if Ordinal(i+1) == p.Hint {
							k = i
						}
					}
					if k < 0 || nums[k] != p.Answer {
						t.Fatalf("%s: %q hint %q answer %q", p.ID, p.Question, p.Hint, p.Answer)
					}
					pos[k]++
					switch split {
					case Train:
						train[p.Question] = true
					case HeldOut:
						if train[p.Question] {
							t.Fatalf("held-out %q is also in train", p.Question)
						}
					}
				}
				for k, c := range pos {
					if c < 2000/n/2 {
						t.Errorf("%s: position %d picked %d times of 2000, want about %d", split, k+1, c, 2000/n)
					}
				}
			}
		})
	}
}

// TestHiddenKindsByNameOnly: a mixed generator never draws pick problems,
// and only pick problems carry a hint.
func TestHiddenKindsByNameOnly(t *testing.T) {
	for _, p := range gen(t, Config{Seed: 1}, Train, 600) {
		if p.Kind == Pick || p.Hint != "" {
			t.Fatalf("%s: mixed generator made %+v", p.ID, p)
		}
	}
	if _, err := New(Config{Kinds: []string{"pik"}}); err == nil || !strings.Contains(err.Error(), Pick) {
		t.Fatalf("unknown kind: err %v, want the list naming %s", err, Pick)
	}
}

func TestOrdinal(t *testing.T) {
	for k, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 101: "101st", 111: "111th"} {
		if got := Ordinal(k); got != want {
			t.Errorf("Ordinal(%d) = %q, want %q", k, got, want)
		}
	}
}

// TestAnyHint checks that AnyHint names a position of the problem's own
// candidates, each about equally often, and the hinted one no more often
// than chance (it must carry nothing of the answer); that it is the same
// on every call and differs between seeds; and that kinds without hints
// get none.
func TestAnyHint(t *testing.T) {
	for _, level := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("level ", level), func(t *testing.T) {
			n := level + 1
			const draws = 3000
			probs := gen(t, Config{Seed: 5, Kinds: []string{Pick}, Level: level, HeldOutPercent: 30}, Train, draws)
			other := gen(t, Config{Seed: 6, Kinds: []string{Pick}, Level: level, HeldOutPercent: 30}, Train, draws)
			pos := map[string]int{}
			same, differ := 0, 0
			for i, p := range probs {
				h := AnyHint(p)
				if h != AnyHint(p) {
					t.Fatalf("%s: AnyHint %q, then %q", p.ID, h, AnyHint(p))
				}
				pos[h]++
				if h == p.Hint {
					same++
				}
				if h != AnyHint(other[i]) {
					differ++
				}
			}
			for k := 1; k <= n; k++ {
				got := float64(pos[Ordinal(k)]) / draws
				if got < 0.8/float64(n) || got > 1.2/float64(n) {
					t.Errorf("position %s drawn %.3f of the time, want about %.3f", Ordinal(k), got, 1/float64(n))
				}
				delete(pos, Ordinal(k))
			}
			if len(pos) > 0 {
				t.Errorf("hints outside the %d positions: %v", n, pos)
			}
			if got := float64(same) / draws; got < 0.8/float64(n) || got > 1.2/float64(n) {
				t.Errorf("AnyHint equals the hint %.3f of the time, want about %.3f (chance)", got, 1/float64(n))
			}
			if differ == 0 {
				t.Error("AnyHint is the same for every problem index under two seeds")
			}
		})
	}
	for _, p := range gen(t, Config{Seed: 5, Kinds: Kinds, Level: 2, HeldOutPercent: 30}, Train, 60) {
		if h := AnyHint(p); h != "" {
			t.Errorf("%s (%s): AnyHint %q, want none", p.ID, p.Kind, h)
		}
	}
}
