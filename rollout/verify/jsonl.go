package verify

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// JSONLConfig says how ScoreJSONL reads its input.
type JSONLConfig struct {
	Name    string    // the input's name in reports (NAME:LINE)
	Code    bool      // lines carry "tests" and "setup" (the code verifier), not "answer"
	Workers int       // lines scored at once (at least 1)
	Report  io.Writer // where bad lines are reported, one per line; nil: nowhere
}

// JSONLSummary counts what ScoreJSONL did.
type JSONLSummary struct {
	Written   int     // lines written, with a reward
	Noted     int     // of them, with an error note
	Bad       int     // lines that are not JSON objects (or too long), left out
	BadFields int     // objects with missing or mistyped fields, written with reward 0
	RewardSum float64 // the rewards written, summed
}

// MaxJSONLLine bounds one input line of ScoreJSONL; a longer one is
// reported and left out rather than read whole.
const MaxJSONLLine = 64 << 20

// jsonlField is one field of an input object, kept in input order.
type jsonlField struct {
	key string
	raw json.RawMessage
}

// jsonlJob is one input line on its way through the workers.
type jsonlJob struct {
	line   int
	fields []jsonlField
	ref    Reference
	resp   string
	bad    string // set when the line cannot be scored: written back with reward 0
	result Result
	done   chan struct{}
}

// ScoreJSONL scores each line of r, a JSON object with "response" and
// "answer" (or, with cfg.Code, "tests" and "setup"), with v on cfg.Workers
// goroutines, and writes each object back to w in input order with all its
// fields plus "reward" and, when the response could not be scored
// normally, "error" (a line's own reward and error are replaced). Lines
// that are not JSON objects are reported as NAME:LINE and left out; an
// object with missing or mistyped fields is reported and written with
// reward 0 and the problem as its error. The error is a read or write
// failure, which stops it.
func ScoreJSONL(ctx context.Context, v Verifier, r io.Reader, w io.Writer, cfg JSONLConfig) (JSONLSummary, error) {
	var sum JSONLSummary
	name, workers, report := cfg.Name, max(cfg.Workers, 1), cfg.Report
	if report == nil {
		report = io.Discard
	}
	jobs := make(chan *jsonlJob)
	order := make(chan *jsonlJob, 4*workers) // bounds how far reading runs ahead of writing
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
				j.result = Result{Error: j.bad}
			}
			sum.Written++
			sum.RewardSum += j.result.Reward
			if j.result.Error != "" {
				sum.Noted++
			}
			err = writeJSONLLine(w, j)
		}
		writeErr <- err
	}()

	var readErr error
	br := bufio.NewReaderSize(r, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, tooLong, err := readLine(br, MaxJSONLLine)
		if err == io.EOF && len(line) == 0 && !tooLong {
			break
		}
		if err != nil && err != io.EOF {
			readErr = fmt.Errorf("%s:%d: %w", name, lineNo, err)
			break
		}
		if tooLong {
			sum.Bad++
			fmt.Fprintf(report, "%s:%d: line longer than %d bytes, left out\n", name, lineNo, MaxJSONLLine)
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		j, perr := parseJSONLLine(line, cfg.Code)
		if perr != nil && j == nil {
			sum.Bad++
			fmt.Fprintf(report, "%s:%d: %v, left out\n", name, lineNo, perr)
			continue
		}
		j.line, j.done = lineNo, make(chan struct{})
		if perr != nil {
			sum.BadFields++
			j.bad = perr.Error()
			fmt.Fprintf(report, "%s:%d: %v\n", name, lineNo, perr)
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

// parseJSONLLine reads one input object. It returns no job for a line
// that is not a JSON object, and a job with an error for an object whose
// fields are missing or of the wrong type (written back with reward 0).
func parseJSONLLine(line []byte, code bool) (*jsonlJob, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	j := &jsonlJob{}
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
		j.fields = append(j.fields, jsonlField{key, raw})
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
	switch {
	case code:
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

// writeJSONLLine writes the line's fields in input order, then reward and
// error.
func writeJSONLLine(w io.Writer, j *jsonlJob) error {
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
