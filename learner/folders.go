package learner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/ctxio"
)

// A learner placed on a host that does not see the driver's run folder
// (hosts joined over the network, sharing no filesystem) is served over
// the bulk path instead: the driver's folder server (ServeFolders) offers
// the folders the learner reads (the model, the KL reference, a
// checkpoint to resume or restart from), which the learner fetches into a
// staging folder on its own node, loads and removes; a checkpoint it
// saves goes to staging, and the driver pulls it into the run folder
// (FetchFolder), checking every file's size and SHA-256 against what the
// learner says it wrote, before the learner removes its copy. The bytes
// of every file are the ones a learner on a shared folder writes.
//
// Whether a learner is staged is decided once, when it is built: it
// stages when it does not see the file Folders.Probe in the run folder.
// A learner that saw it writes into the run folder from then on, as on a
// shared filesystem.

// Folders tells a learner where the driver's folders are served from, for
// when its node does not see the run folder (ActorConfig.Folders).
type Folders struct {
	// Server is the driver's folder server (ServeFolders).
	Server actor.Ref
	// RunDir is the run folder, as the driver names it.
	RunDir string
	// Probe is the name of a file the driver keeps in RunDir while it
	// places learners: a learner that sees it shares the run folder.
	Probe string
}

// FolderFile is one file of a FolderManifest.
type FolderFile struct {
	Name   string
	Size   int64
	SHA256 string // hex
}

// FolderManifest lists the top-level regular files of a folder offered
// on the bulk path, sorted by name.
type FolderManifest struct {
	Dir   string
	Files []FolderFile
}

// Bytes is the manifest's total size.
func (m FolderManifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// ManifestRequest asks a folder server for the manifest of Dir; the reply
// is FolderManifest.
type ManifestRequest struct {
	Dir string
}

// ChunkRequest asks a folder server (the driver's, or a staged learner for
// a checkpoint it saved) to offer bytes [Off, Off+Len) of file Name of Dir
// on its bulk path; the reply is Chunk.
type ChunkRequest struct {
	Dir, Name string
	Off, Len  int64
}

// Chunk names a ChunkRequest's bytes on the server's bulk path.
type Chunk struct {
	Ref actor.BulkRef
}

// StagedDoneRequest tells a staged learner that the driver has the
// checkpoint it saved for Dir: the learner removes its copy. The reply
// is StagedDone.
type StagedDoneRequest struct {
	Dir string
}

// StagedDone acknowledges StagedDoneRequest.
type StagedDone struct{}

// Bounds of the folder transfers: a manifest's files, a chunk, how many
// chunks a server keeps offered at once, and the disk a transfer must
// leave free where it writes.
const (
	MaxFolderFiles = 1024
	FolderChunk    = 64 << 20
	maxChunkOffers = 8
	minFreeAfter   = 256 << 20
	chunkOfferTTL  = 2 * time.Minute
)

// folderServerKind is the folder server's actor kind (a local actor, not
// spawned by name).
const folderServerKind = "learner-folders"

// FolderServer answers ManifestRequest and ChunkRequest for the folders it
// was told to offer (Allow, AllowUnder), read-only: the driver's, for
// learners whose nodes do not see them.
type FolderServer struct {
	sys  *actor.System
	ref  actor.Ref
	name string
	fs   *folderFiles
}

// ServeFolders starts a folder server actor on sys under name. It offers
// nothing until told (Allow).
func ServeFolders(sys *actor.System, name string) (*FolderServer, error) {
	s := &FolderServer{sys: sys, name: name, fs: newFolderFiles()}
	ref, err := sys.SpawnLocal(actor.LocalSpawn{Name: name, Kind: folderServerKind, Factory: func(*actor.Context, any) (actor.Actor, error) {
		return folderServerActor{s}, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("learner: folder server: %w", err)
	}
	s.ref = ref
	return s, nil
}

// Ref is the server's actor, for Folders.Server.
func (s *FolderServer) Ref() actor.Ref { return s.ref }

// Allow offers the folders dirs (their top-level files). Empty names are
// skipped.
func (s *FolderServer) Allow(dirs ...string) { s.fs.allow(false, dirs...) }

// AllowUnder offers every folder inside roots, at any depth (a run's
// checkpoints).
func (s *FolderServer) AllowUnder(roots ...string) { s.fs.allow(true, roots...) }

// Changed tells the server that folder dir was written anew: the
// manifest it computed of it, if any, is dropped (the next reader's
// hashes the files again), and it stays offered as it was.
func (s *FolderServer) Changed(dir string) {
	f := s.fs
	f.mu.Lock()
	delete(f.manifests, filepath.Clean(dir))
	f.mu.Unlock()
}

// Close stops the server.
func (s *FolderServer) Close() { _ = s.sys.StopLocal(s.name, "closed") }

type folderServerActor struct{ s *FolderServer }

// Stopped implements actor.Stopper: chunks still on offer are withdrawn.
func (a folderServerActor) Stopped(*actor.Context) { a.s.fs.releaseAll(a.s.sys) }

func (a folderServerActor) Receive(ctx *actor.Context, msg any) (any, error) {
	switch m := msg.(type) {
	case ManifestRequest:
		dir, plain, err := a.s.fs.allowed(m.Dir)
		if err != nil {
			return nil, err
		}
		return a.s.fs.manifest(ctx.Context(), dir, plain)
	case ChunkRequest:
		dir, plain, err := a.s.fs.allowed(m.Dir)
		if err != nil {
			return nil, err
		}
		return a.s.fs.chunk(ctx.System(), dir, m, plain)
	}
	return nil, fmt.Errorf("learner folder server: unexpected message %T", msg)
}

// folderFiles is what a folder server offers: folders by name, their
// manifests once computed, and the chunks on offer.
type folderFiles struct {
	mu        sync.Mutex
	exact     map[string]bool
	under     []string
	manifests map[string]FolderManifest
	offers    []actor.BulkRef // oldest first
}

func newFolderFiles() *folderFiles {
	return &folderFiles{exact: map[string]bool{}, manifests: map[string]FolderManifest{}}
}

func (f *folderFiles) allow(under bool, dirs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range dirs {
		if d == "" {
			continue
		}
		d = filepath.Clean(d)
		if under {
			f.under = append(f.under, d)
		} else {
			f.exact[d] = true
		}
	}
}

// allowed is dir, cleaned, when the server offers it. plain says it is
// offered as a folder under a root (a run's checkpoints, the vLLM
// weights), which rlnode writes and which holds only plain files: no
// symbolic link may lead there from the root, nor be one of its files.
// A folder offered by name (a model's) is the operator's, links and all
// (a Hugging Face cache's snapshot links to its blobs).
func (f *folderFiles) allowed(dir string) (d string, plain bool, err error) {
	d = filepath.Clean(dir)
	f.mu.Lock()
	exact, under := f.exact[d], slices.Clone(f.under)
	f.mu.Unlock()
	if exact {
		return d, false, nil
	}
	for _, root := range under {
		rel, err := filepath.Rel(root, d)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		if err := noLinkBelow(root, rel); err != nil {
			return "", false, fmt.Errorf("learner folder server: %s: %w", d, err)
		}
		return d, true, nil
	}
	return "", false, fmt.Errorf("learner folder server: %q is not a folder offered to learners", dir)
}

// noLinkBelow refuses a symbolic link on the path from root down to
// root/rel (root itself may be one).
func noLinkBelow(root, rel string) error {
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			return fmt.Errorf("%s is a symbolic link (to %s) below %s, whose folders hold plain files: refused", p, target, root)
		}
	}
	return nil
}

// set records m as dir's manifest (a staged learner's save).
func (f *folderFiles) set(m FolderManifest) {
	f.mu.Lock()
	f.manifests[m.Dir] = m
	f.exact[m.Dir] = true
	f.mu.Unlock()
}

// forget withdraws dir.
func (f *folderFiles) forget(dir string) {
	f.mu.Lock()
	delete(f.manifests, dir)
	delete(f.exact, dir)
	f.mu.Unlock()
}

// manifest is dir's manifest, computed (hashing every file) once; plain
// refuses a file that is a symbolic link.
func (f *folderFiles) manifest(ctx context.Context, dir string, plain bool) (FolderManifest, error) {
	f.mu.Lock()
	m, ok := f.manifests[dir]
	f.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := manifestOf(ctx, dir, plain)
	if err != nil {
		return FolderManifest{}, err
	}
	f.mu.Lock()
	f.manifests[dir] = m
	f.mu.Unlock()
	return m, nil
}

// chunk offers the bytes r asks for, of a file of dir's manifest, once.
// At most maxChunkOffers stay offered: a reader that asks for more
// withdraws its oldest. plain reads a file only if it is no symbolic
// link (one swapped in since the manifest is refused).
func (f *folderFiles) chunk(sys *actor.System, dir string, r ChunkRequest, plain bool) (Chunk, error) {
	f.mu.Lock()
	m, ok := f.manifests[dir]
	f.mu.Unlock()
	if !ok {
		return Chunk{}, fmt.Errorf("learner folder server: chunk of %s: ask for its manifest first", dir)
	}
	i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Name >= r.Name })
	if i == len(m.Files) || m.Files[i].Name != r.Name {
		return Chunk{}, fmt.Errorf("learner folder server: %s has no file %q", dir, r.Name)
	}
	size := m.Files[i].Size
	if r.Off < 0 || r.Len <= 0 || r.Len > FolderChunk || r.Off > size || r.Len > size-r.Off {
		return Chunk{}, fmt.Errorf("learner folder server: %s: bytes [%d, +%d) of a %d-byte file, at most %d at once", filepath.Join(dir, r.Name), r.Off, r.Len, size, FolderChunk)
	}
	open := os.Open
	if plain {
		open = openNoFollow
	}
	file, err := open(filepath.Join(dir, r.Name))
	if err != nil {
		return Chunk{}, fmt.Errorf("learner folder server: %w", err)
	}
	defer file.Close()
	buf := make([]byte, r.Len)
	if _, err := file.ReadAt(buf, r.Off); err != nil {
		return Chunk{}, fmt.Errorf("learner folder server: read %s: %w", file.Name(), err)
	}
	ref := sys.Bulk().Offer(buf, 1, chunkOfferTTL)
	f.mu.Lock()
	f.offers = append(f.offers, ref)
	var old []actor.BulkRef
	if n := len(f.offers) - maxChunkOffers; n > 0 {
		old = append(old, f.offers[:n]...)
		f.offers = append(f.offers[:0], f.offers[n:]...)
	}
	f.mu.Unlock()
	for _, o := range old {
		sys.Bulk().Release(o) // fetched or abandoned by now; a no-op if fetched
	}
	return Chunk{Ref: ref}, nil
}

// releaseAll withdraws the chunks on offer.
func (f *folderFiles) releaseAll(sys *actor.System) {
	f.mu.Lock()
	old := f.offers
	f.offers = nil
	f.mu.Unlock()
	for _, o := range old {
		sys.Bulk().Release(o)
	}
}

// ManifestOf lists dir's top-level regular files (symbolic links
// followed; folders and names beginning with "." left out) with their
// sizes and SHA-256, at most MaxFolderFiles of them.
func ManifestOf(ctx context.Context, dir string) (FolderManifest, error) {
	return manifestOf(ctx, dir, false)
}

// manifestOf is ManifestOf; plain refuses a file that is a symbolic link.
func manifestOf(ctx context.Context, dir string, plain bool) (FolderManifest, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return FolderManifest{}, fmt.Errorf("learner: manifest of %s: %w", dir, err)
	}
	m := FolderManifest{Dir: dir}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if plain && e.Type()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			return FolderManifest{}, fmt.Errorf("learner: manifest of %s: %s is a symbolic link (to %s), in a folder that holds plain files: refused", dir, e.Name(), target)
		}
		st, err := os.Stat(p)
		if err != nil {
			return FolderManifest{}, fmt.Errorf("learner: manifest of %s: %w", dir, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if len(m.Files) == MaxFolderFiles {
			return FolderManifest{}, fmt.Errorf("learner: manifest of %s: more than %d files", dir, MaxFolderFiles)
		}
		sum, err := ctxio.FileSHA256(ctx, p)
		if err != nil {
			return FolderManifest{}, fmt.Errorf("learner: manifest of %s: %w", dir, err)
		}
		m.Files = append(m.Files, FolderFile{Name: e.Name(), Size: st.Size(), SHA256: sum})
	}
	return m, nil
}

// CheckManifest refuses a manifest that another node sent before any of
// its bytes are fetched: names that are not plain file names, or twice;
// negative sizes, or sizes whose sum overflows; malformed hashes; more
// than MaxFolderFiles.
func CheckManifest(m FolderManifest) error {
	if len(m.Files) > MaxFolderFiles {
		return fmt.Errorf("manifest of %s: %d files, at most %d", m.Dir, len(m.Files), MaxFolderFiles)
	}
	seen := map[string]bool{}
	var total int64
	for _, f := range m.Files {
		switch {
		case f.Name == "" || f.Name != filepath.Base(f.Name) || strings.HasPrefix(f.Name, ".") || strings.ContainsAny(f.Name, "/\\\x00"):
			return fmt.Errorf("manifest of %s: file name %q: want a plain name", m.Dir, f.Name)
		case seen[f.Name]:
			return fmt.Errorf("manifest of %s: file %q twice", m.Dir, f.Name)
		case f.Size < 0 || f.Size > math.MaxInt64-total:
			return fmt.Errorf("manifest of %s: file %q of %d bytes", m.Dir, f.Name, f.Size)
		}
		total += f.Size
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("manifest of %s: file %q: SHA-256 %q is not 64 hex digits", m.Dir, f.Name, f.SHA256)
		}
		seen[f.Name] = true
	}
	return nil
}

// FolderCaller sends msg to the actor that serves a folder and returns its
// reply.
type FolderCaller func(ctx context.Context, msg any) (any, error)

// FetchOptions tune FetchFolder.
type FetchOptions struct {
	// Chunk is the bytes asked for at once (≤ FolderChunk; 0: FolderChunk).
	Chunk int64
	// Fetched, when set, is called after each chunk arrives, with the
	// file and how many of its bytes are here.
	Fetched func(f FolderFile, got int64)
}

// FetchFolder fetches the files of m, offered by the actor from calls,
// into dst (which must exist), each through a temporary file renamed to
// its name once its size and SHA-256 match m's; a file that does not
// match, or a transfer that fails midway, leaves nothing of that file in
// dst. m is checked first (CheckManifest), and dst's filesystem must keep
// some room after all of m.
func FetchFolder(ctx context.Context, sys *actor.System, from FolderCaller, m FolderManifest, dst string, o FetchOptions) error {
	if err := CheckManifest(m); err != nil {
		return err
	}
	if free, ok := freeBytes(dst); ok && m.Bytes() > free-minFreeAfter {
		return fmt.Errorf("fetch %s (%d bytes) into %s: %d bytes free there, and %d must stay free", m.Dir, m.Bytes(), dst, free, int64(minFreeAfter))
	}
	chunk := o.Chunk
	if chunk <= 0 || chunk > FolderChunk {
		chunk = FolderChunk
	}
	for _, f := range m.Files {
		if err := fetchFile(ctx, sys, from, m.Dir, f, dst, chunk, o.Fetched); err != nil {
			return fmt.Errorf("fetch %s from %s: %w", f.Name, m.Dir, err)
		}
	}
	return nil
}

func fetchFile(ctx context.Context, sys *actor.System, from FolderCaller, dir string, f FolderFile, dst string, chunk int64, fetched func(FolderFile, int64)) error {
	// Under a temporary name until every byte is in and hashes right.
	return atomicfile.Write(filepath.Join(dst, f.Name), 0o644, func(w io.Writer) error {
		h := sha256.New()
		for off := int64(0); off < f.Size; {
			n := min(chunk, f.Size-off)
			if err := fetchChunk(ctx, sys, from, ChunkRequest{Dir: dir, Name: f.Name, Off: off, Len: n}, w, h); err != nil {
				return fmt.Errorf("bytes [%d, %d) of %d: %w", off, off+n, f.Size, err)
			}
			off += n
			if fetched != nil {
				fetched(f, off)
			}
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
			return fmt.Errorf("SHA-256 %s, the sender said %s: refused", sum, f.SHA256)
		}
		return nil
	})
}

// chunkAsks is how often a reader asks for one chunk whose offer the
// server withdrew before the reader fetched it: the server keeps
// maxChunkOffers on offer, and more readers at once than that (servers
// staging one model together) withdraw each other's.
const chunkAsks = 20

// fetchChunk fetches one chunk and appends it to w and h.
func fetchChunk(ctx context.Context, sys *actor.System, from FolderCaller, r ChunkRequest, w io.Writer, h hash.Hash) error {
	// It must keep arriving: 2 minutes, and 1 s per 64 MiB.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(r.Len>>26)*time.Second)
	defer cancel()
	for ask := 1; ; ask++ {
		reply, err := from(cctx, r)
		if err != nil {
			return err
		}
		c, ok := reply.(Chunk)
		if !ok {
			return fmt.Errorf("reply %T, want learner.Chunk", reply)
		}
		if c.Ref.Size != r.Len {
			return fmt.Errorf("offered %d bytes for a chunk of %d: refused", c.Ref.Size, r.Len)
		}
		data, err := sys.Bulk().Fetch(cctx, c.Ref)
		if errors.Is(err, actor.ErrBulkAbsent) {
			if ask == chunkAsks {
				return fmt.Errorf("its offer was withdrawn %d times before it could be fetched (more readers at once than the %d chunks the server keeps on offer): %w", ask, maxChunkOffers, err)
			}
			// Apart from the readers it raced with, then again.
			if err := ctxio.Sleep(cctx, time.Duration(ask)*time.Duration(1+rand.IntN(10))*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if int64(len(data)) != r.Len {
			return fmt.Errorf("got %d bytes for a chunk of %d", len(data), r.Len)
		}
		h.Write(data)
		_, err = w.Write(data)
		return err
	}
}

// Staging is a staged learner's side of the transfers (see Folders): the
// folders it fetched to load, and the checkpoint it saved and holds for
// the driver to pull. Its folder is removed by Close.
type Staging struct {
	sys   *actor.System
	src   Folders
	root  string
	saves *folderFiles
	saved string // the staged save's folder, if any
	n     int
}

// OpenStaging is the staging of a learner built with f on sys's node:
// nil when f is nil or the node sees the run folder (the probe file is
// there). Its folder is under the node's home ($RLNODE_HOME, default
// ~/.rlnode) in staging/, named by the process and self, the learner's
// actor name; folders left there by processes that are gone are removed.
func OpenStaging(sys *actor.System, f *Folders, self string) (*Staging, error) {
	if f == nil || f.Probe == "" || f.RunDir == "" {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(f.RunDir, f.Probe)); err == nil {
		return nil, nil
	}
	base := filepath.Join(stagingHome(), "staging")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, fmt.Errorf("learner: staging: %w", err)
	}
	sweepStaging(base)
	root, err := os.MkdirTemp(base, fmt.Sprintf("%d-%s-", os.Getpid(), sanitize(self)))
	if err != nil {
		return nil, fmt.Errorf("learner: staging: %w", err)
	}
	return &Staging{sys: sys, src: *f, root: root, saves: newFolderFiles()}, nil
}

// stagingHome is the node's home folder (cluster.Home, which this
// package may not import): $RLNODE_HOME, else ~/.rlnode, else a folder
// of this user's in the temporary folder.
func stagingHome() string {
	if h := os.Getenv("RLNODE_HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".rlnode")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("rlnode-%d", os.Getuid()))
}

// sanitize keeps an actor name usable in a file name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '.' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// sweepStaging removes the staging folders in base whose process is gone
// (a node killed mid-transfer).
func sweepStaging(base string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, _, ok := strings.Cut(e.Name(), "-")
		var n int
		if _, err := fmt.Sscanf(pid, "%d", &n); !ok || err != nil || n <= 0 || n == os.Getpid() {
			continue
		}
		if !processAlive(n) {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// Root is the staging folder.
func (s *Staging) Root() string { return s.root }

// Close withdraws the chunks on offer and removes the staging folder.
func (s *Staging) Close() {
	if s.sys != nil {
		s.saves.releaseAll(s.sys)
	}
	_ = os.RemoveAll(s.root)
}

// Fetch copies the driver's folder dir into a new staging folder and
// returns it, and done, which removes it.
func (s *Staging) Fetch(ctx context.Context, dir string) (local string, done func(), err error) {
	from := func(ctx context.Context, msg any) (any, error) { return s.sys.Call(ctx, s.src.Server, msg) }
	mctx, cancel := context.WithTimeout(ctx, 10*time.Minute) // the server hashes the folder first
	reply, err := from(mctx, ManifestRequest{Dir: dir})
	cancel()
	if err != nil {
		return "", nil, fmt.Errorf("learner: fetch %s from the driver: manifest: %w", dir, err)
	}
	m, ok := reply.(FolderManifest)
	if !ok {
		return "", nil, fmt.Errorf("learner: fetch %s from the driver: reply %T, want a manifest", dir, reply)
	}
	s.n++
	local = filepath.Join(s.root, fmt.Sprintf("in-%d", s.n))
	if err := os.Mkdir(local, 0o700); err != nil {
		return "", nil, fmt.Errorf("learner: staging: %w", err)
	}
	done = func() { _ = os.RemoveAll(local) }
	if err := FetchFolder(ctx, s.sys, from, m, local, FetchOptions{}); err != nil {
		done()
		return "", nil, fmt.Errorf("learner: fetch %s from the driver %s: %w", dir, s.src.Server.Address, err)
	}
	return local, done, nil
}

// Save runs save into a new staging folder for the driver's dir and
// offers what it wrote: the manifest for Saved.Staged. An earlier save
// not yet pulled is dropped (the driver pulls each before the next).
func (s *Staging) Save(ctx context.Context, dir string, save func(local string) error) (*FolderManifest, error) {
	s.dropSaved()
	if free, ok := freeBytes(s.root); ok && free < minFreeAfter {
		return nil, fmt.Errorf("learner: save %s: staging %s has %d bytes free, under %d", dir, s.root, free, int64(minFreeAfter))
	}
	s.n++
	local := filepath.Join(s.root, fmt.Sprintf("save-%d", s.n))
	if err := os.Mkdir(local, 0o700); err != nil {
		return nil, fmt.Errorf("learner: staging: %w", err)
	}
	s.saved = local
	if err := save(local); err != nil {
		s.dropSaved()
		return nil, err
	}
	m, err := ManifestOf(ctx, local)
	if err != nil {
		s.dropSaved()
		return nil, err
	}
	s.saves.set(m)
	out := m
	out.Dir = local
	return &out, nil
}

func (s *Staging) dropSaved() {
	if s.saved != "" {
		s.saves.forget(s.saved)
		_ = os.RemoveAll(s.saved)
		s.saved = ""
	}
}

// Serve answers the driver's ChunkRequest and StagedDoneRequest for the
// staged save; ok is false for any other message.
func (s *Staging) Serve(msg any) (reply any, ok bool, err error) {
	switch m := msg.(type) {
	case ChunkRequest:
		if s.saved == "" || filepath.Clean(m.Dir) != s.saved {
			return nil, true, fmt.Errorf("learner: no staged checkpoint %q here", m.Dir)
		}
		c, err := s.saves.chunk(s.sys, s.saved, m, true)
		return c, true, err
	case StagedDoneRequest:
		if s.saved != "" && filepath.Clean(m.Dir) == s.saved {
			s.dropSaved()
		}
		return StagedDone{}, true, nil
	}
	return nil, false, nil
}

// Listed is a staged learner's answer to a ListRequest.
func (s *Staging) Listed() Listed {
	host, _ := os.Hostname()
	return Listed{Host: host, Addr: s.sys.Address(), Staged: true}
}

// OpenActor builds the learner of an actor spawned with cfg on ctx's
// node (the learner and learner-shard kinds), staging the folders it
// reads when the node does not see the run folder (Staging nil
// otherwise). The learner's Config keeps the driver's folder names,
// which its checkpoints record.
func OpenActor(ctx *actor.Context, cfg ActorConfig) (*Learner, *Staging, error) {
	st, err := OpenStaging(ctx.System(), cfg.Folders, ctx.Self().Name)
	if err != nil || st == nil {
		if err != nil {
			return nil, nil, err
		}
		l, err := NewContext(ctx.Context(), cfg.Config)
		if err != nil {
			return nil, nil, err
		}
		if cfg.ResumeDir != "" {
			if err := l.LoadContext(ctx.Context(), cfg.ResumeDir); err != nil {
				l.Close() // the device's memory goes back
				return nil, nil, err
			}
		}
		return l, nil, nil
	}
	l, err := openStaged(ctx.Context(), st, cfg)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return l, st, nil
}

func openStaged(ctx context.Context, st *Staging, cfg ActorConfig) (*Learner, error) {
	local := cfg.Config
	for _, d := range []*string{&local.ModelDir, &local.RefModelDir} {
		if *d == "" {
			continue
		}
		dir, done, err := st.Fetch(ctx, *d)
		if err != nil {
			return nil, err
		}
		defer done()
		*d = dir
	}
	l, err := NewContext(ctx, local)
	if err != nil {
		return nil, err
	}
	// Loaded: the driver's names again (learner_state.json records the
	// reference's).
	l.cfg.ModelDir, l.cfg.RefModelDir = cfg.Config.ModelDir, cfg.Config.RefModelDir
	if cfg.ResumeDir != "" {
		if err := st.Load(ctx, cfg.ResumeDir, func(dir string) error { return l.LoadContext(ctx, dir) }); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Load fetches the driver's checkpoint dir, runs load on the staged copy,
// and removes it.
func (s *Staging) Load(ctx context.Context, dir string, load func(local string) error) error {
	local, done, err := s.Fetch(ctx, dir)
	if err != nil {
		return err
	}
	defer done()
	return load(local)
}
