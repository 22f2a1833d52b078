package offline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"unicode/utf8"

	"github.com/rlnode/rlnode/internal/readfile"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
)

// Bounds on what a trajectory file may hold.
const (
	MaxLineBytes = 1 << 20 // one episode's JSON line
	MaxMessages  = 1024    // messages of one episode
	MaxEpisodes  = 1 << 20 // episodes of one file
)

// Episode is one line of a JSONL trajectory file: an episode of a policy
// acting in an environment, as a chat with the step each assistant
// message took.
//
//	{"env": "equations", "task": "train", "seed": 7, "policy": "scripted",
//	 "messages": [{"role": "user", "content": "Solve for x: 3x + 5 = 14 ..."},
//	              {"role": "assistant", "content": "<action>identify_operation</action>"},
//	              {"role": "user", "content": "x is multiplied by 3 ..."}, ...],
//	 "steps": [{"action": "identify_operation", "reward": 1.5}, ...],
//	 "total": 8.5, "outcome": "solved"}
//
// Messages: an optional system message first, then user and assistant
// messages alternating from a user message; the chat may end with the
// environment's last observation (a user message). Steps[k] belongs to
// the k-th assistant message: the action it took in the action format
// (name or name(param), "" for a turn with none), the reward, and why the
// action was invalid when it was. Total is the sum of the rewards;
// Outcome is the environment's outcome when it named one.
type Episode struct {
	Env      string              `json:"env"`
	Task     string              `json:"task"`
	Seed     int64               `json:"seed"`
	Policy   string              `json:"policy,omitempty"`
	Messages []tokenizer.Message `json:"messages"`
	Steps    []Step              `json:"steps"`
	Total    float64             `json:"total"`
	Outcome  string              `json:"outcome,omitempty"`
}

// Step is one action of an Episode and what it earned.
type Step struct {
	Action  string  `json:"action"`
	Reward  float64 `json:"reward"`
	Invalid string  `json:"invalid,omitempty"`
}

// ErrBadEpisode marks an episode that breaks the format.
var ErrBadEpisode = errors.New("bad episode")

// Check reports the first way e breaks the format.
func (e *Episode) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadEpisode, fmt.Sprintf(format, args...))
	}
	if len(e.Messages) == 0 {
		return bad("messages: none")
	}
	if len(e.Messages) > MaxMessages {
		return bad("messages: %d, more than %d", len(e.Messages), MaxMessages)
	}
	msgs := e.Messages
	if msgs[0].Role == "system" {
		msgs = msgs[1:]
	}
	assistant := 0
	for i, m := range msgs {
		want := "user"
		if i%2 == 1 {
			want = "assistant"
			assistant++
		}
		if m.Role != want {
			return bad("messages[%d]: role %q, want %s (an optional system message, then user and assistant alternating)", i+len(e.Messages)-len(msgs), m.Role, want)
		}
	}
	if assistant == 0 {
		return bad("messages: no assistant message")
	}
	if len(e.Steps) != assistant {
		return bad("steps: %d for %d assistant messages", len(e.Steps), assistant)
	}
	var sum float64
	for k, s := range e.Steps {
		if math.IsNaN(s.Reward) || math.IsInf(s.Reward, 0) {
			return bad("steps[%d].reward: %v is not finite", k, s.Reward)
		}
		sum += s.Reward
	}
	if math.Abs(sum-e.Total) > 1e-6*math.Max(1, math.Abs(sum)) {
		return bad("total: %v, but the steps' rewards sum to %v", e.Total, sum)
	}
	return nil
}

// ReadJSONL reads a trajectory file of Episode lines, checking each. Blank
// lines are skipped; errors name the file and line.
func ReadJSONL(path string) ([]Episode, error) {
	if _, err := readfile.Stat(path); err != nil { // a pipe would block the open
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodeJSONL(path, f)
}

// DecodeJSONL is ReadJSONL of r; name is what errors call it.
func DecodeJSONL(name string, r io.Reader) ([]Episode, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var out []Episode
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if len(out) == MaxEpisodes {
			return nil, fmt.Errorf("%s:%d: more than %d episodes", name, line, MaxEpisodes)
		}
		if !utf8.Valid(b) {
			// The JSON decoder would put U+FFFD in place of the bytes:
			// the text trained on would not be the file's.
			return nil, fmt.Errorf("%s:%d: not UTF-8 at byte %d of the line (a file in another encoding, or one cut mid-character)", name, line, data.InvalidUTF8At(b)+1)
		}
		var e Episode
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%s:%d: not an episode: %w", name, line, err)
		}
		if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
			// A second episode on the line (a lost newline) would be
			// dropped without a word.
			return nil, fmt.Errorf("%s:%d: text after the episode's JSON object (one episode a line)", name, line)
		}
		if err := e.Check(); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: a line over %d bytes", name, line+1, MaxLineBytes)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// WriteJSONL writes episodes one a line.
func WriteJSONL(w io.Writer, episodes []Episode) error {
	bw := bufio.NewWriter(w)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range episodes {
		if err := episodes[i].Check(); err != nil {
			return fmt.Errorf("episode %d: %w", i, err)
		}
		buf.Reset()
		if err := enc.Encode(&episodes[i]); err != nil {
			return fmt.Errorf("episode %d: %w", i, err)
		}
		if buf.Len() > MaxLineBytes {
			return fmt.Errorf("episode %d: %d bytes of JSON, more than the %d a line may hold", i, buf.Len(), MaxLineBytes)
		}
		if _, err := bw.Write(buf.Bytes()); err != nil {
			return err
		}
	}
	return bw.Flush()
}
