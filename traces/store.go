package traces

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Store layout under its root folder:
//
//	date=YYYY-MM-DD/source=NAME/part-<unix-nanos>-<seq>.parquet
//	index.jsonl       one line per Parquet file: rows, time range, source
//	annotations.jsonl rewards given after the fact (rlnode traces annotate)
//	writer.lock       held (flock) by the one writer
//
// The partition folders are Hive-style, so DuckDB, Spark or pyarrow read
// the same tree from a folder or an object-store prefix.
const (
	IndexFile       = "index.jsonl"
	AnnotationsFile = "annotations.jsonl"
	LockFile        = "writer.lock"
)

// ErrLocked is returned by OpenWriter when another writer holds the store.
var ErrLocked = errors.New("store is locked by another writer")

// ErrBehind is returned by Add while the writer's buffer is full.
var ErrBehind = errors.New("trace store is not keeping up: spans refused")

// WriterOptions bound a writer's memory and loss.
type WriterOptions struct {
	// FlushInterval is the longest a span waits in memory before it is in
	// a Parquet file: a killed writer loses at most this much (default 1s).
	FlushInterval time.Duration
	// MaxBuffered flushes early when this many spans wait (default 65536);
	// while 4 × MaxBuffered wait (flushes failing: a full disk), Add
	// refuses more with ErrBehind.
	MaxBuffered int
	// MaxBufferedBytes bounds the same in bytes of span text and ids
	// (default 256 MiB), since one span may carry megabytes.
	MaxBufferedBytes int64
	// OnError is told about a flush that failed (default: ignored; the
	// spans stay buffered and the next flush tries again).
	OnError func(error)
}

// Writer appends spans to a store. It is the store's only writer: it
// holds writer.lock for its lifetime. Safe for concurrent use.
type Writer struct {
	root string
	lock *os.File
	opt  WriterOptions

	mu       sync.Mutex
	buf      []Span
	inflight int   // spans a flush has taken and not written yet
	bufBytes int64 // spanBytes of buf
	inBytes  int64 // spanBytes of the spans in flight
	seq      int
	written  int64
	flushMu  sync.Mutex // one flush at a time
	closed   bool
	kick     chan struct{}
	done     chan struct{}
	stopped  chan struct{}
}

// OpenWriter takes the store at root (created if missing) for writing and
// starts flushing every opt.FlushInterval. It fails with ErrLocked while
// another process (or another Writer in this one) holds the store.
func OpenWriter(root string, opt WriterOptions) (*Writer, error) {
	if opt.FlushInterval <= 0 {
		opt.FlushInterval = time.Second
	}
	if opt.MaxBuffered <= 0 {
		opt.MaxBuffered = 1 << 16
	}
	if opt.MaxBufferedBytes <= 0 {
		opt.MaxBufferedBytes = 256 << 20
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("trace store %s: %w", root, err)
	}
	lf, err := os.OpenFile(filepath.Join(root, LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trace store %s: lock: %w", root, err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(lf.Name())
		lf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("trace store %s: %w (%s holds %s)", root, ErrLocked, strings.TrimSpace(string(holder)), LockFile)
		}
		return nil, fmt.Errorf("trace store %s: lock: %w", root, err)
	}
	lf.Truncate(0)
	fmt.Fprintf(lf, "pid %d\n", os.Getpid())
	w := &Writer{root: root, lock: lf, opt: opt, kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go w.loop()
	return w, nil
}

// Root is the store's folder.
func (w *Writer) Root() string { return w.root }

// Add buffers spans; they reach disk within the flush interval. Start and
// End are kept to the microsecond.
func (w *Writer) Add(spans ...Span) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("trace store %s: writer is closed", w.root)
	}
	if waiting := len(w.buf) + w.inflight; waiting+len(spans) > 4*w.opt.MaxBuffered {
		return fmt.Errorf("trace store %s: %w (%d spans wait to be written)", w.root, ErrBehind, waiting)
	}
	size := spanBytes(spans)
	// A batch larger than the bound alone passes when nothing waits.
	if waiting := w.bufBytes + w.inBytes; waiting > 0 && waiting+size > w.opt.MaxBufferedBytes {
		return fmt.Errorf("trace store %s: %w (%d bytes of spans wait to be written)", w.root, ErrBehind, waiting)
	}
	w.buf = append(w.buf, spans...)
	w.bufBytes += size
	if len(w.buf) >= w.opt.MaxBuffered || w.bufBytes >= w.opt.MaxBufferedBytes/4 {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Written is the number of spans flushed so far.
func (w *Writer) Written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

func (w *Writer) loop() {
	defer close(w.stopped)
	t := time.NewTicker(w.opt.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		case <-w.kick:
		}
		if err := w.Flush(); err != nil && w.opt.OnError != nil {
			w.opt.OnError(err)
		}
	}
}

// Flush writes the buffered spans now: one Parquet file per date and
// source partition, each written to a temporary name, synced and renamed,
// then listed in the index.
func (w *Writer) Flush() error {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	spans := w.buf
	w.buf = nil
	w.inflight = len(spans)
	w.inBytes, w.bufBytes = w.bufBytes, 0
	w.mu.Unlock()
	if len(spans) == 0 {
		return nil
	}
	defer func() {
		w.mu.Lock()
		w.inflight, w.inBytes = 0, 0
		w.mu.Unlock()
	}()
	parts := map[string][]Span{}
	var order []string
	for _, s := range spans {
		dir := partition(s.Start, s.Source)
		if _, ok := parts[dir]; !ok {
			order = append(order, dir)
		}
		parts[dir] = append(parts[dir], s)
	}
	var failed []Span
	var firstErr error
	for _, dir := range order {
		if err := w.writePart(dir, parts[dir]); err != nil {
			failed = append(failed, parts[dir]...)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		w.mu.Lock()
		w.written += int64(len(parts[dir]))
		w.mu.Unlock()
	}
	if len(failed) > 0 {
		w.mu.Lock()
		w.buf = append(failed, w.buf...)
		w.bufBytes += spanBytes(failed)
		w.inflight, w.inBytes = 0, 0
		w.mu.Unlock()
	}
	return firstErr
}

// spanBytes is about the memory spans hold: their text and ids.
func spanBytes(spans []Span) int64 {
	var n int
	for i := range spans {
		s := &spans[i]
		n += len(s.Name) + len(s.StatusMessage) + len(s.Source) + len(s.Operation) + len(s.Provider) +
			len(s.RequestModel) + len(s.ResponseModel) + len(s.ConversationID) + len(s.AgentName) +
			len(s.InputMessages) + len(s.OutputMessages) + len(s.ToolName) + len(s.ToolCallID) +
			len(s.ToolArguments) + len(s.ToolResult) + len(s.ErrorType) + len(s.RunID) + len(s.Policy) +
			len(s.Attributes) + 4*(len(s.PromptTokenIDs)+len(s.OutputTokenIDs)+len(s.OutputLogprobs)) + 256
		for _, f := range s.FinishReasons {
			n += len(f)
		}
		for _, r := range s.Rewards {
			n += len(r.Name) + len(r.Reason) + 48
		}
	}
	return int64(n)
}

func (w *Writer) writePart(dir string, spans []Span) error {
	w.mu.Lock()
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	rel := filepath.Join(dir, fmt.Sprintf("part-%d-%d-%06d.parquet", time.Now().UnixNano(), os.Getpid(), seq))
	path := filepath.Join(w.root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("trace store %s: %w", w.root, err)
	}
	tmp := path + ".tmp"
	if err := writeParquet(tmp, spans); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("trace store %s: write %s: %w", w.root, rel, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("trace store %s: %w", w.root, err)
	}
	e := indexEntryOf(filepath.ToSlash(rel), spans)
	line, _ := json.Marshal(e)
	f, err := os.OpenFile(filepath.Join(w.root, IndexFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("trace store %s: index: %w", w.root, err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("trace store %s: index: %w", w.root, err)
	}
	return f.Sync()
}

// writeParquet writes spans to a new Parquet file at path, synced.
func writeParquet(path string, spans []Span) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := encodeParquet(f, spans); err != nil {
		return err
	}
	return f.Sync()
}

func encodeParquet(f io.Writer, spans []Span) error {
	rec := record(spans)
	defer rec.Release()
	// The Parquet writer would close f if it could; the caller owns it.
	pw, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{f},
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.DefaultWriterProps())
	if err != nil {
		return err
	}
	if err := pw.Write(rec); err != nil {
		pw.Close()
		return err
	}
	return pw.Close()
}

// Close flushes what is buffered and releases the store.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.done)
	<-w.stopped
	err := w.Flush()
	w.lock.Truncate(0)
	syscall.Flock(int(w.lock.Fd()), syscall.LOCK_UN)
	w.lock.Close()
	return err
}

// partition is the folder of a span: its UTC date and its source.
func partition(start time.Time, source string) string {
	return filepath.Join("date="+start.UTC().Format("2006-01-02"), "source="+escapeSource(source))
}

// escapeSource keeps a source name to one safe path element: letters,
// digits, '-', '_' and '.' stay, everything else (and a leading '.')
// becomes %XX, as Hive partition values are escaped.
func escapeSource(s string) string {
	if s == "" {
		return "unknown"
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 200; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0 {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
		}
	}
	return b.String()
}

// indexEntry describes one Parquet file of the store.
type indexEntry struct {
	File     string    `json:"file"`
	Rows     int       `json:"rows"`
	Source   string    `json:"source"`
	MinStart time.Time `json:"min_start"`
	MaxStart time.Time `json:"max_start"`
	Traces   int       `json:"traces"`
}

func indexEntryOf(rel string, spans []Span) indexEntry {
	e := indexEntry{File: rel, Rows: len(spans), Source: spans[0].Source, MinStart: spans[0].Start.UTC(), MaxStart: spans[0].Start.UTC()}
	ids := map[[16]byte]bool{}
	for _, s := range spans {
		if s.Start.Before(e.MinStart) {
			e.MinStart = s.Start.UTC()
		}
		if s.Start.After(e.MaxStart) {
			e.MaxStart = s.Start.UTC()
		}
		ids[s.TraceID] = true
	}
	e.Traces = len(ids)
	e.MinStart = e.MinStart.Truncate(time.Microsecond)
	e.MaxStart = e.MaxStart.Truncate(time.Microsecond)
	return e
}
