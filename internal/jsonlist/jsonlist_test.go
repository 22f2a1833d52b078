package jsonlist

import "testing"

func TestLonger(t *testing.T) {
	for _, c := range []struct {
		raw          string
		most         int
		want, nested bool
	}{
		{`[]`, 0, false, false}, {` [ ] `, 0, false, false}, {`[1]`, 0, true, true}, {`[1]`, 1, false, false},
		{`[{},[],"",1,null]`, 4, true, true}, {`[{},[],"",1,null]`, 5, false, false},
		{`[{"a":[1,2,3],"b":{"c":[4,5]}}]`, 1, false, true}, {`[{"a":[1,2,3],"b":{"c":[4,5]}}]`, 6, false, false},
		{`[[1,2,3],[4]]`, 2, false, true}, {`[[1,2,3],[4]]`, 1, true, true}, {`[[1,2,3],[4]]`, 6, false, false},
		{`["a,b","[{\"",  "\\"]`, 3, false, false}, {`["a,b","[{\"",  "\\"]`, 2, true, true},
		{`"a,b,c"`, 0, false, false}, {`{"a":1,"b":2}`, 0, false, false}, {`null`, 0, false, false},
		{`{"a":[1,2],"b":[3]}`, 2, false, true}, {`{"a":[1,2],"b":[3]}`, 3, false, false},
		{`[1,2`, 1, true, true}, {`[1,2`, 2, false, false}, // cut short: counted as far as it goes
	} {
		if got := Longer([]byte(c.raw), c.most); got != c.want {
			t.Errorf("Longer(%s, %d) = %v, want %v", c.raw, c.most, got, c.want)
		}
		if got := LongerNested([]byte(c.raw), c.most); got != c.nested {
			t.Errorf("LongerNested(%s, %d) = %v, want %v", c.raw, c.most, got, c.nested)
		}
	}
}
