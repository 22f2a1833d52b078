package train

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/rlnode/rlnode/internal/ctxio"
)

// ManifestFile is a checkpoint's checksum manifest: the SHA-256 of every
// other file under the checkpoint directory, one "HEX  PATH" line each
// (sha256sum's format, paths relative to the directory, sorted), written
// after everything else.
const ManifestFile = "checksums.sha256"

// ErrNoManifest: the checkpoint has no checksum manifest (it was written
// before checkpoints had one), so its files cannot be verified.
var ErrNoManifest = errors.New("no checksum manifest")

// ErrCorrupt: a checkpoint file is missing or differs from its manifest.
var ErrCorrupt = errors.New("fails its checksums")

// WriteManifest writes dir's checksum manifest over every regular file
// under dir, whole or not at all (a temporary file renamed into place).
func WriteManifest(dir string) error { return WriteManifestContext(context.Background(), dir) }

// WriteManifestContext is WriteManifest that checks ctx while it reads
// the files (a large model's take seconds to hash) and gives up, writing
// no manifest, with an error wrapping ctx's, once it is done.
func WriteManifestContext(ctx context.Context, dir string) error {
	var b bytes.Buffer
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ManifestFile || rel == ManifestFile+".tmp" {
			return nil
		}
		sum, err := fileSHA256Context(ctx, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, rel)
		return nil
	})
	if err != nil {
		return fmt.Errorf("checksum manifest of %s: %w", dir, err)
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := writeSynced(tmp, b.Bytes()); err != nil {
		return fmt.Errorf("checksum manifest of %s: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("checksum manifest of %s: %w", dir, err)
	}
	return nil
}

// VerifyCheckpoint checks every file dir's manifest lists against its
// SHA-256. A directory without a manifest inside a checkpoint that has
// one (step-N/feedback) is checked against the entries under it. It
// returns nil, ErrNoManifest, or an error wrapping ErrCorrupt that names
// the first file that is missing or differs.
func VerifyCheckpoint(dir string) error { return VerifyCheckpointContext(context.Background(), dir) }

// VerifyCheckpointContext is VerifyCheckpoint that gives up once ctx is
// done (checked between reads of each file), with an error wrapping
// ctx's: a large checkpoint's files take minutes to hash.
func VerifyCheckpointContext(ctx context.Context, dir string) error {
	entries, root, err := readManifest(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(root, filepath.FromSlash(e.path))
		sum, err := fileSHA256Context(ctx, p)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("checkpoint %s: %w", dir, err) // stopped, not corrupt
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w: %w", dir, ErrCorrupt, err)
		}
		if sum != e.sum {
			return fmt.Errorf("checkpoint %s: %w: %s has SHA-256 %s, its manifest says %s", dir, ErrCorrupt, e.path, sum, e.sum)
		}
	}
	return nil
}

type manifestEntry struct{ sum, path string }

// readManifest reads the manifest that covers dir: dir's own, else its
// parent's entries under dir's name; root is the manifest's directory.
func readManifest(dir string) ([]manifestEntry, string, error) {
	root, prefix := dir, ""
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		root, prefix = filepath.Dir(dir), filepath.Base(dir)+"/"
		if b, err = os.ReadFile(filepath.Join(root, ManifestFile)); errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("checkpoint %s: %w", dir, ErrNoManifest)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	entries, err := parseManifest(b)
	if err != nil {
		return nil, "", fmt.Errorf("checkpoint %s: %w: %s: %w", dir, ErrCorrupt, filepath.Join(root, ManifestFile), err)
	}
	if prefix == "" {
		return entries, root, nil
	}
	var under []manifestEntry
	for _, e := range entries {
		if strings.HasPrefix(e.path, prefix) {
			under = append(under, e)
		}
	}
	if len(under) == 0 {
		return nil, "", fmt.Errorf("checkpoint %s: %w", dir, ErrNoManifest)
	}
	return under, root, nil
}

// parseManifest parses "HEX  PATH" lines; a path must stay inside the
// checkpoint (relative, no "..").
func parseManifest(b []byte) ([]manifestEntry, error) {
	var out []manifestEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		sum, p, ok := strings.Cut(sc.Text(), "  ")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 2*sha256.Size {
			return nil, fmt.Errorf("line %d: want \"SHA256HEX  PATH\"", n)
		}
		if p == "" || path.IsAbs(p) || !filepath.IsLocal(filepath.FromSlash(p)) {
			return nil, fmt.Errorf("line %d: path %q is not inside the checkpoint", n, p)
		}
		out = append(out, manifestEntry{sum, p})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// Skipped is a checkpoint NewestIntact passed over: Dir, and why (Err
// wraps ErrCorrupt for one that fails its checksums; else it is
// incomplete, cut short before its driver state was written).
type Skipped struct {
	Dir string
	Err error
}

func (s Skipped) Error() string { return s.Err.Error() }
func (s Skipped) Unwrap() error { return s.Err }

// NewestIntact returns the newest checkpoint of the run directory out
// (Checkpoints) that is complete (has the driver's state, written after
// the learner's files) and passes its manifest (VerifyCheckpoint).
// skipped says why each newer checkpoint was passed over. A checkpoint
// without a manifest (written before checkpoints had one) is taken,
// unverified: then noManifest is set.
func NewestIntact(out string) (dir string, skipped []Skipped, noManifest bool, err error) {
	cks, err := Checkpoints(out)
	if err != nil {
		return "", nil, false, err
	}
	for i := len(cks) - 1; i >= 0; i-- {
		if err := complete(cks[i]); err != nil {
			skipped = append(skipped, Skipped{cks[i], fmt.Errorf("%s: incomplete (%w)", cks[i], err)})
			continue
		}
		switch err := VerifyCheckpoint(cks[i]); {
		case err == nil:
			return cks[i], skipped, false, nil
		case errors.Is(err, ErrNoManifest):
			return cks[i], skipped, true, nil
		default:
			skipped = append(skipped, Skipped{cks[i], err})
		}
	}
	return "", skipped, false, fmt.Errorf("no complete, intact checkpoint in %s", filepath.Join(out, "checkpoints"))
}

// complete checks that the checkpoint dir was written to its end: its
// driver state is written after the learners' files.
func complete(dir string) error {
	_, err := os.Stat(filepath.Join(dir, DriverStateFile))
	return err
}

// NewestComplete is the newest checkpoint of the run directory out that
// was written to its end ("" when none was), without reading its files
// (NewestIntact checks them).
func NewestComplete(out string) (string, error) {
	cks, err := Checkpoints(out)
	if err != nil {
		return "", err
	}
	for i := len(cks) - 1; i >= 0; i-- {
		if complete(cks[i]) == nil {
			return cks[i], nil
		}
	}
	return "", nil
}

// SetAside renames a checkpoint that a resumed run passed over (s.Dir,
// step-N) to step-N.corrupt or step-N.incomplete (then .corrupt-2, ...
// when taken) and returns the new path. A resumed run writes step-N
// again; without this it would write into the damaged folder, mixing
// its files with the new ones and losing the evidence, and until then
// PruneCheckpoints would count the damaged folder among the newest it
// keeps. The new name is no checkpoint (Checkpoints, PruneCheckpoints
// and --resume pass it by), so it stays until someone removes it.
func SetAside(s Skipped) (string, error) {
	suffix := ".incomplete"
	if errors.Is(s.Err, ErrCorrupt) {
		suffix = ".corrupt"
	}
	to := s.Dir + suffix
	for n := 2; ; n++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		} else if err != nil {
			return "", fmt.Errorf("set aside %s: %w", s.Dir, err)
		}
		to = fmt.Sprintf("%s%s-%d", s.Dir, suffix, n)
	}
	if err := os.Rename(s.Dir, to); err != nil {
		return "", fmt.Errorf("set aside %s: %w", s.Dir, err)
	}
	return to, nil
}

func fileSHA256(p string) (string, error) { return fileSHA256Context(context.Background(), p) }

// fileSHA256Context is fileSHA256 that checks ctx between reads.
var fileSHA256Context = ctxio.FileSHA256

// writeSynced writes b to p and flushes it to disk.
func writeSynced(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
