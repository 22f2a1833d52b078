package verify

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxResponseBytes is the longest response the math verifiers read; a
// longer one scores 0 with an error note rather than being searched.
const MaxResponseBytes = 1 << 20

// MaxAnswerBytes is the longest extracted answer that is compared; final
// answers are short, and a longer one is a sign of a garbled response.
const MaxAnswerBytes = 2000

// ErrNoAnswer is returned by the extractors when a response holds no
// answer in any of the forms they look for.
var ErrNoAnswer = errors.New("no final answer found")

// ExtractAnswer finds the final answer of a math response. It looks, in
// order, for
//
//  1. the last \boxed{...} or \fbox{...} (nested braces kept whole; also
//     "\boxed 5");
//  2. the last "The final answer is X" (covering Minerva's "Final Answer:
//     The final answer is $X$. I hope it is correct.") or "Final Answer: X";
//  3. the last GSM8K-style "#### X";
//  4. the last "The answer is X" or "Answer: X".
//
// It does not fall back to the last number of the text: a response that
// states no answer has none. The forms 2-4 take the rest of the line, up
// to a sentence end.
func ExtractAnswer(response string) (string, error) {
	if len(response) > MaxResponseBytes {
		return "", fmt.Errorf("response is %d bytes, over the %d-byte limit", len(response), MaxResponseBytes)
	}
	if strings.TrimSpace(response) == "" {
		return "", errors.New("empty response")
	}
	if ans, ok, err := lastBoxed(response); err != nil {
		return "", err
	} else if ok {
		return checkAnswer(ans)
	}
	for _, marker := range []*regexp.Regexp{finalAnswerRE, hashesRE, answerIsRE} {
		if ans, ok := afterLastMarker(response, marker); ok {
			return checkAnswer(ans)
		}
	}
	return "", ErrNoAnswer
}

func checkAnswer(ans string) (string, error) {
	ans = strings.TrimSpace(ans)
	if ans == "" {
		return "", errors.New("the final answer is empty")
	}
	if len(ans) > MaxAnswerBytes {
		return "", fmt.Errorf("the final answer is %d bytes, over the %d-byte limit", len(ans), MaxAnswerBytes)
	}
	return ans, nil
}

var (
	finalAnswerRE = regexp.MustCompile(`(?i)final answer(?: is|:)(?:\s*the final answer is)?`)
	hashesRE      = regexp.MustCompile(`####`)
	answerIsRE    = regexp.MustCompile(`(?i)(?:the )?answer(?: is|:)`)
	lastNumberRE  = regexp.MustCompile(`-?\d[\d,]*(?:\.\d+)?`)
)

// afterLastMarker returns the text after the last match of marker, up to
// the end of its line and of its sentence.
func afterLastMarker(s string, marker *regexp.Regexp) (string, bool) {
	locs := marker.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		return "", false
	}
	rest := s[locs[len(locs)-1][1]:]
	rest = strings.TrimLeft(rest, " \t:")
	if i := strings.IndexAny(rest, "\r\n"); i >= 0 {
		rest = rest[:i]
	}
	rest = cutSentence(rest)
	rest = strings.TrimSpace(rest)
	return rest, rest != ""
}

// cutSentence ends s at "I hope it is correct" or at a period followed by
// a space or the end (a decimal point is followed by a digit), outside any
// $...$ math.
func cutSentence(s string) string {
	if i := strings.Index(strings.ToLower(s), "i hope it is correct"); i >= 0 {
		s = s[:i]
	}
	inMath := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '$':
			inMath = !inMath
		case '.':
			if !inMath && (i+1 == len(s) || s[i+1] == ' ') {
				return s[:i]
			}
		}
	}
	return s
}

// lastBoxed returns the content of the last \boxed or \fbox. It fails on a
// \boxed{ whose brace never closes.
func lastBoxed(s string) (string, bool, error) {
	at := -1
	name := ""
	for _, n := range []string{`\boxed`, `\fbox`} {
		if i := strings.LastIndex(s, n); i > at {
			at, name = i, n
		}
	}
	if at < 0 {
		return "", false, nil
	}
	rest := s[at+len(name):]
	trimmed := strings.TrimLeft(rest, " ")
	if strings.HasPrefix(trimmed, "{") {
		end, ok := matchBrace(trimmed, 0)
		if !ok {
			return "", false, fmt.Errorf("%s{ at byte %d has no closing brace", name, at)
		}
		return trimmed[1:end], true, nil
	}
	if len(trimmed) == len(rest) {
		// \boxedx is another command, not \boxed.
		return "", false, nil
	}
	// "\boxed 5": the argument runs to the next space or dollar.
	end := strings.IndexAny(trimmed, " $\n")
	if end < 0 {
		end = len(trimmed)
	}
	return trimmed[:end], trimmed[:end] != "", nil
}

// matchBrace returns the index of the brace closing the one at s[open],
// skipping escaped braces (\{ and \}).
func matchBrace(s string, open int) (int, bool) {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return i, true
			}
		}
	}
	return 0, false
}

// ExtractGSM8K finds the final answer of a GSM8K-style response: the last
// "#### N", else whatever ExtractAnswer finds; with lastNumber set, the
// last number of the text when neither exists (the flexible GSM8K match).
func ExtractGSM8K(response string, lastNumber bool) (string, error) {
	if len(response) > MaxResponseBytes {
		return "", fmt.Errorf("response is %d bytes, over the %d-byte limit", len(response), MaxResponseBytes)
	}
	if ans, ok := afterLastMarker(response, hashesRE); ok {
		return checkAnswer(ans)
	}
	ans, err := ExtractAnswer(response)
	if errors.Is(err, ErrNoAnswer) && lastNumber {
		nums := lastNumberRE.FindAllString(response, -1)
		if len(nums) > 0 {
			return nums[len(nums)-1], nil
		}
	}
	return ans, err
}
