package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// EnvKernelCache overrides where compiled kernels are cached.
const EnvKernelCache = "RLNODE_CUDA_CACHE"

// KernelCache keeps NVRTC's cubins on disk, one file per kernel source,
// architecture and NVRTC version, named by the hash of all three and the
// options: a GPU host compiles each file once, and any change to a kernel,
// its headers, the options or the compiler compiles it again. A file that
// does not hold what its name promises (truncated, corrupted, another
// file's) is recompiled and rewritten.
type KernelCache struct {
	Dir string
	NV  *NVRTC
	// Compiles counts the compilations this cache ran (its misses).
	Compiles int

	mu sync.Mutex // guards Compiles while Cubins compiles in parallel
}

// DefaultKernelCacheDir is $RLNODE_CUDA_CACHE, else rlnode/cuda-kernels in
// the user's cache directory, else (no HOME, or a cache directory that
// cannot be created) in the system's temporary directory.
func DefaultKernelCacheDir() string {
	if d := os.Getenv(EnvKernelCache); d != "" {
		return d
	}
	d, _ := cacheDir("cuda-kernels")
	return d
}

// cacheDir returns rlnode/NAME in the user's cache directory, created if
// missing, else in the system's temporary directory: a host that runs
// with no HOME, or with a read-only one, still caches what it builds,
// where every process of the run finds it. The error is that of the last
// place tried.
func cacheDir(name string) (string, error) {
	var err error
	if base, uerr := os.UserCacheDir(); uerr == nil {
		d := filepath.Join(base, "rlnode", name)
		if err = os.MkdirAll(d, 0o755); err == nil && writable(d) {
			return d, nil
		}
	}
	d := filepath.Join(os.TempDir(), "rlnode", name)
	if err = os.MkdirAll(d, 0o755); err != nil {
		return d, err
	}
	return d, nil
}

// writable says whether a file can be created in dir.
func writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

// cubinMagic starts every cache file, followed by the SHA-256 of the cubin
// and the cubin.
const cubinMagic = "rlnode-cubin-1\n"

// Key is the cache key of source s compiled for arch: the hash of its
// expanded text, the options, the architecture and NVRTC's version.
func (c *KernelCache) Key(s Source, arch string) (string, error) {
	text, err := s.Expand()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", s.Name, arch, c.NV.Version(), strings.Join(NVRTCOptions, " "))
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// Cubin returns s compiled for arch, from the cache or compiled now.
func (c *KernelCache) Cubin(s Source, arch string) ([]byte, error) {
	key, err := c.Key(s, arch)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(c.Dir, fmt.Sprintf("%s-%s-%s.cubin", strings.TrimSuffix(s.Name, ".cu"), arch, key))
	if b, err := os.ReadFile(path); err == nil {
		if cubin, ok := parseCubinFile(b); ok {
			return cubin, nil
		}
	}
	comp, err := c.NV.CompileSource(s, arch)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.Compiles++
	c.mu.Unlock()
	if len(comp.Cubin) == 0 {
		return nil, fmt.Errorf("nvrtc %s for %s: empty cubin", s.Name, arch)
	}
	// A cache that cannot be written costs a compile next time, no more.
	_ = writeCubinFile(c.Dir, path, comp.Cubin)
	return comp.Cubin, nil
}

// Cubins returns every source compiled for arch, in order: those not in
// the cache compile in parallel, as many at once as GOMAXPROCS (NVRTC
// compiles separate programs concurrently: BenchmarkKernelCompile). The
// first error in source order is returned.
func (c *KernelCache) Cubins(srcs []Source, arch string) ([][]byte, error) {
	out := make([][]byte, len(srcs))
	errs := make([]error, len(srcs))
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i], errs[i] = c.Cubin(s, arch)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseCubinFile(b []byte) ([]byte, bool) {
	if !bytes.HasPrefix(b, []byte(cubinMagic)) || len(b) < len(cubinMagic)+sha256.Size {
		return nil, false
	}
	sum, cubin := b[len(cubinMagic):len(cubinMagic)+sha256.Size], b[len(cubinMagic)+sha256.Size:]
	got := sha256.Sum256(cubin)
	if !bytes.Equal(sum, got[:]) || !bytes.HasPrefix(cubin, []byte("\x7fELF")) {
		return nil, false
	}
	return cubin, true
}

// writeCubinFile writes through a temporary file and a rename, so readers
// see a whole file or none.
func writeCubinFile(dir, path string, cubin []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "tmp-*.cubin")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(cubin)
	_, err = tmp.Write(append(append([]byte(cubinMagic), sum[:]...), cubin...))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
