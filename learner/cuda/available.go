package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// MinArch is the oldest GPU architecture the backend runs on (sm_80,
// Ampere: the first with bf16 tensor cores).
const MinArch = 80

// Libraries names the candidates each library is looked up by; empty
// fields take the package defaults.
type Libraries struct {
	Driver, NVRTC, CublasLt []string
}

// Report is what Probe found: each library's path and version where it
// loaded, the devices, and every reason the backend cannot run here.
type Report struct {
	Driver          string
	DriverVersion   Version
	Devices         []DeviceInfo
	NVRTC           string
	NVRTCVersion    Version
	CublasLt        string
	CublasLtVersion Version
	// Problems are the reasons the backend cannot run; each wraps one of
	// ErrNoLibrary, ErrNoSymbol, ErrTooOld or ErrNoDevice.
	Problems []error
}

// Err is nil when the backend can run, else every problem joined.
func (r Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("CUDA backend unavailable: %w", errors.Join(r.Problems...))
}

// String is a few lines for people: what loaded, which GPUs, and why not.
func (r Report) String() string {
	var b strings.Builder
	line := func(what, path string, v Version) {
		if path == "" {
			fmt.Fprintf(&b, "%-9s not loaded\n", what+":")
			return
		}
		fmt.Fprintf(&b, "%-9s %s (%s)\n", what+":", path, v)
	}
	line("driver", r.Driver, r.DriverVersion)
	line("NVRTC", r.NVRTC, r.NVRTCVersion)
	line("cuBLASLt", r.CublasLt, r.CublasLtVersion)
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "GPU %s\n", d)
	}
	if len(r.Problems) == 0 {
		b.WriteString("CUDA backend: available\n")
		return b.String()
	}
	b.WriteString("CUDA backend: unavailable\n")
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  - %v\n", p)
	}
	return b.String()
}

// Probe loads the three libraries and lists the devices. It never panics
// and leaves nothing running; on a host without CUDA it returns a report
// whose problems say what is missing.
func Probe(libs Libraries) Report {
	var r Report
	if d, err := OpenDriver(libs.Driver...); err != nil {
		r.Problems = append(r.Problems, err)
	} else {
		r.Driver, r.DriverVersion = d.Path(), d.Version()
		devs, err := d.Devices()
		switch {
		case err != nil:
			r.Problems = append(r.Problems, fmt.Errorf("CUDA driver %s: %w: %w", d.Path(), ErrNoDevice, err))
		case len(devs) == 0:
			r.Problems = append(r.Problems, fmt.Errorf("CUDA driver %s: %w: it lists none (CUDA_VISIBLE_DEVICES?)", d.Path(), ErrNoDevice))
		}
		r.Devices = devs
		usable := 0
		for _, dev := range devs {
			if dev.Arch >= MinArch {
				usable++
			}
		}
		if len(devs) > 0 && usable == 0 {
			r.Problems = append(r.Problems, fmt.Errorf("GPU %s: %w: the backend needs sm_%d or newer", devs[0], ErrTooOld, MinArch))
		}
	}
	if n, err := OpenNVRTC(libs.NVRTC...); err != nil {
		r.Problems = append(r.Problems, err)
	} else {
		r.NVRTC, r.NVRTCVersion = n.Path(), n.Version()
	}
	if c, err := OpenCublasLt(libs.CublasLt...); err != nil {
		r.Problems = append(r.Problems, err)
	} else {
		r.CublasLt, r.CublasLtVersion = c.Path(), c.Version()
	}
	// A cubin built by NVRTC loads on drivers of the same major version or
	// newer (CUDA's minor-version compatibility).
	if r.Driver != "" && r.NVRTC != "" && r.DriverVersion.Major < r.NVRTCVersion.Major {
		r.Problems = append(r.Problems, fmt.Errorf("CUDA driver %s: %w: it supports CUDA %s, older than NVRTC %s (%s)", r.Driver, ErrTooOld, r.DriverVersion, r.NVRTCVersion, r.NVRTC))
	}
	return r
}

var (
	availableOnce sync.Once
	available     Report
)

// Available is Probe with the default library names, run once per
// process.
func Available() Report {
	availableOnce.Do(func() { available = Probe(Libraries{}) })
	return available
}
