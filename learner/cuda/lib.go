package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/ebitengine/purego"
)

// Sentinel errors callers branch on; the errors returned wrap one of them
// and name the library, symbol or version concerned.
var (
	// ErrNoLibrary: no candidate of a shared library could be opened.
	ErrNoLibrary = errors.New("library not found")
	// ErrNoSymbol: a library lacks a function the backend needs.
	ErrNoSymbol = errors.New("symbol missing")
	// ErrTooOld: a library or the driver is older than the backend needs.
	ErrTooOld = errors.New("version too old")
	// ErrNoDevice: the driver loaded but reports no usable GPU.
	ErrNoDevice = errors.New("no CUDA device")
)

// notFound ends glibc's dlopen error for a file that is not there.
const notFound = "cannot open shared object file: No such file or directory"

// library is one dlopen'ed shared object.
type library struct {
	path   string
	handle uintptr
}

// openLibrary opens the first of candidates that loads (a bare soname is
// looked up the way the dynamic linker does, a path is taken as is).
func openLibrary(what string, candidates []string) (*library, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%s: %w: only Linux is supported, this is %s", what, ErrNoLibrary, runtime.GOOS)
	}
	var absent, msgs []string
	// dlerror's message belongs to the thread that called dlopen: keep
	// this goroutine on one thread from the call to the message.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range candidates {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			return &library{path: c, handle: h}, nil
		}
		switch msg := err.Error(); {
		case strings.HasSuffix(msg, notFound):
			absent = append(absent, c)
		case strings.TrimSpace(msg) == "":
			msgs = append(msgs, c+": not loaded (the dynamic linker gave no reason)")
		default:
			msgs = append(msgs, msg)
		}
	}
	if len(absent) > 0 {
		msgs = append([]string{"no " + strings.Join(absent, ", ")}, msgs...)
	}
	return nil, fmt.Errorf("%s: %w (%s)", what, ErrNoLibrary, strings.Join(msgs, "; "))
}

// bind sets each function pointer in fns to the library's symbol of that
// name, and reports every symbol that is missing at once.
func (l *library) bind(fns map[string]any) error {
	var missing []string
	addrs := make(map[string]uintptr, len(fns))
	for name := range fns {
		a, err := purego.Dlsym(l.handle, name)
		if err != nil || a == 0 {
			missing = append(missing, name)
			continue
		}
		addrs[name] = a
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%s: %w: %s", l.path, ErrNoSymbol, strings.Join(missing, ", "))
	}
	for name, fp := range fns {
		purego.RegisterFunc(fp, addrs[name])
	}
	return nil
}

// cString reads a NUL-terminated string out of b.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Version is a CUDA-style major.minor version.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || v.Major == w.Major && v.Minor < w.Minor
}
