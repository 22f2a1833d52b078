package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
)

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// Source is one kernel file.
type Source struct {
	Name string // file name, "norm.cu"
	Text string // as in the repository
	// Kernels are the extern "C" __global__ functions it defines.
	Kernels []string
}

var kernelDecl = regexp.MustCompile(`extern "C" __global__ void (\w+)\(`)

// Sources lists the kernel files in name order.
func Sources() []Source {
	ents, err := fs.Glob(kernelFS, "kernels/*.cu")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(ents)
	out := make([]Source, 0, len(ents))
	for _, e := range ents {
		b, _ := kernelFS.ReadFile(e)
		s := Source{Name: path.Base(e), Text: string(b)}
		for _, m := range kernelDecl.FindAllStringSubmatch(s.Text, -1) {
			s.Kernels = append(s.Kernels, m[1])
		}
		out = append(out, s)
	}
	return out
}

// Header returns the text of a header in kernels/ ("common.cuh").
func Header(name string) (string, error) {
	b, err := kernelFS.ReadFile("kernels/" + name)
	if err != nil {
		return "", fmt.Errorf("kernel header %q: %w", name, err)
	}
	return string(b), nil
}

var includeLine = regexp.MustCompile(`(?m)^#include "([\w.]+)"\s*$`)

// Expand replaces each #include "x" of a kernel source with the header's
// text (once per header), so NVRTC gets one self-contained program.
func (s Source) Expand() (string, error) {
	seen := map[string]bool{}
	var err error
	var expand func(text string) string
	expand = func(text string) string {
		return includeLine.ReplaceAllStringFunc(text, func(line string) string {
			name := includeLine.FindStringSubmatch(line)[1]
			if seen[name] {
				return ""
			}
			seen[name] = true
			h, e := Header(name)
			if e != nil {
				err = fmt.Errorf("%s: %w", s.Name, e)
				return ""
			}
			return expand(h)
		})
	}
	out := expand(s.Text)
	return out, err
}

// NVRTCOptions are the options every kernel is compiled with.
var NVRTCOptions = []string{"--std=c++14", "-default-device"}

// CompileSource compiles one kernel file for arch ("sm_90") with ptxas's
// resource report.
func (n *NVRTC) CompileSource(s Source, arch string) (*Compiled, error) {
	text, err := s.Expand()
	if err != nil {
		return nil, err
	}
	opts := append(append([]string{}, NVRTCOptions...), "--ptxas-options=-v")
	c, err := n.Compile(text, s.Name, arch, opts...)
	if err != nil {
		return nil, err
	}
	if got, want := len(c.Kernels), len(s.Kernels); got != want {
		names := make([]string, len(c.Kernels))
		for i, k := range c.Kernels {
			names[i] = k.Name
		}
		return nil, fmt.Errorf("nvrtc %s for %s: ptxas reported %d kernels (%s), the source declares %d (%s)", s.Name, arch, got, strings.Join(names, ", "), want, strings.Join(s.Kernels, ", "))
	}
	return c, nil
}
