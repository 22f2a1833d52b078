package jobs

// A job's working directory: a folder of the submitting host (datasets,
// model folders, the recipe) packed into a tar.gz, uploaded to a node
// (packages.go) and unpacked into the job's run folder, where the
// recipe's relative paths resolve. Packing is deterministic (sorted
// entries, no times, owners or modes but the executable bit), so the
// same folder packs to the same bytes and a node that holds them is not
// sent them again. Unpacking takes plain files and folders only, at
// local paths, within bounds: a package is a stranger's upload.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Bounds of a working directory.
const (
	// MaxPackageBytes bounds a packed working directory, as uploaded.
	MaxPackageBytes = 2 << 30
	// MaxWorkingDirBytes bounds the bytes of its files, unpacked.
	MaxWorkingDirBytes = 4 << 30
	// MaxWorkingDirFiles bounds its files and folders.
	MaxWorkingDirFiles = 100_000
	// maxEntryName bounds a path inside it.
	maxEntryName = 1024
)

// unpackFiles and unpackBytes are the bounds UnpackWorkingDir applies
// (variables so that tests can lower them).
var (
	unpackFiles       = MaxWorkingDirFiles
	unpackBytes int64 = MaxWorkingDirBytes
)

// diskReserve is the free space a node keeps on the filesystem it
// unpacks and stores working dirs on: an upload or unpack that would
// leave less is refused, so that a stranger's package cannot fill the
// disk the node's runs write their checkpoints to.
const diskReserve = 1 << 30

// diskFree reads the free space where a node writes (a variable so that
// tests can make a disk full).
var diskFree = statfsFree

// DiskFree is the bytes an unprivileged writer may still put on the
// filesystem that holds dir; ok is false where it cannot be read (the
// submitting host checks its temporary folder with it).
func DiskFree(dir string) (free int64, ok bool) { return statfsFree(dir) }

// checkDisk refuses writing n more bytes into dir when that would leave
// less than diskReserve free there.
func checkDisk(dir string, n int64) error {
	free, ok := diskFree(dir)
	if ok && free-n < diskReserve {
		return fmt.Errorf("%s has %.2f GiB free, and %.2f GiB more would leave under the %d GiB this node keeps free", dir, float64(free)/(1<<30), float64(n)/(1<<30), diskReserve>>30)
	}
	return nil
}

// WorkingDirFolder is the folder of a job's run folder that holds its
// working directory, unpacked.
const WorkingDirFolder = "working_dir"

// DefaultExcludes are left out of every working directory: a git
// repository's history is no input of a run.
var DefaultExcludes = []string{".git"}

// PackStats says what a working directory packed to.
type PackStats struct {
	Files     int   // regular files
	Dirs      int   // folders (the root not counted)
	Bytes     int64 // the files' bytes
	Packed    int64 // the package's bytes
	SHA256    string
	Excluded  []string // entries left out by a pattern, as relative paths (the first 20)
	NExcluded int
}

// excluded says whether the entry at rel (slash-separated, relative to
// the root) matches one of patterns: a pattern with a slash matches the
// whole relative path, one without matches any single name on it (so
// ".git" leaves out every .git folder, "*.ckpt" every such file, and
// "data/raw" that one folder), as path.Match reads them.
func excluded(rel string, patterns []string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(p, "/")
		if strings.Contains(p, "/") {
			if ok, _ := path.Match(strings.TrimPrefix(p, "/"), rel); ok {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
	}
	return false
}

// CheckExcludes refuses a pattern path.Match cannot read.
func CheckExcludes(patterns []string) error {
	for _, p := range patterns {
		if p == "" {
			return errors.New("--exclude: an empty pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("--exclude %q: %v", p, err)
		}
	}
	return nil
}

// PackWorkingDir writes dir, less the entries excludes match, as a
// tar.gz to w. A symbolic link to a file inside dir is packed as a copy
// of that file; one to a folder, or leading out of dir, is refused,
// naming it (exclude it, or copy what it points at). Past the bounds
// above it stops with an error naming the bound.
func PackWorkingDir(dir string, excludes []string, w io.Writer) (PackStats, error) {
	var st PackStats
	root, err := filepath.Abs(dir)
	if err != nil {
		return st, err
	}
	if fi, err := os.Stat(root); err != nil {
		return st, fmt.Errorf("working dir: %w", err)
	} else if !fi.IsDir() {
		return st, fmt.Errorf("working dir %s: not a folder", dir)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return st, fmt.Errorf("working dir: %w", err)
	}
	h := sha256.New()
	counted := &countWriter{w: io.MultiWriter(w, h)}
	zw, _ := gzip.NewWriterLevel(counted, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	var walk func(rel string) error
	walk = func(rel string) error {
		full := filepath.Join(root, filepath.FromSlash(rel))
		entries, err := os.ReadDir(full)
		if err != nil {
			return fmt.Errorf("working dir: %w", err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, name := range names {
			r := name
			if rel != "" {
				r = rel + "/" + name
			}
			if excluded(r, excludes) {
				if st.NExcluded < 20 {
					st.Excluded = append(st.Excluded, r)
				}
				st.NExcluded++
				continue
			}
			if len(r) > maxEntryName {
				return fmt.Errorf("working dir %s: %s: a path over %d bytes", dir, r, maxEntryName)
			}
			p := filepath.Join(full, name)
			fi, err := os.Lstat(p)
			if err != nil {
				return fmt.Errorf("working dir: %w", err)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := filepath.EvalSymlinks(p)
				if err != nil {
					return fmt.Errorf("working dir %s: %s: a symbolic link that leads nowhere (%v): remove it or --exclude %s", dir, r, err, r)
				}
				if in, err := filepath.Rel(realRoot, target); err != nil || !filepath.IsLocal(in) {
					return fmt.Errorf("working dir %s: %s: a symbolic link to %s, out of the folder: copy what it points at into the folder, or --exclude %s", dir, r, target, r)
				}
				if fi, err = os.Stat(p); err != nil {
					return fmt.Errorf("working dir: %w", err)
				}
				if fi.IsDir() {
					return fmt.Errorf("working dir %s: %s: a symbolic link to a folder (packed are files and folders, and links to files): --exclude %s, or make it a folder", dir, r, r)
				}
			}
			if st.Files+st.Dirs >= MaxWorkingDirFiles {
				return fmt.Errorf("working dir %s: over %d files and folders (a job's working dir holds at most that many): --exclude what the run does not read", dir, MaxWorkingDirFiles)
			}
			switch {
			case fi.IsDir():
				st.Dirs++
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: r + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
					return err
				}
				if err := walk(r); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				st.Files++
				st.Bytes += fi.Size()
				if st.Bytes > MaxWorkingDirBytes {
					return fmt.Errorf("working dir %s: over %d GiB of files (its bound): --exclude what the run does not read (a run's outputs, checkpoints it does not start from)", dir, MaxWorkingDirBytes>>30)
				}
				mode := int64(0o644)
				if fi.Mode()&0o100 != 0 {
					mode = 0o755
				}
				if err := packFile(tw, p, r, mode, fi); err != nil {
					return fmt.Errorf("working dir %s: %s: %w", dir, r, err)
				}
			default:
				return fmt.Errorf("working dir %s: %s is no file or folder (%s): --exclude %s", dir, r, fi.Mode().Type(), r)
			}
			if counted.n > MaxPackageBytes {
				return fmt.Errorf("working dir %s: packs to over %d GiB (the bound of an upload): --exclude what the run does not read", dir, MaxPackageBytes>>30)
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	if err := zw.Close(); err != nil {
		return st, err
	}
	if counted.n > MaxPackageBytes {
		return st, fmt.Errorf("working dir %s: packs to over %d GiB (the bound of an upload): --exclude what the run does not read", dir, MaxPackageBytes>>30)
	}
	st.Packed, st.SHA256 = counted.n, hex.EncodeToString(h.Sum(nil))
	return st, nil
}

// packFile writes the file at p, listed as fi (for a link, the file it
// leads to), as entry name: a file that is not the one listed when opened
// (swapped, for a link out of the folder too), or that changes size or
// time while read (a dataset still being written), is refused, not
// packed torn.
func packFile(tw *tar.Writer, p, name string, mode int64, fi fs.FileInfo) error {
	beforePackOpen(p)
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if now, err := f.Stat(); err != nil {
		return err
	} else if !os.SameFile(fi, now) {
		return errors.New("changed while packed (replaced by another file or a link since listed): pack it again once it is done changing")
	}
	size := fi.Size()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size, Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	now, err := f.Stat()
	switch {
	case err != nil:
		return err
	case n != size || now.Size() != size || !now.ModTime().Equal(fi.ModTime()):
		return fmt.Errorf("changed while packed (%d bytes when listed, %d now): pack it again once it is done changing", size, now.Size())
	}
	return nil
}

// beforePackOpen runs before a file is opened to be packed (tests change
// it there).
var beforePackOpen = func(string) {}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// UnpackStats says what a package unpacked to.
type UnpackStats struct {
	Files int
	Dirs  int
	Bytes int64
}

// UnpackWorkingDir unpacks the tar.gz r into dst, a folder it creates
// (its parent must exist; dst must not). It takes folders and regular
// files only, at local paths (no absolute path, no "..", no link of any
// kind, no entry twice), with the executable bit their only mode, within
// MaxWorkingDirFiles and MaxWorkingDirBytes; anything else stops it with
// an error naming the entry. On error dst is removed.
func UnpackWorkingDir(r io.Reader, dst string) (UnpackStats, error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return UnpackStats{}, fmt.Errorf("working dir: %w", err)
	}
	st, err := unpackInto(context.Background(), r, dst)
	if err != nil {
		_ = os.RemoveAll(dst)
	}
	return st, err
}

// unpackInto is UnpackWorkingDir into dst, a folder made for it, which
// it leaves as it is on error; it gives up, between entries, once ctx
// is done.
func unpackInto(ctx context.Context, r io.Reader, dst string) (st UnpackStats, err error) {
	// gzip reads r through br, a ByteReader, and no further than its
	// member's end: what br holds after it is what followed the member.
	br := bufio.NewReader(r)
	zr, err := gzip.NewReader(br)
	if err != nil {
		return st, fmt.Errorf("working dir package: %w", err)
	}
	zr.Multistream(false)
	tail := &tailReader{r: zr}
	tr := tar.NewReader(tail)
	for {
		if err := ctx.Err(); err != nil {
			return st, fmt.Errorf("working dir package: unpacking stopped after %d entries: %w", st.Files+st.Dirs, err)
		}
		tail.watch()
		hdr, err := tr.Next()
		tail.on = false
		if errors.Is(err, io.EOF) {
			// archive/tar takes a stream that ends at a header's place, or
			// after one zero block, for a whole archive: a package cut
			// there would unpack short without a word.
			if !tail.endOfArchive() {
				return st, errors.New("working dir package: the tar ends without its end-of-archive blocks (cut short, or split over several gzip members)")
			}
			break
		}
		if err != nil {
			return st, fmt.Errorf("working dir package: %w", err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if len(name) > maxEntryName || name == "" || name == "." || !filepath.IsLocal(filepath.FromSlash(name)) || strings.Contains(name, "\\") || path.Clean(name) != name {
			return st, fmt.Errorf("working dir package: entry %q: not a plain relative path inside the folder", clip(hdr.Name))
		}
		if st.Files+st.Dirs >= unpackFiles {
			return st, fmt.Errorf("working dir package: over %d files and folders", unpackFiles)
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		if err := mkParents(dst, filepath.Dir(target)); err != nil {
			return st, fmt.Errorf("working dir package: entry %q: %w", name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o755); err != nil && !isDir(target) {
				return st, fmt.Errorf("working dir package: entry %q: %w", name, err)
			}
			st.Dirs++
		case tar.TypeReg:
			if hdr.Size < 0 || st.Bytes+hdr.Size > unpackBytes {
				return st, fmt.Errorf("working dir package: entry %q: its %d bytes pass the %d bytes a working dir may unpack to", name, hdr.Size, unpackBytes)
			}
			if err := checkDisk(dst, hdr.Size); err != nil {
				return st, fmt.Errorf("working dir package: entry %q: %w", name, err)
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o100 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				if errors.Is(err, fs.ErrExist) {
					return st, fmt.Errorf("working dir package: entry %q: twice", name)
				}
				return st, fmt.Errorf("working dir package: entry %q: %w", name, err)
			}
			n, err := io.Copy(f, io.LimitReader(tr, hdr.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil && n != hdr.Size {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				return st, fmt.Errorf("working dir package: entry %q: %w", name, err)
			}
			st.Files++
			st.Bytes += n
		default:
			return st, fmt.Errorf("working dir package: entry %q: type %q (a link, device or other): a working dir holds files and folders only", name, string(rune(hdr.Typeflag)))
		}
	}
	if err := checkPackageEnd(zr, br); err != nil {
		return st, fmt.Errorf("working dir package: %w", err)
	}
	return st, nil
}

// tarRecordPadding is the most zero bytes a tar writer may add after the
// end-of-archive blocks, to fill its last record (GNU tar's 20 blocks).
const tarRecordPadding = 20 * 512

// checkPackageEnd reads what follows the tar's end: within its gzip
// member, up to tarRecordPadding zero bytes and the member's end (which
// checks its CRC and length); after the member, nothing. A package is
// one gzip member holding one tar: anything else was not packed by
// PackWorkingDir, and bytes past the tar's end are not unpacked.
func checkPackageEnd(zr *gzip.Reader, br *bufio.Reader) error {
	rest, err := io.ReadAll(io.LimitReader(zr, tarRecordPadding+1))
	if err != nil {
		return err
	}
	if len(rest) > tarRecordPadding || bytes.ContainsFunc(rest, func(c rune) bool { return c != 0 }) {
		return errors.New("data after the tar's end-of-archive blocks")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err != nil {
			return err
		}
		return errors.New("bytes after the gzip member that holds the tar (a second member, or trailing data): a package is one gzip member")
	}
	return nil
}

// tailReader passes reads on and, while on, counts what it passed and
// the zero bytes at the end of that: within one call of Next the tar
// reader reads a header's blocks, or at the archive's end the last
// entry's padding and the two zero blocks. (Off while the entries' data
// is read: a package may hold gigabytes.)
type tailReader struct {
	r         io.Reader
	on        bool
	sinceMark int64 // bytes read since watch
	zeros     int64 // zero bytes at the end of those
}

func (t *tailReader) watch() { t.on, t.sinceMark, t.zeros = true, 0, 0 }

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if !t.on {
		return n, err
	}
	for _, c := range p[:n] {
		if c == 0 {
			t.zeros++
		} else {
			t.zeros = 0
		}
	}
	t.sinceMark += int64(n)
	return n, err
}

// endOfArchive says whether the last Next, which found the archive's
// end, read its two zero blocks (after the last entry's padding, fewer
// than 512 zero bytes, also read then).
func (t *tailReader) endOfArchive() bool {
	return t.sinceMark >= 2*512 && t.zeros == t.sinceMark
}

// mkParents makes dir, inside root, and the folders above it up to root:
// every one made here, none a link (the package holds none).
func mkParents(root, dir string) error {
	if dir == root {
		return nil
	}
	if fi, err := os.Lstat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is a file, not a folder", dir)
		}
		return nil
	}
	if err := mkParents(root, filepath.Dir(dir)); err != nil {
		return err
	}
	return os.Mkdir(dir, 0o755)
}

// clip is s cut to 200 bytes, for an error message.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}
