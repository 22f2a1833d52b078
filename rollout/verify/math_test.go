package verify

import (
	"context"
	"strings"
	"testing"
)

func TestExtractAnswer(t *testing.T) {
	tests := []struct {
		name, response, want string
	}{
		{"boxed", `so $x = \boxed{5}$`, "5"},
		{"nested braces", `\boxed{\frac{1}{2}}`, `\frac{1}{2}`},
		{"deeply nested", `\boxed{\left(\frac{\sqrt{3}}{2}, \frac{1}{2}\right)}`, `\left(\frac{\sqrt{3}}{2}, \frac{1}{2}\right)`},
		{"last boxed wins", `first \boxed{3} then \boxed{4}`, "4"},
		{"escaped braces", `\boxed{\{1, 2\}}`, `\{1, 2\}`},
		{"fbox", `\fbox{12}`, "12"},
		{"boxed space form", `answer \boxed 7 done`, "7"},
		{"boxed beats text", "The answer is 3. \\boxed{4}", "4"},
		{"minerva form", "Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", `$\frac{3}{4}$`},
		{"final answer colon", "work\nFinal Answer: 42", "42"},
		{"final answer sentence", "The final answer is 3.5. Next line", "3.5"},
		{"gsm8k hashes", "She pays 3*4=12 dollars.\n#### 12", "12"},
		{"the answer is", "So the answer is 18 apples.", "18 apples"},
		{"answer colon", "Answer: -7", "-7"},
		{"last marker wins", "The answer is 3.\nActually, the answer is 5.", "5"},
		{"period inside math kept", "The final answer is $1.5.$", "$1.5.$"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractAnswer(tc.response)
			if err != nil {
				t.Fatalf("ExtractAnswer(%q): %v", tc.response, err)
			}
			if got != tc.want {
				t.Fatalf("ExtractAnswer(%q) = %q, want %q", tc.response, got, tc.want)
			}
		})
	}
}

func TestExtractAnswerErrors(t *testing.T) {
	tests := []struct {
		name, response, wantErr string
	}{
		{"empty", "", "empty response"},
		{"spaces", "  \n\t", "empty response"},
		{"no answer", "I think it is 5", "no final answer"},
		{"unclosed boxed", `\boxed{\frac{1}{2}`, "no closing brace"},
		{"empty boxed", `\boxed{}`, "empty"},
		{"huge", strings.Repeat("9", MaxResponseBytes+1), "over the"},
		{"huge answer", `\boxed{` + strings.Repeat("1+", MaxAnswerBytes) + `1}`, "over the"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExtractAnswer(tc.response)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ExtractAnswer = %q, %v; want error containing %q", got, err, tc.wantErr)
			}
		})
	}
}

func TestEquivalent(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		// numbers and fractions
		{"5", "5", true},
		{"5", "6", false},
		{"1/2", "0.5", true},
		{`\frac{1}{2}`, "0.5", true},
		{`\dfrac{1}{2}`, `\frac12`, true},
		{`\tfrac{3}{4}`, "0.75", true},
		{`\frac{2}{4}`, `\frac{1}{2}`, true},
		{`\frac{1}{3}`, "0.33", false},
		{`\frac{1}{3}`, "0.333", false},
		{"-1/2", `-\frac{1}{2}`, true},
		{`\frac{-1}{2}`, "-0.5", true},
		{"1/2", "2/1", false},
		{"007", "7", true},
		{"7.0", "7", true},
		{"7.00", "7", true},
		{"7.01", "7", false},
		{"1,000", "1000", true},
		{"1{,}000", "1000", true},
		{"12,345,678", "12345678", true},
		{"1,000", "100", false},
		{"123456789012345678901", "123456789012345678902", false},
		{"0.1", ".1", true},
		{`2\frac{1}{2}`, "2.5", true},
		{`2\frac12`, `\frac52`, true},
		{"3", "-3", false},
		// percentages
		{`50\%`, "50", true},
		{`50\%`, "0.5", true},
		{"50%", "0.5", true},
		{`50\%`, "5", false},
		{"50", "0.5", false},
		// text wrappers, units, degrees, dollars, spacing
		{`10\text{ cm}`, "10", true},
		{`10 \mbox{inches}`, "10", true},
		{"10 apples", "10", true},
		{"10cm", "10", true},
		{`10\text{ cm}^2`, "10", true},
		{"18 apples", "19", false},
		{`90^\circ`, "90", true},
		{`90^{\circ}`, "90", true},
		{"90°", "90", true},
		{`\$5.50`, "5.5", true},
		{`$\$1,250$`, "1250", true},
		{`\text{Monday}`, "monday", true},
		{`\text{Monday}`, "Tuesday", false},
		{`\text{(B)}`, "B", true},
		{"(c)", "C", true},
		{"(A)", "B", false},
		{`x = 3`, "3", true},
		{`x=3`, "4", false},
		{`3 \, 000`, "3000", true},
		{`\!5`, "5", true},
		{"5.", "5", true},
		// radicals, pi, symbolic
		{`\sqrt{4}`, "2", true},
		{`\sqrt4`, "2", true},
		{`\sqrt{2}`, "1.4142", false},
		{`\sqrt{2}`, "1.4142135623731", true}, // within the 1e-8 relative tolerance
		{`\sqrt{8}`, `2\sqrt{2}`, true},
		{`\sqrt{8}`, `3\sqrt{2}`, false},
		{`\frac{\sqrt{3}}{2}`, `\frac{1}{2}\sqrt{3}`, true},
		{`\sqrt[3]{27}`, "3", true},
		{`2\pi`, `\pi \cdot 2`, true},
		{`2\pi`, `\pi`, false},
		{`\frac{\pi}{4}`, `0.25\pi`, true},
		{"2x+1", "1+2x", true},
		{"2x+1", "2x-1", false},
		{"x^2+2x+1", "(x+1)^2", true},
		{"x^2-1", "(x-1)(x+1)", true},
		{"x^2+1", "(x+1)^2", false},
		{`\frac{x}{2}`, "0.5x", true},
		{"2a+3b", "3b+2a", true},
		{"2a+3b", "2b+3a", false},
		{"x^{-1}", `\frac{1}{x}`, true},
		{"2^{10}", "1024", true},
		{"2^10", "1024", true}, // plain-text reading, not LaTeX's 2^1 0
		{"e^{2x}", "(e^x)^2", true},
		{"3!", "6", true},
		{"5!", "120", true},
		{`\ln(e^2)`, "2", true},
		{`y=2x+1`, `2x+1=y`, true},
		{`y=2x+1`, `y=2x+2`, false},
		{`\left( 1, 2 \right)`, "(1,2)", true},
		// intervals, tuples, sets, lists
		{"(1,2)", "(1, 2)", true},
		{"(1,2)", "(2,1)", false},
		{"[1,2)", "[1,2)", true},
		{"[1,2)", "(1,2)", false},
		{"[1,2]", "[1,2)", false},
		{`(-\infty, 3]`, `(-\infty,3]`, true},
		{`(-\infty, 3]`, `(-\infty,3)`, false},
		{`\left[\frac{1}{2}, 1\right]`, "[0.5,1]", true},
		{"(1,2)", "1,2", true},
		{"(1,2,3)", "(1,2)", false},
		{`\{1,2,3\}`, `\{3,2,1\}`, true},
		{`\{1,2\}`, `\{1,3\}`, false},
		{"2, -3", "-3, 2", true},
		{"2, -3", "-3, 3", false},
		{`(\frac{1}{2}, \sqrt{4})`, "(0.5, 2)", true},
		// garbage never equals anything
		{"", "", false},
		{"", "0", false},
		{"((((", "((((", true}, // identical text is the same answer
		{"((((", "(((", false},
		{`\frac{1}{0}`, "1", false},
		{"abc def", "abc  def", true},
	}
	for _, tc := range tests {
		if got := Equivalent(tc.a, tc.b); got != tc.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v (normal forms %q, %q)", tc.a, tc.b, got, tc.want, normalize(tc.a), normalize(tc.b))
		}
		if got := Equivalent(tc.b, tc.a); got != tc.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v (reversed)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestMathVerify(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, response, answer string
		reward                 float64
		errHas                 string
	}{
		{"boxed fraction", `Thus $\boxed{\dfrac{1}{2}}$.`, "0.5", 1, ""},
		{"minerva", "Final Answer: The final answer is $12$. I hope it is correct.", "12", 1, ""},
		{"wrong", `\boxed{13}`, "12", 0, ""},
		{"reference solution", `\boxed{(1,2)}`, `We get $\boxed{(1, 2)}$ as claimed.`, 1, ""},
		{"last number is not the answer", "2+3=5, so I am not sure; maybe 7", "7", 0, "no final answer"},
		{"empty", "", "7", 0, "empty response"},
		{"no reference", `\boxed{1}`, "", 0, "reference answer is empty"},
		{"garbled", "\x00\xff\\boxed{\xfe", "7", 0, "no closing brace"},
		{"megabyte", strings.Repeat("a", 2<<20) + `\boxed{7}`, "7", 0, "over the"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Math{}.Verify(ctx, tc.response, Reference{Answer: tc.answer})
			if res.Reward != tc.reward || !strings.Contains(res.Error, tc.errHas) || (tc.errHas == "") != (res.Error == "") {
				t.Fatalf("Verify = %+v, want reward %v and error containing %q", res, tc.reward, tc.errHas)
			}
		})
	}
}

func TestGSM8KVerify(t *testing.T) {
	ctx := context.Background()
	ref := "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
	tests := []struct {
		name, response string
		flexible       bool
		reward         float64
		errHas         string
	}{
		{"hashes", "48 + 24 = 72\n#### 72", false, 1, ""},
		{"hashes with comma and dollar", "#### $72.00", false, 1, ""},
		{"boxed", `\boxed{72}`, false, 1, ""},
		{"answer is", "The answer is 72.", false, 1, ""},
		{"wrong", "#### 71", false, 0, ""},
		{"no marker strict", "she sold 72", false, 0, "no final answer"},
		{"no marker flexible", "she sold 72", true, 1, ""},
		{"flexible takes the last number", "72 or maybe 70", true, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := GSM8K{LastNumber: tc.flexible}.Verify(ctx, tc.response, Reference{Answer: ref})
			if res.Reward != tc.reward || !strings.Contains(res.Error, tc.errHas) || (tc.errHas == "") != (res.Error == "") {
				t.Fatalf("Verify = %+v, want reward %v and error containing %q", res, tc.reward, tc.errHas)
			}
		})
	}
}

// FuzzMath feeds arbitrary responses and answers through extraction,
// normalization and comparison: nothing may panic, rewards stay 0 or 1,
// and an answer always equals itself when it parses.
func FuzzMath(f *testing.F) {
	for _, s := range []string{`\boxed{\frac{1}{2}}`, "#### 1,000", `(1,2]`, `\sqrt[3]{x^2}`, "x=3", `\{1,2\}`,
		"((((((((((", `\frac`, `\boxed{`, "^^^", `2^{10^{10^{10}}}`, "99!", `\left(`, "50\\%", "1e400"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, response, answer string) {
		res := Math{}.Verify(context.Background(), response, Reference{Answer: answer})
		if res.Reward != 0 && res.Reward != 1 {
			t.Fatalf("reward %v", res.Reward)
		}
		_ = GSM8K{LastNumber: true}.Verify(context.Background(), response, Reference{Answer: answer})
		_ = Equivalent(response, answer)
		if len(answer) < 200 {
			if e, err := parseExpr(normalize(answer)); err == nil {
				_ = sameValue(e, e)
			}
		}
	})
}
