package data

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/rollout/verify"
)

// MATH.csv's shape: problem, solution, answer, subject, level; quoted
// cells with commas, newlines and doubled quotes, a byte-order mark.
func TestLoadCSVMath(t *testing.T) {
	p := writeFile(t, "MATH.csv", "\ufeffproblem,solution,answer,subject,level\n"+
		`"What is $1+1$, exactly?","It is $\boxed{2}$.",2,Algebra,Level 1`+"\n"+
		`"Say ""yes"".
Then stop.","\boxed{yes}",yes,Prealgebra,Level 2`+"\n")
	got, err := Load(p, Mapping{Prompt: "problem", Answer: "answer"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{ID: "MATH.csv:0", Prompt: "What is $1+1$, exactly?", Ref: verify.Reference{Answer: "2"}},
		{ID: "MATH.csv:1", Prompt: "Say \"yes\".\nThen stop.", Ref: verify.Reference{Answer: "yes"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// mbpp_filtered.csv's shape: test_list holds Python's repr of a list of
// strings (as pandas writes a list column).
func TestLoadCSVMBPP(t *testing.T) {
	p := writeFile(t, "mbpp_filtered.csv", "task_id,text,code,test_list,test_setup_code\n"+
		`11,Write a function to remove a char.,"def f(s, c): return s.replace(c, '')","['assert f(""hello"",""l"") == ""heo""', ""assert f('a\\'b', \""'\"") == 'ab'""]",`+"\n"+
		`12,Write g.,def g(): return 1,"[""assert g() == 1""]",import math`+"\n")
	got, err := Load(p, Mapping{Prompt: "text", Answer: "code", Tests: "test_list", Setup: "test_setup_code", ID: "task_id"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{ID: "11", Prompt: "Write a function to remove a char.", Ref: verify.Reference{Answer: "def f(s, c): return s.replace(c, '')",
			Tests: []string{`assert f("hello","l") == "heo"`, `assert f('a\'b', "'") == 'ab'`}}},
		{ID: "12", Prompt: "Write g.", Ref: verify.Reference{Answer: "def g(): return 1", Tests: []string{"assert g() == 1"}, Setup: "import math"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// MBPP-sanitized's test_imports is a list: its lines are the setup code.
func TestLoadSetupList(t *testing.T) {
	p := writeFile(t, "sanitized.jsonl", `{"prompt": "p", "test_list": ["assert 1"], "test_imports": ["import math", "import re"]}
{"prompt": "q", "test_list": ["assert 2"], "test_imports": []}
`)
	got, err := Load(p, Mapping{Prompt: "prompt", Tests: "test_list", Setup: "test_imports"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Ref.Setup != "import math\nimport re" || got[1].Ref.Setup != "" {
		t.Fatalf("setups %q, %q", got[0].Ref.Setup, got[1].Ref.Setup)
	}
	bad := writeFile(t, "bad.jsonl", `{"prompt": "p", "test_imports": ["import math", 3]}`+"\n")
	if _, err := Load(bad, Mapping{Prompt: "prompt", Setup: "test_imports"}); err == nil || !strings.Contains(err.Error(), "element 1 is a number") {
		t.Errorf("a number in the list: %v", err)
	}
}

func TestLoadCSVErrors(t *testing.T) {
	for _, c := range []struct {
		name, text string
		m          Mapping
		want       string
	}{
		{"missing column", "question,answer\nq,1\n", Mapping{Prompt: "problem"}, `column "problem": not in the header (columns: question, answer)`},
		{"ragged row", "problem,answer\nq,1\nr\n", Mapping{Prompt: "problem", Answer: "answer"}, "row 1: record on line 3: wrong number of fields"},
		{"bare quote", "problem,answer\n\"q,1\n", Mapping{Prompt: "problem", Answer: "answer"}, "row 0:"},
		{"empty prompt", "problem,answer\n,1\n", Mapping{Prompt: "problem", Answer: "answer"}, `line 2: row 0: column "problem": empty prompt`},
		{"mapped column twice", "problem,answer,problem\nq,1,r\n", Mapping{Prompt: "problem", Answer: "answer"}, `column "problem": twice in the header (columns 1 and 3)`},
		// Latin-1 (a spreadsheet's export): the bytes reached the
		// tokenizer as they were, the prompt not the file's text.
		{"not UTF-8", "problem,answer\nq,1\n\"caf\xe9 au lait\",2\n", Mapping{Prompt: "problem", Answer: "answer"}, `row 1 (line 3): column "problem": not UTF-8 at byte 4 of the field, which starts at column 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeFile(t, "d.csv", c.text), c.m)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrBadDataset) {
				t.Errorf("err %v, want %q", err, c.want)
			}
		})
	}
	// A column the mapping does not read may repeat.
	if got, err := Load(writeFile(t, "x.csv", "problem,answer,note,note\nq,1,a,b\n"), Mapping{Prompt: "problem", Answer: "answer"}); err != nil || len(got) != 1 {
		t.Errorf("an unread column twice: %v %v", got, err)
	}
	// A header alone is no rows.
	if got, err := Load(writeFile(t, "h.csv", "problem,answer\n"), Mapping{Prompt: "problem"}); err != nil || len(got) != 0 {
		t.Errorf("header only: %v %v", got, err)
	}
}

func TestListLiteral(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []any
		ok   bool
	}{
		{`[]`, []any{}, true},
		{`['a', "b"]`, []any{"a", "b"}, true},
		{` [ 'x\ny' , ] `, []any{"x\ny"}, true},
		{`['it\'s']`, []any{"it's"}, true},
		{`['a' 'b']`, nil, false},
		{`['a'`, nil, false},
		{`[1, 2]`, nil, false},
		{`['a'] extra`, nil, false},
		{`assert x == [1]`, nil, false},
	} {
		got, ok := listLiteral(c.in)
		if ok != c.ok || (ok && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("%q: %v %v, want %v %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
