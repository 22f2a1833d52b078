package dashboard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// Files of a run folder the dashboard reads.
const (
	MetricsFile  = "metrics.jsonl"
	RecipeFile   = "recipe.yaml" // recipes.ResolvedFile
	EndpointFile = "metrics.addr"
)

// Bounds on discovery and on what one request may read.
const (
	maxRuns         = 1000
	maxDirEntries   = 10000 // entries read of one folder
	maxVisited      = 20000 // folders looked at in one search
	maxRecipeBytes  = 1 << 20
	maxScrapeBytes  = 1 << 20
	scrapeTimeout   = time.Second
	quietAfter      = 2 * time.Minute // a run whose metrics were written this recently is "writing"
	etaWindow       = 20              // steps the ETA's pace is taken over
	maxSelectedRuns = 16
)

// Run is one run folder as the runs page lists it.
type Run struct {
	ID      string `json:"id"` // the folder's path, as found under a --runs root
	Name    string `json:"name"`
	Source  string `json:"source,omitempty"` // where the recipe came from (its resolved file's header)
	Status  string `json:"status"`           // running, finished, failed, writing, stopped, empty
	Step    int    `json:"step"`
	Planned int    `json:"planned,omitempty"`
	// ETASeconds is the time the remaining steps take at the pace of the
	// last etaWindow steps, for a run running or writing.
	ETASeconds *float64  `json:"eta_s,omitempty"`
	Rows       int       `json:"rows"`
	Modified   time.Time `json:"modified,omitzero"`
	// Problems says what is wrong with the folder's files (a truncated or
	// unreadable metrics.jsonl, a recipe that does not parse, an endpoint
	// that does not answer), each a sentence.
	Problems []string `json:"problems,omitempty"`
	Endpoint string   `json:"endpoint,omitempty"`
}

// Runs finds run folders under roots and reads them, keeping each run's
// parsed metrics between calls and reading only what was appended since.
// It is safe for concurrent use.
type Runs struct {
	roots []string

	mu     sync.Mutex
	tables map[string]*cachedTable
}

type cachedTable struct {
	mu      sync.Mutex
	table   *Table
	size    int64
	modTime time.Time
	err     error
}

// NewRuns watches the run folders in roots: each root is a run folder
// itself or holds run folders up to two levels down.
func NewRuns(roots []string) *Runs {
	var clean []string
	for _, r := range roots {
		if abs, err := filepath.Abs(r); err == nil {
			clean = append(clean, abs)
		}
	}
	return &Runs{roots: clean, tables: map[string]*cachedTable{}}
}

// Roots returns the folders searched.
func (rs *Runs) Roots() []string { return rs.roots }

// isRunDir says whether dir holds a run (its recipe or its metrics).
func isRunDir(dir string) bool {
	for _, f := range []string{RecipeFile, MetricsFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Find lists the run folders under the roots, sorted, at most maxRuns,
// looking at no more than maxVisited folders.
func (rs *Runs) Find() []string {
	var found []string
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] && len(found) < maxRuns {
			seen[d] = true
			found = append(found, d)
		}
	}
	budget := maxVisited
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		if budget--; budget < 0 {
			return
		}
		if isRunDir(dir) {
			add(dir)
			return
		}
		if depth == 0 || len(found) >= maxRuns {
			return
		}
		f, err := os.Open(dir)
		if err != nil {
			return
		}
		entries, _ := f.ReadDir(maxDirEntries)
		f.Close()
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			// A run's checkpoints are no runs, nor is a job's working dir
			// (jobs.WorkingDirFolder: the submitter's folder, often with
			// its own recipe.yaml) in a run folder its run has not
			// written to yet.
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "checkpoints" && e.Name() != "working_dir" {
				walk(filepath.Join(dir, e.Name()), depth-1)
			}
		}
	}
	for _, r := range rs.roots {
		walk(r, 2)
	}
	sort.Strings(found)
	return found
}

// ErrUnknownRun is returned for a run id that is not a run folder under
// the roots (never found, or deleted since).
var ErrUnknownRun = errors.New("not a run folder under the dashboard's --runs folders")

// Resolve checks that id names a run folder under a root, at most two
// levels down, and returns it cleaned. Nothing outside the roots is read.
func (rs *Runs) Resolve(id string) (string, error) {
	if id == "" || strings.ContainsRune(id, 0) || !filepath.IsAbs(id) {
		return "", fmt.Errorf("run %q: %w", id, ErrUnknownRun)
	}
	dir := filepath.Clean(id)
	for _, r := range rs.roots {
		rel, err := filepath.Rel(r, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		if rel != "." && len(strings.Split(rel, string(filepath.Separator))) > 2 {
			continue
		}
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("run %s: the folder is gone (%w)", dir, err)
		}
		if !isRunDir(dir) {
			return "", fmt.Errorf("run %s: holds neither %s nor %s any more", dir, RecipeFile, MetricsFile)
		}
		return dir, nil
	}
	return "", fmt.Errorf("run %q: %w", id, ErrUnknownRun)
}

// Table returns the run's metrics, read again only as far as the file
// grew since the last call. A file that shrank or was replaced is read
// anew; a missing file gives an empty table.
func (rs *Runs) Table(dir string) (*Table, error) {
	rs.mu.Lock()
	c, ok := rs.tables[dir]
	if !ok {
		if len(rs.tables) >= maxRuns {
			rs.tables = map[string]*cachedTable{} // forget everything rather than grow
		}
		c = &cachedTable{}
		rs.tables[dir] = c
	}
	rs.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Join(dir, MetricsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		c.table, c.size = nil, 0
		return &Table{Columns: map[string][]float64{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if c.table != nil && fi.Size() == c.size && fi.ModTime().Equal(c.modTime) {
		return c.table, c.err
	}
	t := c.table
	if t == nil || fi.Size() < t.Offset || fi.Size() < c.size {
		t = &Table{}
	} else {
		t = t.clone()
	}
	if _, err := f.Seek(t.Offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := t.ReadMore(f); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	c.table, c.size, c.modTime, c.err = t, fi.Size(), fi.ModTime(), nil
	return t, nil
}

// clone copies t's slice headers so appends to the copy leave readers of
// t undisturbed (their lengths do not change).
func (t *Table) clone() *Table {
	c := *t
	c.Columns = make(map[string][]float64, len(t.Columns))
	for k, v := range t.Columns {
		c.Columns[k] = v[:len(v):len(v)]
	}
	c.Steps = t.Steps[:len(t.Steps):len(t.Steps)]
	c.Phases = t.Phases[:len(t.Phases):len(t.Phases)]
	return &c
}

// Recipe reads a run's resolved recipe: its bytes, up to maxRecipeBytes.
func Recipe(dir string) ([]byte, error) {
	path := filepath.Join(dir, RecipeFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecipeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxRecipeBytes {
		return nil, fmt.Errorf("read %s: over %d bytes", path, maxRecipeBytes)
	}
	return b, nil
}

// recipeHead is what the runs page shows of a recipe.
type recipeHead struct {
	Name     string
	Source   string
	Planned  int
	Problems []string
}

func readRecipeHead(dir string) recipeHead {
	var h recipeHead
	b, err := Recipe(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return h
	}
	if err != nil {
		h.Problems = append(h.Problems, err.Error())
		return h
	}
	if first, _, _ := strings.Cut(string(b), "\n"); strings.HasPrefix(first, "# resolved recipe: ") {
		h.Source = strings.TrimPrefix(first, "# resolved recipe: ")
	}
	var r struct {
		Name     string              `yaml:"name"`
		SFT      struct{ Steps int } `yaml:"sft"`
		Schedule struct{ Steps int } `yaml:"schedule"`
	}
	if err := yaml.Unmarshal(b, &r); err != nil {
		h.Problems = append(h.Problems, fmt.Sprintf("%s: %v", filepath.Join(dir, RecipeFile), err))
		return h
	}
	h.Name = r.Name
	if r.SFT.Steps >= 0 && r.Schedule.Steps > 0 {
		h.Planned = r.SFT.Steps + r.Schedule.Steps
	}
	return h
}

// runName is the folder's name, and the recipe's where it differs.
func runName(dir string, head recipeHead) string {
	if head.Name != "" && head.Name != filepath.Base(dir) {
		return filepath.Base(dir) + " (" + head.Name + ")"
	}
	return filepath.Base(dir)
}

// Describe reads one run folder into the runs page's row. now is the
// time its status is judged at.
func (rs *Runs) Describe(ctx context.Context, dir string, now time.Time) Run {
	head := readRecipeHead(dir)
	run := Run{ID: dir, Name: runName(dir, head)}
	run.Source, run.Planned, run.Problems = head.Source, head.Planned, head.Problems
	if _, err := os.Stat(dir); err != nil {
		run.Status = "gone"
		run.Problems = append(run.Problems, fmt.Sprintf("the folder %s is gone", dir))
		return run
	}
	t, err := rs.Table(dir)
	if err != nil {
		run.Problems = append(run.Problems, err.Error())
		t = &Table{}
	}
	run.Rows = t.Rows()
	if t.Truncated {
		run.Problems = append(run.Problems, fmt.Sprintf("%s ends inside a line (still being written, or cut off)", filepath.Join(dir, MetricsFile)))
	}
	if t.BadLines > 0 {
		run.Problems = append(run.Problems, fmt.Sprintf("%s: %d lines are not metrics rows and were skipped", filepath.Join(dir, MetricsFile), t.BadLines))
	}
	if fi, err := os.Stat(filepath.Join(dir, MetricsFile)); err == nil {
		run.Modified = fi.ModTime().UTC().Truncate(time.Second)
	}
	if n := t.Rows(); n > 0 {
		run.Step = int(t.Steps[n-1])
	}
	live := scrapeEndpoint(ctx, dir, &run)
	switch {
	case live != "":
		run.Status = live
	case run.Rows == 0:
		run.Status = "empty"
	case run.Planned > 0 && run.Step >= run.Planned:
		run.Status = "finished"
	case now.Sub(run.Modified) < quietAfter:
		run.Status = "writing"
	default:
		run.Status = "stopped"
	}
	if (run.Status == "running" || run.Status == "writing") && run.Planned > run.Step {
		if pace, ok := stepPace(t); ok {
			eta := float64(run.Planned-run.Step) * pace
			run.ETASeconds = &eta
		}
	}
	return run
}

// stepPace is the mean seconds per step over the last etaWindow steps of
// the table's elapsed_s (a resumed run restarts elapsed_s: the window
// stops there).
func stepPace(t *Table) (float64, bool) {
	el := t.Columns["elapsed_s"]
	var sum float64
	var steps float64
	for i := len(el) - 1; i > 0 && steps < etaWindow; i-- {
		d, ds := el[i]-el[i-1], t.Steps[i]-t.Steps[i-1]
		if !(d > 0) || !(ds > 0) {
			break
		}
		sum += d
		steps += ds
	}
	if steps == 0 {
		return 0, false
	}
	return sum / steps, true
}

// scrapeEndpoint asks a run's metrics endpoint (its address in
// EndpointFile, which `rlnode run --metrics-addr` writes while it runs)
// for its state and step, and returns running, finished or failed, or ""
// with a problem noted when there is none or it does not answer.
func scrapeEndpoint(ctx context.Context, dir string, run *Run) string {
	b, err := os.ReadFile(filepath.Join(dir, EndpointFile))
	if err != nil {
		return ""
	}
	addr := strings.TrimSpace(string(b))
	if _, _, err := net.SplitHostPort(addr); err != nil || len(addr) > 256 {
		run.Problems = append(run.Problems, fmt.Sprintf("%s: not HOST:PORT", filepath.Join(dir, EndpointFile)))
		return ""
	}
	run.Endpoint = "http://" + addr + "/metrics"
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	vals, err := scrape(ctx, run.Endpoint)
	if err != nil {
		run.Problems = append(run.Problems, fmt.Sprintf("metrics endpoint %s does not answer (the run may have been killed): %v", run.Endpoint, err))
		return ""
	}
	if v, ok := vals["rlnode_step"]; ok && int(v) > run.Step {
		run.Step = int(v)
	}
	if v, ok := vals["rlnode_steps_planned"]; ok && v > 0 {
		run.Planned = int(v)
	}
	switch vals["rlnode_run_state"] {
	case 0:
		return "running"
	case 1:
		return "finished"
	default:
		return "failed"
	}
}

// scrape reads the unlabelled-or-run-labelled gauges of a Prometheus text
// exposition at url: name → value, the first sample of each name.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return parseExposition(io.LimitReader(resp.Body, maxScrapeBytes))
}

// parseExposition reads Prometheus text format samples whose name starts
// with rlnode_: name → value of its first sample.
func parseExposition(r io.Reader) (map[string]float64, error) {
	vals := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rlnode_") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		rest := line[len(name):]
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if _, ok := vals[name]; !ok {
			vals[name] = v
		}
	}
	return vals, sc.Err()
}
