package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
// linker's path, and that is where GPU hosts with PyTorch have them. The
// environment of the python3 on PATH counts too, activated or not (a
// virtual environment's bin on PATH, /opt/torch/.venv say): the path is
// taken as found, not through its links, which lead out of the
// environment to the interpreter it was made from.
func pythonRoots() []string {
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			roots = append(roots, v)
		}
	}
	for _, py := range []string{"python3", "python"} {
		if p, err := exec.LookPath(py); err == nil && filepath.IsAbs(p) {
			if r := filepath.Dir(filepath.Dir(p)); !slices.Contains(roots, r) {
				roots = append(roots, r)
			}
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

// toolkitDirs are where a CUDA toolkit keeps its libraries when they are
// not on the dynamic linker's path: under $CUDA_HOME, $CUDA_PATH and
// /usr/local/cuda.
func toolkitDirs() []string {
	target := "x86_64-linux"
	if runtime.GOARCH == "arm64" {
		target = "sbsa-linux"
	}
	var dirs []string
	for _, root := range []string{os.Getenv("CUDA_HOME"), os.Getenv("CUDA_PATH"), "/usr/local/cuda"} {
		if root == "" {
			continue
		}
		for _, sub := range []string{"lib64", "lib", filepath.Join("targets", target, "lib")} {
			if d := filepath.Join(root, sub); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// toolkitLibraries lists files matching each of names in toolkitDirs,
// newest-named first within each folder.
func toolkitLibraries(names ...string) []string {
	var out []string
	for _, dir := range toolkitDirs() {
		for _, n := range names {
			m, _ := filepath.Glob(filepath.Join(dir, n))
			slices.Sort(m)
			slices.Reverse(m)
			for _, p := range m {
				if !slices.Contains(out, p) && len(out) < maxWheelCandidates {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// driverDirs hold the driver where it is installed outside the dynamic
// linker's default path and, on some hosts, outside its cache too:
// container and VM images mount NVIDIA's libraries at /usr/local/nvidia,
// WSL at /usr/lib/wsl/lib. Toolkit folders are not among them: their
// libcuda.so is a stub that loads and then fails every call.
var driverDirs = []string{"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib64/nvidia", "/usr/lib/x86_64-linux-gnu/nvidia", "/usr/lib/wsl/lib"}

// driverSearchList is where the driver is looked for: the path in
// EnvDriver when set, else the sonames, then driverDirs.
func driverSearchList(sonames []string) []string {
	list := searchList(EnvDriver, sonames)
	if os.Getenv(EnvDriver) != "" {
		return list
	}
	for _, dir := range driverDirs {
		for _, n := range sonames {
			p := filepath.Join(dir, n)
			if _, err := os.Stat(p); err == nil && !slices.Contains(list, p) {
				list = append(list, p)
			}
		}
	}
	return list
}

// searchList is where a library is looked for: the path in env when set,
// else the sonames (the dynamic linker's search), then the Python wheels'
// folders (PyTorch's own, which match the driver it runs on), then a CUDA
// toolkit's.
func searchList(env string, sonames []string, globs ...string) []string {
	if p := os.Getenv(env); p != "" {
		return []string{p}
	}
	list := append(slices.Clone(sonames), wheelLibraries(globs...)...)
	for _, p := range toolkitLibraries(globs...) {
		if !slices.Contains(list, p) {
			list = append(list, p)
		}
	}
	return list
}
