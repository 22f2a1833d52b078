package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/rlnode/rlnode/rollout/verify"
)

func init() { commands["verify"] = verifyCommand }

const verifyUsage = `usage:
  rlnode verify --task math|gsm8k|code --in FILE.jsonl [--out FILE.jsonl]
                [--workers N] [--sandbox auto|bwrap|rlimit] [--last-number]
      score model responses offline. Each input line is a JSON object:
        math, gsm8k: {"response": "...", "answer": "..."}
        code:        {"response": "...", "tests": ["assert ...", ...], "setup": "..."}
      Each line is written back (to --out, or stdout) in input order with
      all its fields, plus "reward" (0..1) and, when the response could not
      be scored normally, "error". Lines that are not JSON objects are
      reported on stderr as FILE:LINE and left out; the others go on.
      Exit status 1 when any line was bad.
`

// maxVerifyLine bounds one input line; a longer one is reported and
// skipped rather than read whole.
const maxVerifyLine = 64 << 20

func verifyCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage) }
	task := fs.String("task", "", "math, gsm8k or code")
	in := fs.String("in", "", "input JSONL file")
	out := fs.String("out", "", "output JSONL file (default stdout)")
	workers := fs.Int("workers", runtime.NumCPU(), "lines scored at once")
	sandboxMode := fs.String("sandbox", "auto", "code sandbox: auto (bwrap when it works), bwrap or rlimit")
	lastNumber := fs.Bool("last-number", false, "gsm8k: take the last number of a response that states no answer")
	err := parseFlags(fs, args, "task", "in")
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && *workers < 1 {
		err = usageError{fmt.Errorf("--workers %d: want at least 1", *workers)}
	}
	var v verify.Verifier
	if err == nil {
		switch *task {
		case "math":
			v = verify.Math{}
		case "gsm8k":
			v = verify.GSM8K{LastNumber: *lastNumber}
		case "code":
			mode := *sandboxMode
			if mode == "auto" {
				mode = ""
			}
			var sb *verify.Sandbox
			sb, err = verify.NewSandbox(verify.SandboxConfig{Mode: mode, Concurrency: *workers})
			if err == nil {
				fmt.Fprintf(stderr, "rlnode verify: sandbox %s\n", sb.Isolation())
				v = verify.Code{Sandbox: sb}
			}
		default:
			err = usageError{fmt.Errorf("--task %q: want math, gsm8k or code", *task)}
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rlnode verify: %v\n\n%s", err, verifyUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}

	f, err := os.Open(*in)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}
	defer f.Close()
	w := stdout
	var outFile *os.File
	if *out != "" {
		outFile, err = os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
			return 1
		}
		w = outFile
	}
	bw := bufio.NewWriter(w)
	sum, err := verifyLines(context.Background(), v, *task, *in, f, bw, stderr, *workers)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	if outFile != nil {
		if cerr := outFile.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode verify: %v\n", err)
		return 1
	}
	mean := 0.0
	if sum.scored > 0 {
		mean = sum.reward / float64(sum.scored)
	}
	fmt.Fprintf(stderr, "rlnode verify: %d lines written, mean reward %.4f, %d with an error note, %d bad lines left out\n",
		sum.scored, mean, sum.noted, sum.bad)
	if sum.bad > 0 || sum.badFields > 0 {
		return 1
	}
	return 0
}

// verifyField is one field of an input object, kept in input order.
type verifyField struct {
	key string
	raw json.RawMessage
}

// verifyJob is one input line on its way through the workers.
type verifyJob struct {
	line   int
	fields []verifyField
	ref    verify.Reference
	resp   string
	bad    string // set when the line cannot be scored: written back with reward 0
	result verify.Result
	done   chan struct{}
}

type verifySummary struct {
	scored, noted, bad, badFields int
	reward                        float64
}

// verifyLines scores each line of r with at most workers at once and
// writes the results to w in input order.
func verifyLines(ctx context.Context, v verify.Verifier, task, name string, r io.Reader, w io.Writer, stderr io.Writer, workers int) (verifySummary, error) {
	var sum verifySummary
	jobs := make(chan *verifyJob)
	order := make(chan *verifyJob, 4*workers) // bounds how far reading runs ahead of writing
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.result = v.Verify(ctx, j.resp, j.ref)
				close(j.done)
			}
		}()
	}
	writeErr := make(chan error, 1)
	go func() {
		var err error
		for j := range order {
			<-j.done
			if err != nil {
				continue // drain
			}
			if j.bad != "" {
				j.result = verify.Result{Error: j.bad}
			}
			sum.scored++
			sum.reward += j.result.Reward
			if j.result.Error != "" {
				sum.noted++
			}
			err = writeVerified(w, j)
		}
		writeErr <- err
	}()

	var readErr error
	br := bufio.NewReaderSize(r, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(br, maxVerifyLine)
		if err == io.EOF && len(line) == 0 && !tooLong {
			break
		}
		if err != nil && err != io.EOF {
			readErr = fmt.Errorf("%s:%d: %w", name, lineNo, err)
			break
		}
		if tooLong {
			sum.bad++
			fmt.Fprintf(stderr, "%s:%d: line longer than %d bytes, left out\n", name, lineNo, maxVerifyLine)
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		j, perr := parseVerifyLine(line, task)
		if perr != nil && j == nil {
			sum.bad++
			fmt.Fprintf(stderr, "%s:%d: %v, left out\n", name, lineNo, perr)
			continue
		}
		j.line, j.done = lineNo, make(chan struct{})
		if perr != nil {
			sum.badFields++
			j.bad = perr.Error()
			fmt.Fprintf(stderr, "%s:%d: %v\n", name, lineNo, perr)
			close(j.done)
			order <- j
			continue
		}
		order <- j
		jobs <- j
	}
	close(jobs)
	close(order)
	wg.Wait()
	if err := <-writeErr; err != nil && readErr == nil {
		readErr = err
	}
	return sum, readErr
}

// readLine reads one line without its newline. A line over max is
// consumed and reported as too long.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return line, tooLong, err
		}
		if !tooLong {
			if len(line)+len(chunk) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if !isPrefix {
			return line, tooLong, nil
		}
	}
}

// parseVerifyLine reads one input object. It returns no job for a line
// that is not a JSON object, and a job with an error for an object whose
// fields are missing or of the wrong type (written back with reward 0).
func parseVerifyLine(line []byte, task string) (*verifyJob, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	j := &verifyJob{}
	values := map[string]json.RawMessage{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %w", err)
		}
		key, _ := k.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("not JSON: field %q: %w", key, err)
		}
		values[key] = raw
		if key == "reward" || key == "error" {
			continue // replaced by this run's verdict
		}
		j.fields = append(j.fields, verifyField{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("not JSON: data after the object")
	}

	str := func(key string, required bool) (string, error) {
		raw, ok := values[key]
		if !ok || string(raw) == "null" {
			if required {
				return "", fmt.Errorf("field %q is missing", key)
			}
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s, nil
		}
		// A numeric answer (GSM8K's 72) is its own text.
		var n json.Number
		if key == "answer" && json.Unmarshal(raw, &n) == nil {
			return n.String(), nil
		}
		return "", fmt.Errorf("field %q: want a string, got %s", key, truncateRaw(raw))
	}
	if j.resp, err = str("response", true); err != nil {
		return j, err
	}
	switch task {
	case "code":
		raw, ok := values["tests"]
		if !ok {
			return j, errors.New(`field "tests" is missing`)
		}
		if err := json.Unmarshal(raw, &j.ref.Tests); err != nil {
			return j, fmt.Errorf(`field "tests": want a list of strings, got %s`, truncateRaw(raw))
		}
		if j.ref.Setup, err = str("setup", false); err != nil {
			return j, err
		}
	default:
		if j.ref.Answer, err = str("answer", true); err != nil {
			return j, err
		}
	}
	return j, nil
}

func truncateRaw(raw json.RawMessage) string {
	if len(raw) > 40 {
		return string(raw[:40]) + "..."
	}
	return string(raw)
}

// writeVerified writes the line's fields in input order, then reward and
// error.
func writeVerified(w io.Writer, j *verifyJob) error {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, f := range j.fields {
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(f.raw)
		b.WriteByte(',')
	}
	b.WriteString(`"reward":`)
	b.WriteString(strconv.FormatFloat(j.result.Reward, 'g', -1, 64))
	if j.result.Error != "" {
		e, _ := json.Marshal(j.result.Error)
		b.WriteString(`,"error":`)
		b.Write(e)
	}
	b.WriteString("}\n")
	_, err := w.Write(b.Bytes())
	return err
}
