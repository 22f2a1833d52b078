package cuda

import (
	"os"
	"path/filepath"
	"slices"
)

// Environment variables naming a library's path explicitly; when set,
// that path alone is tried, so a wrong one is reported rather than passed
// over.
const (
	EnvDriver   = "RLNODE_CUDA_DRIVER"
	EnvNVRTC    = "RLNODE_NVRTC"
	EnvCublasLt = "RLNODE_CUBLASLT"
)

// pythonRoots are the prefixes under which Python environments keep
// site-packages: NVIDIA's wheels (nvidia-cuda-nvrtc, nvidia-cublas) put
// their libraries under site-packages/nvidia/*/lib, outside the dynamic
// linker's path, and that is where GPU hosts with PyTorch have them.
func pythonRoots() []string {
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, v)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, ".local"))
	}
	return append(roots, "/usr/local", "/usr", "/opt/conda")
}

// maxWheelCandidates bounds the paths a search returns.
const maxWheelCandidates = 16

// wheelLibraries lists files matching each of names (globs such as
// "libnvrtc.so.1[0-9]*") in the Python environments' nvidia/*/lib folders,
// newest-named first within each root.
func wheelLibraries(names ...string) []string {
	var out []string
	for _, root := range pythonRoots() {
		for _, sp := range []string{"site-packages", "dist-packages"} {
			for _, n := range names {
				m, _ := filepath.Glob(filepath.Join(root, "lib", "python3*", sp, "nvidia", "*", "lib", n))
				slices.Sort(m)
				slices.Reverse(m)
				for _, p := range m {
					if !slices.Contains(out, p) {
						out = append(out, p)
					}
					if len(out) >= maxWheelCandidates {
						return out
					}
				}
			}
		}
	}
	return out
}

// searchList is where a library is looked for: the path in env when set,
// else the sonames (the dynamic linker's search) and then the Python
// wheels' folders.
func searchList(env string, sonames []string, wheelGlobs ...string) []string {
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	return append(slices.Clone(sonames), wheelLibraries(wheelGlobs...)...)
}
