package jobs

// Uploaded working directories (workdir.go), kept by a node by their
// SHA-256 until a submit unpacks one into its job's run folder:
//
//	GET /packages/{sha256}   → 200 {"sha256", "bytes"}, or 404
//	PUT /packages/{sha256}   the package's bytes → 201 (200: held already)
//
// The name is the content's hash, so a package is checked whole before it
// is kept, the same folder submitted again (a sweep) is not sent again,
// and a submit names exactly the bytes it was checked with.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/internal/rundir"
)

const (
	// PackageTTL is how long a node keeps a package after it was last
	// uploaded or submitted.
	PackageTTL = time.Hour
	// MaxPackagesBytes bounds the packages a node keeps together.
	MaxPackagesBytes = 8 << 30
	// uploadPrefix begins the name of an upload's file until it is
	// checked and renamed SHA256.tar.gz.
	uploadPrefix = ".upload-"
)

// Time bounds of an upload (variables so that tests can lower them).
var (
	// uploadIdle is how long an upload may go without a byte arriving.
	uploadIdle = time.Minute
	// uploadMinRate is the slowest an upload may come on average, in
	// bytes a second, after uploadIdle: one that trickles a byte a
	// minute would otherwise hold its room against the bound, its file
	// and its connection for years.
	uploadMinRate int64 = 64 << 10
)

var shaPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// packageStore is a folder of packages, one file SHA256.tar.gz each.
type packageStore struct {
	dir   string
	now   func() time.Time
	limit int64 // the bytes it keeps at most; 0: MaxPackagesBytes

	mu        sync.Mutex
	uploading map[string]bool
	// reserved is the bytes announced by the uploads in progress here,
	// and temps their files: an upload is counted against limit from its
	// start, at its whole size, so uploads beside each other cannot pass
	// it together.
	reserved int64
	temps    map[string]bool
}

// errUploading: another request uploads the same package now.
var errUploading = errors.New("being uploaded by another request: try again once it is done")

// errNoRoom: the node keeps MaxPackagesBytes already.
var errNoRoom = errors.New("no room for more packages")

func (s *packageStore) path(sha string) string { return filepath.Join(s.dir, sha+".tar.gz") }

// has says whether the package is held, with its size, and keeps it
// another PackageTTL.
func (s *packageStore) has(sha string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hasLocked(sha)
}

// hasLocked is has with mu held: a sweep, which holds it too, cannot
// remove the package between the look and the new time, so a package
// has (a GET) confirmed lives PackageTTL more, past the submit that names
// it; one that is gone by the time its time moves on is not held.
func (s *packageStore) hasLocked(sha string) (int64, bool) {
	fi, err := os.Stat(s.path(sha))
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	afterPackageStat(s)
	now := s.now()
	if err := os.Chtimes(s.path(sha), now, now); err != nil {
		return 0, false
	}
	return fi.Size(), true
}

// afterPackageStat runs between has's look at a package and its new time
// (tests sweep there).
var afterPackageStat = func(*packageStore) {}

// sweep removes the packages unused for PackageTTL, and uploads left
// torn by a node that died or by a request that ended (a live upload
// writes at least every uploadIdle, or is cut off), and returns the
// bytes of those left, less this store's uploads in progress (counted in
// reserved). Called with mu held.
func (s *packageStore) sweep() int64 {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0
	}
	var held int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || s.temps[e.Name()] {
			continue
		}
		ttl := PackageTTL
		if strings.HasPrefix(e.Name(), uploadPrefix) {
			ttl = 2 * uploadIdle
		}
		if s.now().Sub(fi.ModTime()) > ttl {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
			continue
		}
		held += fi.Size()
	}
	return held
}

// put reads a package from r (size bytes, or -1 when unknown) and keeps
// it as sha, once its bytes hash to sha. It says whether it was held
// already.
func (s *packageStore) put(sha string, size int64, r io.Reader) (held bool, err error) {
	if _, ok := s.has(sha); ok {
		return true, nil
	}
	if size > MaxPackageBytes {
		return false, fmt.Errorf("%d bytes: over the %d GiB a package may hold", size, MaxPackageBytes>>30)
	}
	s.mu.Lock()
	if s.uploading[sha] {
		s.mu.Unlock()
		return false, errUploading
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		s.mu.Unlock()
		return false, err
	}
	limit := s.limit
	if limit <= 0 {
		limit = MaxPackagesBytes
	}
	if kept := s.sweep() + s.reserved; kept+max(size, 0) > limit {
		s.mu.Unlock()
		return false, fmt.Errorf("%w: this node keeps %.1f GiB of uploaded working dirs (uploads in progress included), and %d bytes more would pass its bound of %.1f GiB (each is kept %v after its last use)", errNoRoom, float64(kept)/(1<<30), size, float64(limit)/(1<<30), PackageTTL)
	}
	if err := checkDisk(s.dir, s.reserved+max(size, 0)); err != nil {
		s.mu.Unlock()
		return false, fmt.Errorf("%w: %v", errNoRoom, err)
	}
	f, err := os.CreateTemp(s.dir, uploadPrefix+"*")
	if err != nil {
		s.mu.Unlock()
		return false, err
	}
	if s.temps == nil {
		s.temps = map[string]bool{}
	}
	tmp := filepath.Base(f.Name())
	s.uploading[sha], s.temps[tmp] = true, true
	s.reserved += max(size, 0)
	s.mu.Unlock()
	defer func() {
		_ = os.Remove(f.Name()) // gone once renamed
		s.mu.Lock()
		delete(s.uploading, sha)
		delete(s.temps, tmp)
		s.reserved -= max(size, 0)
		s.mu.Unlock()
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(&diskChecked{w: f, dir: s.dir}, h), io.LimitReader(r, MaxPackageBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return false, fmt.Errorf("reading the package: %w", err)
	case n > MaxPackageBytes:
		return false, fmt.Errorf("over the %d GiB a package may hold", MaxPackageBytes>>30)
	case size >= 0 && n != size:
		return false, fmt.Errorf("%d bytes came of the %d announced", n, size)
	case hex.EncodeToString(h.Sum(nil)) != sha:
		return false, fmt.Errorf("its %d bytes do not hash to %s (SHA-256): changed on the way, or misnamed", n, sha)
	}
	if err := os.Rename(f.Name(), s.path(sha)); err != nil {
		return false, err
	}
	return false, nil
}

// diskChecked writes to w, and fails once a write would leave less than
// diskReserve free in dir (checked every 64 MiB): an upload of unknown
// size is bounded by the disk too.
type diskChecked struct {
	w     io.Writer
	dir   string
	since int64
}

func (d *diskChecked) Write(b []byte) (int, error) {
	if d.since += int64(len(b)); d.since >= 64<<20 {
		d.since = 0
		if err := checkDisk(d.dir, 64<<20); err != nil {
			return 0, err
		}
	}
	return d.w.Write(b)
}

// open opens a held package to unpack it, and keeps it another
// PackageTTL.
func (s *packageStore) open(sha string) (*os.File, error) {
	// Opened under mu: a sweep may remove it after, not before (an open
	// file is read whole on removal too).
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.hasLocked(sha); !ok {
		return nil, fmt.Errorf("working dir package %s: this node holds no such package (uploads are kept %v after their last use): upload it again (rlnode submit --working-dir does)", sha, PackageTTL)
	}
	return os.Open(s.path(sha))
}

// PackageInfo answers GET and PUT /packages/{sha256}.
type PackageInfo struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// servePackages adds the package routes.
func servePackages(node *cluster.Node, store *packageStore) {
	node.HandleControl("GET /packages/{sha}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sha, ok := packageName(w, r, store)
		if !ok {
			return
		}
		size, ok := store.has(sha)
		if !ok {
			http.Error(w, "package "+sha+": not held here", http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, PackageInfo{SHA256: sha, Bytes: size})
	}))
	node.HandleControlStream("PUT /packages/{sha}", MaxPackageBytes, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sha, ok := packageName(w, r, store)
		if !ok {
			return
		}
		if r.ContentLength < 0 {
			// Its size is counted against the node's bound before its
			// first byte is kept.
			http.Error(w, "package "+sha[:12]+": send its size (Content-Length): an upload of unknown size is refused", http.StatusLengthRequired)
			return
		}
		// The endpoint's read timeout is made for small requests: an
		// upload may take minutes, and is cut off when no byte comes for
		// uploadIdle, or when it comes slower than uploadMinRate.
		body := &idleReader{r: r.Body, rc: http.NewResponseController(w),
			deadline: time.Now().Add(uploadIdle + time.Duration(r.ContentLength/uploadMinRate)*time.Second)}
		held, err := store.put(sha, r.ContentLength, body)
		_ = body.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, errNoRoom) {
				code = http.StatusInsufficientStorage
			} else if errors.Is(err, errUploading) {
				code = http.StatusConflict
			}
			http.Error(w, "package "+sha[:12]+": "+err.Error(), code)
			return
		}
		code := http.StatusCreated
		if held {
			code = http.StatusOK
		}
		size, _ := store.has(sha)
		writeJSON(w, code, PackageInfo{SHA256: sha, Bytes: size})
	}))
}

// packageName is the package r's path names, or false once r is answered:
// a name that is no SHA-256, or a node that keeps no packages.
func packageName(w http.ResponseWriter, r *http.Request, store *packageStore) (string, bool) {
	sha := r.PathValue("sha")
	switch {
	case !shaPattern.MatchString(sha):
		http.Error(w, "package: want its SHA-256, 64 lowercase hex digits", http.StatusBadRequest)
		return "", false
	case store == nil:
		http.Error(w, "package: this node takes no working dirs (it is no rlnode start or join node)", http.StatusServiceUnavailable)
		return "", false
	}
	return sha, true
}

// idleReader moves the connection's read deadline on before every read,
// uploadIdle ahead, never past the whole upload's deadline, and says
// which of the two a read that timed out passed.
type idleReader struct {
	r        io.Reader
	rc       *http.ResponseController
	deadline time.Time
}

func (i *idleReader) Read(p []byte) (int, error) {
	next := time.Now().Add(uploadIdle)
	if next.After(i.deadline) {
		next = i.deadline
	}
	_ = i.rc.SetReadDeadline(next)
	n, err := i.r.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if time.Now().Before(i.deadline) {
			err = fmt.Errorf("no byte came for %v: %w", uploadIdle, err)
		} else {
			err = fmt.Errorf("it came slower than %d KiB/s on average, the least this node takes: %w", uploadMinRate>>10, err)
		}
	}
	return n, err
}

// HasPackage says whether the node holds the package sha (and keeps it
// another PackageTTL).
func (c Client) HasPackage(ctx context.Context, sha string) (bool, error) {
	var in PackageInfo
	err := c.getJSON(ctx, http.MethodGet, "/packages/"+sha, nil, &in)
	var he *HTTPError
	if errors.As(err, &he) && he.Code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// UploadPackage sends the package in file (size bytes, hashing to sha) to
// the node.
func (c Client) UploadPackage(ctx context.Context, sha string, file io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+c.Control+"/packages/"+sha, io.NopCloser(file))
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	c.authorize(req, sha)
	// Bounded by ctx, not by the client's timeout (made for requests
	// that answer within minutes; an upload may take longer).
	hc := *c.client()
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &HTTPError{Code: resp.StatusCode, Msg: strings.TrimSpace(string(msg))}
	}
	return nil
}

// madeRunDir is the run folder a working-dir submit unpacked into: undone
// (what it made removed) unless kept, once the job is spawned.
type madeRunDir struct {
	out, workingDir string
	madeOut         bool // the run folder was made (or reserved) for this submit
	madeWorkingDir  bool // its working_dir was made by this submit
	kept            bool
}

func (m *madeRunDir) keep() {
	if m != nil {
		m.kept = true
	}
}

func (m *madeRunDir) undo() {
	if m == nil || m.kept {
		return
	}
	// A working_dir made by another submit into the same folder is
	// that one's, whole or still unpacking.
	if m.madeWorkingDir {
		_ = os.RemoveAll(m.workingDir)
	}
	if m.madeOut {
		_ = os.Remove(m.out) // only while empty
	}
}

// MaxUnpacks bounds the working dirs a node unpacks at once: each writes
// up to MaxWorkingDirBytes, and submits beside each other, a stranger's
// among them, must not share the node's disk and CPU among more.
const MaxUnpacks = 2

// unpacking holds the turns of the unpacks a node runs.
var unpacking = make(chan struct{}, MaxUnpacks)

// unpackWait is how long a submit waits for its turn to unpack (a
// variable so that tests can lower it): a minute of the SubmitTime its
// client waits for an answer, the recipe's check (MaxCheckTime) after it.
var unpackWait = time.Minute

// unpackTurn waits for a turn to unpack, within unpackWait and while
// ctx lasts, and returns what gives it back.
func unpackTurn(ctx context.Context, node interface{ ID() string }) (func(), error) {
	timer := time.NewTimer(unpackWait)
	defer timer.Stop()
	select {
	case unpacking <- struct{}{}:
		return func() { <-unpacking }, nil
	case <-timer.C:
		return nil, fmt.Errorf("node %s is unpacking %d other working dirs (its most at once), and this one's turn did not come within %v: not submitted; try again", node.ID(), MaxUnpacks, unpackWait)
	case <-ctx.Done():
		return nil, fmt.Errorf("not submitted: the request ended while waiting for its turn to unpack the working dir on node %s (%v)", node.ID(), ctx.Err())
	}
}

// outChecked runs once a working-dir submit found its run folder new or
// empty, before it claims it (tests run a rival submit here).
var outChecked = func() {}

// unpackWorkingDir unpacks req's working dir package into its run folder:
// req.Out (absolute, new or empty) or, without one, cfg.RunsDir/RECIPE-DATE
// reserved here.
func unpackWorkingDir(ctx context.Context, node interface{ ID() string }, cfg Config, req SubmitRequest) (*madeRunDir, int, error) {
	host.Lock()
	store := host.store
	host.Unlock()
	sd := filepath.FromSlash(req.SourceDir)
	switch {
	case store == nil:
		return nil, http.StatusBadRequest, fmt.Errorf("node %s takes no working dirs (it is no rlnode start or join node)", node.ID())
	case !shaPattern.MatchString(req.WorkingDir):
		return nil, http.StatusBadRequest, errors.New("working_dir: want a package's SHA-256, 64 lowercase hex digits")
	case req.Recipe != "" || (req.Source == "" && req.SourceName == ""):
		return nil, http.StatusBadRequest, errors.New("working_dir: the node reads the recipe in it: send its text (source) or a built-in's name (source_name), not a resolved recipe")
	case req.Resume:
		return nil, http.StatusBadRequest, errors.New("working_dir with resume: a run continues with the working dir its folder holds (RUN/" + WorkingDirFolder + ")")
	case req.SourceDir != "" && (!filepath.IsLocal(sd) || len(req.SourceDir) > maxEntryName):
		return nil, http.StatusBadRequest, fmt.Errorf("source_dir %q: want a relative path inside the working dir", clip(req.SourceDir))
	case req.Out != "" && !filepath.IsAbs(req.Out):
		return nil, http.StatusBadRequest, fmt.Errorf("out %s: want an absolute path", req.Out)
	}
	release, err := unpackTurn(ctx, node)
	if err != nil {
		return nil, http.StatusServiceUnavailable, err
	}
	defer release()
	f, err := store.open(req.WorkingDir)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	defer f.Close()
	m := &madeRunDir{out: filepath.Clean(req.Out)}
	switch {
	case req.Out == "" && cfg.RunsDir == "":
		return nil, http.StatusBadRequest, fmt.Errorf("node %s has no runs folder for a job submitted without --out", node.ID())
	case req.Out == "":
		// The recipe's name, as a run folder without a working dir is
		// named (the node checks the recipe only after it unpacked it:
		// this is the submitter's word, a name CheckName takes or none);
		// else its file's.
		base := req.RecipeName
		if CheckName(base) != nil {
			base = req.SourceName
			if len(req.Source) == 0 {
				base = filepath.Base(base)
			} else {
				base = strings.TrimSuffix(filepath.Base(base), filepath.Ext(base))
			}
		}
		if CheckName(base) != nil {
			base = "job"
		}
		if m.out, err = rundir.Reserve(filepath.Join(cfg.RunsDir, base+"-"+time.Now().Format("20060102-150405"))); err != nil {
			return nil, http.StatusInternalServerError, fmt.Errorf("run folder under %s (node %s): %w", cfg.RunsDir, node.ID(), err)
		}
		m.madeOut = true
	default:
		entries, err := os.ReadDir(m.out)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if err := os.MkdirAll(filepath.Dir(m.out), 0o755); err != nil {
				return nil, http.StatusBadRequest, fmt.Errorf("run folder %s (node %s): %w", m.out, node.ID(), err)
			}
			// Made here, or by a submit beside this one (its working_dir,
			// made first, tells it from this one below).
			merr := os.Mkdir(m.out, 0o755)
			if merr != nil && !errors.Is(merr, fs.ErrExist) {
				return nil, http.StatusBadRequest, fmt.Errorf("run folder %s (node %s): %w", m.out, node.ID(), merr)
			}
			m.madeOut = merr == nil
		case err != nil:
			return nil, http.StatusBadRequest, fmt.Errorf("run folder %s (node %s): %w", m.out, node.ID(), err)
		case len(entries) == 1 && entries[0].Name() == WorkingDirFolder:
			// A submit whose node died while it unpacked (its run never
			// began), or one unpacking there now.
			return nil, http.StatusConflict, fmt.Errorf("run folder %s (node %s) holds only %s: a submit unpacks there now, or one whose node stopped while it unpacked left it (no run began there): once no submit runs, remove the folder or choose another --out", m.out, node.ID(), WorkingDirFolder)
		case len(entries) > 0:
			return nil, http.StatusConflict, fmt.Errorf("run folder %s (node %s) is not empty: a job with a working dir starts in a new or empty folder", m.out, node.ID())
		}
	}
	m.workingDir = filepath.Join(m.out, WorkingDirFolder)
	outChecked()
	// Making working_dir claims the folder: of two submits into it at
	// once, one makes it, the other is refused and removes nothing.
	if err := os.Mkdir(m.workingDir, 0o755); err != nil {
		m.undo()
		if errors.Is(err, fs.ErrExist) {
			return nil, http.StatusConflict, fmt.Errorf("run folder %s (node %s) is not empty: another submit unpacks its working dir there", m.out, node.ID())
		}
		return nil, http.StatusBadRequest, fmt.Errorf("run folder %s (node %s): %w", m.out, node.ID(), err)
	}
	m.madeWorkingDir = true
	if _, err := unpackInto(ctx, f, m.workingDir); err != nil {
		m.undo()
		return nil, http.StatusBadRequest, fmt.Errorf("node %s: %w", node.ID(), err)
	}
	if req.SourceDir != "" && !isDir(filepath.Join(m.workingDir, sd)) {
		m.undo()
		return nil, http.StatusBadRequest, fmt.Errorf("source_dir %q: no such folder in the working dir", req.SourceDir)
	}
	return m, 0, nil
}
