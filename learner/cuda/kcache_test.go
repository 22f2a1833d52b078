package cuda

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelCache compiles a kernel file through the cache with the real
// NVRTC: a miss compiles and writes, a hit compiles nothing and returns
// the same cubin, another architecture or a changed source is a miss, and
// a truncated, corrupted or foreign file is recompiled and rewritten.
func TestKernelCache(t *testing.T) {
	nv := openNVRTC(t)
	var src Source
	for _, s := range Sources() {
		if s.Name == "tensor.cu" {
			src = s
		}
	}
	if src.Name == "" {
		t.Fatal("no tensor.cu")
	}
	c := &KernelCache{Dir: t.TempDir(), NV: nv}
	first, err := c.Cubin(src, "sm_80")
	must(t, err)
	if c.Compiles != 1 || !bytes.HasPrefix(first, []byte("\x7fELF")) {
		t.Fatalf("miss: %d compiles, cubin starts %q", c.Compiles, first[:min(4, len(first))])
	}
	files, _ := filepath.Glob(filepath.Join(c.Dir, "*.cubin"))
	if len(files) != 1 {
		t.Fatalf("after one miss the cache holds %v", files)
	}
	file := files[0]

	// A fresh cache over the same directory (another process) hits.
	c2 := &KernelCache{Dir: c.Dir, NV: nv}
	again, err := c2.Cubin(src, "sm_80")
	must(t, err)
	if c2.Compiles != 0 || !bytes.Equal(again, first) {
		t.Fatalf("hit: %d compiles, same cubin %v", c2.Compiles, bytes.Equal(again, first))
	}

	// Another architecture, and a changed source, are other keys.
	_, err = c2.Cubin(src, "sm_90")
	must(t, err)
	changed := src
	changed.Text += "\n// changed\n"
	_, err = c2.Cubin(changed, "sm_80")
	must(t, err)
	if c2.Compiles != 2 {
		t.Fatalf("sm_90 and a changed source: %d compiles, want 2", c2.Compiles)
	}

	good, err := os.ReadFile(file)
	must(t, err)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"truncated", good[:len(good)/2]},
		{"bit flipped", func() []byte { b := bytes.Clone(good); b[len(b)-100] ^= 1; return b }()},
		{"empty", nil},
		{"no header", good[len(cubinMagic)+32:]},
		{"not ELF", func() []byte { // a well-formed file whose payload is no cubin
			b := []byte("garbage that is not an ELF image")
			return append(append([]byte(cubinMagic), sha(b)...), b...)
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, os.WriteFile(file, tc.body, 0o644))
			c3 := &KernelCache{Dir: c.Dir, NV: nv}
			got, err := c3.Cubin(src, "sm_80")
			must(t, err)
			if c3.Compiles != 1 || !bytes.Equal(got, first) {
				t.Errorf("%d compiles, cubin as before %v; want a recompile", c3.Compiles, bytes.Equal(got, first))
			}
			rewritten, err := os.ReadFile(file)
			must(t, err)
			if !bytes.Equal(rewritten, good) {
				t.Errorf("the file was not rewritten whole")
			}
		})
	}

	// An unwritable cache still returns the compiled kernel.
	ro := filepath.Join(t.TempDir(), "file-not-dir")
	must(t, os.WriteFile(ro, nil, 0o644))
	c4 := &KernelCache{Dir: ro, NV: nv}
	got, err := c4.Cubin(src, "sm_80")
	must(t, err)
	if !bytes.Equal(got, first) || c4.Compiles != 1 {
		t.Errorf("unwritable cache: %d compiles, same cubin %v", c4.Compiles, bytes.Equal(got, first))
	}
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// TestKernelCacheCubins: Cubins compiles every missing source at once and
// returns each file's cubin in source order, the cubin Cubin gives for it
// alone; a second call compiles nothing; a source that does not compile
// fails the call with its own error even when others compile.
func TestKernelCacheCubins(t *testing.T) {
	nv := openNVRTC(t)
	srcs := Sources()[:4]
	c := &KernelCache{Dir: t.TempDir(), NV: nv}
	got, err := c.Cubins(srcs, "sm_90")
	must(t, err)
	if c.Compiles != len(srcs) || len(got) != len(srcs) {
		t.Fatalf("cold cache: %d compiles, %d cubins; want %d of each", c.Compiles, len(got), len(srcs))
	}
	for i, s := range srcs {
		one, err := (&KernelCache{Dir: c.Dir, NV: nv}).Cubin(s, "sm_90")
		must(t, err)
		if !bytes.Equal(got[i], one) {
			t.Errorf("%s: Cubins gave another cubin than Cubin", s.Name)
		}
	}
	if _, err := c.Cubins(srcs, "sm_90"); err != nil || c.Compiles != len(srcs) {
		t.Fatalf("warm cache: %v, %d compiles in all; want none more", err, c.Compiles)
	}
	broken := srcs[1]
	broken.Name, broken.Text = "broken.cu", broken.Text+"\nthis is not CUDA\n"
	if _, err := c.Cubins([]Source{srcs[0], broken, srcs[2]}, "sm_80"); err == nil || !strings.Contains(err.Error(), "broken.cu") {
		t.Fatalf("a source that does not compile: %v", err)
	}
}

// BenchmarkKernelCompile compiles every kernel file for sm_90 into a cold
// cache, one file after another and with Cubins (in parallel).
func BenchmarkKernelCompile(b *testing.B) {
	nv, err := OpenNVRTC()
	if err != nil {
		b.Skipf("no NVRTC: %v", err)
	}
	for _, mode := range []string{"one-by-one", "parallel"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				c := &KernelCache{Dir: b.TempDir(), NV: nv}
				if mode == "parallel" {
					if _, err := c.Cubins(Sources(), "sm_90"); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, s := range Sources() {
					if _, err := c.Cubin(s, "sm_90"); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestCacheDirsWithoutAUsableUserCache: with no HOME, or a user cache
// directory that cannot be created (XDG_CACHE_HOME naming a file), the
// kernel cache and the emulation's builds go to the temporary directory
// instead of failing (the emulation) or going uncached (the kernels).
func TestCacheDirsWithoutAUsableUserCache(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	t.Setenv(EnvKernelCache, "")
	for _, env := range [][2]string{{file, "/nonexistent"}, {"", ""}} {
		t.Setenv("XDG_CACHE_HOME", env[0])
		t.Setenv("HOME", env[1])
		if d, want := DefaultKernelCacheDir(), filepath.Join(tmp, "rlnode", "cuda-kernels"); d != want {
			t.Errorf("XDG_CACHE_HOME=%q HOME=%q: kernel cache %s, want %s", env[0], env[1], d, want)
		}
		d, err := EmulationCacheDir()
		if want := filepath.Join(tmp, "rlnode", "cuda-emu"); err != nil || d != want {
			t.Errorf("XDG_CACHE_HOME=%q HOME=%q: emulation cache %s, %v; want %s", env[0], env[1], d, err, want)
		}
		if !writable(d) {
			t.Errorf("%s: not writable", d)
		}
	}
}
