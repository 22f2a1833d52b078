package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/traces"
)

// Bounds on what the trace pages read.
const (
	maxStores       = 256              // stores listed
	maxStoreFiles   = 20000            // Parquet files of one store
	maxStoreBytes   = 256 << 20        // Parquet bytes of one store read into memory
	storeLoadLimit  = 20 * time.Second // a request waits this long for a store to load
	cachedStores    = 8                // stores kept in memory
	parallelLoads   = 2
	RunTracesFolder = "traces" // where `rlnode run` records its episodes
)

// TraceStore is a trace store the dashboard reads: one named by --traces,
// or a run folder's traces/.
type TraceStore struct {
	ID   string `json:"id"`            // the folder's path
	Run  string `json:"run,omitempty"` // the run folder it belongs to
	Name string `json:"name"`
}

// TraceStores lists and reads trace stores, keeping the last few read in
// memory until their files change. Safe for concurrent use.
type TraceStores struct {
	dirs []string
	runs *Runs

	mu    sync.Mutex
	cache map[string]*loadedStore
	sem   chan struct{}
}

type loadedStore struct {
	ready   chan struct{}
	stamp   string
	traces  []traces.Trace
	skipped []string
	err     error
	used    time.Time
}

// NewTraceStores reads the stores in dirs and the traces/ folder of every
// run runs finds.
func NewTraceStores(dirs []string, runs *Runs) *TraceStores {
	var clean []string
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil {
			clean = append(clean, abs)
		}
	}
	return &TraceStores{dirs: clean, runs: runs, cache: map[string]*loadedStore{}, sem: make(chan struct{}, parallelLoads)}
}

// List returns the stores: the named ones (whether or not they exist yet),
// then each run's, at most maxStores.
func (ts *TraceStores) List() []TraceStore {
	var out []TraceStore
	seen := map[string]bool{}
	for _, d := range ts.dirs {
		if !seen[d] && len(out) < maxStores {
			seen[d] = true
			out = append(out, TraceStore{ID: d, Name: d})
		}
	}
	if ts.runs != nil {
		for _, run := range ts.runs.Find() {
			d := filepath.Join(run, RunTracesFolder)
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() || seen[d] || len(out) >= maxStores {
				continue
			}
			seen[d] = true
			out = append(out, TraceStore{ID: d, Run: run, Name: runName(run, readRecipeHead(run))})
		}
	}
	return out
}

// ErrUnknownStore is returned for a store id the dashboard does not serve.
var ErrUnknownStore = errors.New("not a trace store of the dashboard's --traces folders or of a run under its --runs folders")

// Resolve checks that id is a named store or the traces/ folder of a run
// folder under the runs roots. Nothing else is read.
func (ts *TraceStores) Resolve(id string) (TraceStore, error) {
	if id == "" || strings.ContainsRune(id, 0) || !filepath.IsAbs(id) {
		return TraceStore{}, fmt.Errorf("trace store %q: %w", id, ErrUnknownStore)
	}
	dir := filepath.Clean(id)
	for _, d := range ts.dirs {
		if d == dir {
			return TraceStore{ID: d, Name: d}, nil
		}
	}
	if ts.runs != nil && filepath.Base(dir) == RunTracesFolder {
		if run, err := ts.runs.Resolve(filepath.Dir(dir)); err == nil {
			return TraceStore{ID: dir, Run: run, Name: runName(run, readRecipeHead(run))}, nil
		}
	}
	return TraceStore{}, fmt.Errorf("trace store %q: %w", id, ErrUnknownStore)
}

// stamp sums up a store's files (names, sizes, times) so a change is
// seen; it refuses a store too large to read into memory.
func stamp(dir string) (string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("trace store %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("trace store %s: not a folder", dir)
	}
	var b strings.Builder
	var files int
	var bytes int64
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".parquet") || path == filepath.Join(dir, traces.AnnotationsFile)) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while listed
		}
		if strings.HasSuffix(path, ".parquet") {
			files++
			bytes += info.Size()
			if files > maxStoreFiles {
				return fmt.Errorf("more than %d Parquet files", maxStoreFiles)
			}
		}
		fmt.Fprintf(&b, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("trace store %s: %w", dir, err)
	}
	if bytes > maxStoreBytes {
		return "", fmt.Errorf("trace store %s: %d MiB of Parquet files, more than the %d MiB the dashboard reads; query it with rlnode traces list --store %s", dir, bytes>>20, maxStoreBytes>>20, dir)
	}
	return b.String(), nil
}

// Traces returns every trace of the store at dir, read again only when its
// files changed, and the files that could not be read. A load that takes
// longer than storeLoadLimit (or ctx) is given up by this call; it goes on
// and the next call finds it done.
func (ts *TraceStores) Traces(ctx context.Context, dir string) ([]traces.Trace, []string, error) {
	st, err := stamp(dir)
	if err != nil {
		return nil, nil, err
	}
	ts.mu.Lock()
	ls := ts.cache[dir]
	if ls == nil || ls.stamp != st {
		ls = &loadedStore{ready: make(chan struct{}), stamp: st, used: time.Now()}
		ts.cache[dir] = ls
		ts.evict()
		go ts.load(dir, ls)
	}
	ls.used = time.Now()
	ts.mu.Unlock()
	timer := time.NewTimer(storeLoadLimit)
	defer timer.Stop()
	select {
	case <-ls.ready:
		return ls.traces, ls.skipped, ls.err
	case <-timer.C:
		return nil, nil, fmt.Errorf("trace store %s: still being read after %v; try again shortly", dir, storeLoadLimit)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

func (ts *TraceStores) load(dir string, ls *loadedStore) {
	ts.sem <- struct{}{}
	defer func() { <-ts.sem; close(ls.ready) }()
	all, skipped, err := traces.Load(dir, traces.Any())
	ls.traces, ls.err = all, err
	for _, s := range skipped {
		ls.skipped = append(ls.skipped, s.String())
	}
}

// evict drops the least recently used stores beyond cachedStores; ts.mu
// is held.
func (ts *TraceStores) evict() {
	if len(ts.cache) <= cachedStores {
		return
	}
	keys := make([]string, 0, len(ts.cache))
	for k := range ts.cache {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return ts.cache[keys[i]].used.Before(ts.cache[keys[j]].used) })
	for _, k := range keys[:len(keys)-cachedStores] {
		delete(ts.cache, k)
	}
}
