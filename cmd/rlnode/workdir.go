package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/internal/bytesize"
	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
)

// workingDirUpload is a working dir packed for a submit (rlnode submit
// --working-dir), in a temporary file until sent.
type workingDirUpload struct {
	dir   string
	file  *os.File
	stats jobs.PackStats
}

// prepareWorkingDir checks the recipe against the working dir dir as the
// node will read it (relative paths from the recipe file's folder when
// inside dir, else from dir's root; --set paths from dir's root), fills
// req's recipe fields for the node to read it, and packs dir.
func prepareWorkingDir(dir string, excludes []string, recipe string, sets []string, req *jobs.SubmitRequest, stdout io.Writer) (*workingDirUpload, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("--working-dir: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("--working-dir %s: not a folder", dir)
	}
	var l *recipes.Loaded
	if recipes.IsBuiltin(recipe) {
		req.SourceName = recipe
		l, err = recipes.LoadIn(recipe, sets, root)
	} else {
		src, rerr := readRecipeText(recipe)
		if rerr != nil {
			return nil, rerr
		}
		from := root
		if abs, aerr := filepath.Abs(filepath.Dir(recipe)); aerr == nil {
			if rel, rerr := filepath.Rel(root, abs); rerr == nil && (rel == "." || filepath.IsLocal(rel)) {
				from = abs
				if rel != "." {
					req.SourceDir = filepath.ToSlash(rel)
				}
			}
		}
		req.SourceName, req.Source = recipe, string(src)
		l, err = recipes.ParseIn(recipe, src, from, root, sets)
	}
	if err == nil {
		err = train.Check(l)
	}
	if err != nil {
		return nil, err
	}
	// A relative path that climbs out of the folder names a file of this
	// host that does not travel: on the node it would resolve beside the
	// run's folder, to whatever is there. A built-in's own paths are the
	// node's built-in data.
	for _, p := range l.RelativePaths() {
		if recipes.IsBuiltin(recipe) && !p.Set {
			continue
		}
		if rel, rerr := filepath.Rel(root, p.Resolved); rerr != nil || (rel != "." && !filepath.IsLocal(rel)) {
			at := recipe
			if pos, ok := l.Pos(p.Field); ok {
				at = pos.String()
			}
			return nil, fmt.Errorf("%s: %s: %s leads out of --working-dir %s (to %s): only the folder travels with the job; move the file into it, or name one the cluster's nodes hold by an absolute path", at, p.Field, p.Written, dir, p.Resolved)
		}
	}
	req.Sets, req.RecipeName = sets, l.Name
	tmp := os.TempDir()
	fmt.Fprintf(stdout, "packing working dir %s in %s\n", dir, tmp)
	if free, ok := tempFree(tmp); ok && free < packReserve+packChunk {
		return nil, packNoRoom(tmp, free)
	}
	f, err := os.CreateTemp(tmp, "rlnode-working-dir-*.tar.gz")
	if err != nil {
		return nil, fmt.Errorf("packing the working dir in %s (the temporary folder: set TMPDIR to choose another): %w", tmp, err)
	}
	// Unlinked at once, read through its descriptor: a submit killed or
	// interrupted (Ctrl-C) while it packs or uploads leaves no package
	// (up to jobs.MaxPackageBytes) in the temporary folder.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	w := &workingDirUpload{dir: dir, file: f}
	if w.stats, err = jobs.PackWorkingDir(root, append(append([]string{}, jobs.DefaultExcludes...), excludes...), &packTarget{f: f, dir: tmp}); err != nil {
		w.remove()
		return nil, err
	}
	req.WorkingDir = w.stats.SHA256
	return w, nil
}

// packReserve is the free space packing leaves in the temporary folder,
// checked before it starts and every packChunk written: that folder may
// be a small tmpfs (memory), and a package may reach jobs.MaxPackageBytes.
const packReserve = 64 << 20

// packChunk is how much packing writes between two looks at the free
// space (a variable so that tests can lower it).
var packChunk int64 = 64 << 20

// tempFree reads the free space of the temporary folder (a variable so
// that tests can make it full).
var tempFree = jobs.DiskFree

func packNoRoom(dir string, free int64) error {
	return fmt.Errorf("packing the working dir in %s (the temporary folder): %s free there, and packing leaves at least %s: set TMPDIR to a folder with room (a package takes up to the folder's size), or --exclude what the run does not read", dir, size(free), size(packReserve))
}

// packTarget writes the package into its file in dir, and fails before a
// write that could leave under packReserve free there, or at one that
// finds the disk full, naming dir.
type packTarget struct {
	f     *os.File
	dir   string
	since int64
}

func (p *packTarget) Write(b []byte) (int, error) {
	if p.since += int64(len(b)); p.since >= packChunk {
		p.since = 0
		if free, ok := tempFree(p.dir); ok && free < packReserve+packChunk {
			return 0, packNoRoom(p.dir, free)
		}
	}
	n, err := p.f.Write(b)
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("packing the working dir in %s (the temporary folder): %w: set TMPDIR to a folder with room", p.dir, err)
	}
	return n, err
}

// send uploads the package to the node c talks to, unless it holds it
// already, saying which on stdout.
func (w *workingDirUpload) send(c jobs.Client, nodeID string, stdout io.Writer) error {
	st := w.stats
	fmt.Fprintf(stdout, "  %d files, %s (packed %s, sha256 %s)", st.Files, size(st.Bytes), size(st.Packed), st.SHA256[:12])
	if st.NExcluded > 0 {
		// Named, so a folder left out by a pattern too broad shows here,
		// not as a file the node lacks.
		names := st.Excluded[:min(len(st.Excluded), 5)]
		more := ""
		if st.NExcluded > len(names) {
			more = fmt.Sprintf(" and %d more", st.NExcluded-len(names))
		}
		fmt.Fprintf(stdout, "; left out %s%s (.git, --exclude)", strings.Join(names, ", "), more)
	}
	fmt.Fprintln(stdout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	has, err := c.HasPackage(ctx, st.SHA256)
	cancel()
	if err != nil {
		return err
	}
	if has {
		fmt.Fprintf(stdout, "  node %s holds it already\n", nodeID)
		return nil
	}
	// No byte for jobs' idle bound fails it; a whole upload is bounded by
	// a rate no network a cluster runs on falls under (1 MiB/s).
	t0 := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute+time.Duration(st.Packed>>20)*time.Second)
	defer cancel()
	sent := &countingReader{r: w.file}
	done := make(chan struct{})
	defer close(done)
	go func() {
		// A line every 10 s while a large upload goes on, so a wait of
		// minutes shows it moves.
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if n := sent.n.Load(); n > 0 {
					fmt.Fprintf(stdout, "  sending: %s of %s (%.1f MiB/s)\n", size(n), size(st.Packed), float64(n)/(1<<20)/time.Since(t0).Seconds())
				}
			}
		}
	}()
	for waiting := false; ; {
		if _, err := w.file.Seek(0, io.SeekStart); err != nil {
			return err
		}
		sent.n.Store(0)
		err := c.UploadPackage(ctx, st.SHA256, sent, st.Packed)
		var he *jobs.HTTPError
		if !errors.As(err, &he) || he.Code != http.StatusConflict {
			if err != nil {
				return fmt.Errorf("upload: %w", err)
			}
			break
		}
		// Another submit of the same folder (a sweep's, beside this one)
		// is sending the node these bytes: they serve this one too once
		// there, or are sent again should that upload fail.
		if !waiting {
			fmt.Fprintf(stdout, "  node %s is receiving the same package from another submit: waiting for it\n", nodeID)
			waiting = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("upload: waiting for another submit's upload of the same package: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
		if has, err := c.HasPackage(ctx, st.SHA256); err != nil {
			return err
		} else if has {
			fmt.Fprintf(stdout, "  node %s holds it now (sent by the other submit)\n", nodeID)
			return nil
		}
	}
	d := time.Since(t0)
	fmt.Fprintf(stdout, "  sent to node %s in %.1f s (%.1f MiB/s)\n", nodeID, d.Seconds(), float64(st.Packed)/(1<<20)/max(d.Seconds(), 1e-3))
	return nil
}

// countingReader counts the bytes read through it (read by another
// goroutine).
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// remove closes the packed file (unlinked when made), which frees it.
func (w *workingDirUpload) remove() {
	if w != nil && w.file != nil {
		w.file.Close()
	}
}

// size is n bytes in binary units ("1.5 MiB").
func size(n int64) string { return bytesize.Format(float64(n)) }
