package cuda

import (
	"fmt"
	"runtime"
	"unsafe"
)

// MinDriver is the oldest driver API version the backend accepts: the first
// with Hopper (sm_90) support.
var MinDriver = Version{11, 8}

// DriverCandidates are the names the driver library is looked up by.
var DriverCandidates = []string{"libcuda.so.1", "libcuda.so"}

// Driver is the CUDA driver API, loaded at run time.
type Driver struct {
	lib     *library
	version Version

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuGetErrorString          func(r int32, s **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(d *int32, ordinal int32) int32
	cuDeviceGetName           func(name *byte, n int32, d int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, d int32) int32
	cuDeviceTotalMem          func(bytes *uint64, d int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) int32
	cuDevicePrimaryCtxRelease func(d int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuModuleLoadData          func(m *uintptr, image unsafe.Pointer) int32
	cuModuleUnload            func(m uintptr) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name string) int32
	cuFuncSetAttribute        func(f uintptr, attr int32, v int32) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuMemAlloc                func(p *uint64, bytes uint64) int32
	cuMemFree                 func(p uint64) int32
	cuMemcpyHtoD              func(dst uint64, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyHtoDAsync         func(dst uint64, src unsafe.Pointer, bytes uint64, stream uintptr) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src uint64, bytes uint64) int32
	cuMemsetD8                func(dst uint64, v uint8, n uint64) int32
	cuMemcpyDtoD              func(dst, src uint64, bytes uint64) int32
	cuMemAllocHost            func(p *unsafe.Pointer, bytes uint64) int32
	cuMemFreeHost             func(p unsafe.Pointer) int32
	cuMemHostRegister         func(p unsafe.Pointer, bytes uint64, flags uint32) int32
	cuMemHostUnregister       func(p unsafe.Pointer) int32
}

// CUDA driver constants used here (cuda.h).
const (
	cudaSuccess               = 0
	cudaErrorNoDevice         = 100
	attrMultiprocessorCount   = 16
	attrComputeCapabilityMajr = 75
	attrComputeCapabilityMinr = 76
)

// OpenDriver loads the driver library from the first of candidates that
// opens (when none are given: $RLNODE_CUDA_DRIVER alone if set,
// else DriverCandidates, then the same names in driverDirs), binds every function the
// backend uses and initialises it. The errors wrap ErrNoLibrary,
// ErrNoSymbol, ErrTooOld or ErrNoDevice.
func OpenDriver(candidates ...string) (*Driver, error) {
	if len(candidates) == 0 {
		candidates = driverSearchList(DriverCandidates)
	}
	lib, err := openLibrary("CUDA driver", candidates)
	if err != nil {
		return nil, err
	}
	d := &Driver{lib: lib}
	if err := lib.bind(map[string]any{
		"cuInit":                       &d.cuInit,
		"cuDriverGetVersion":           &d.cuDriverGetVersion,
		"cuGetErrorString":             &d.cuGetErrorString,
		"cuDeviceGetCount":             &d.cuDeviceGetCount,
		"cuDeviceGet":                  &d.cuDeviceGet,
		"cuDeviceGetName":              &d.cuDeviceGetName,
		"cuDeviceGetAttribute":         &d.cuDeviceGetAttribute,
		"cuDeviceTotalMem_v2":          &d.cuDeviceTotalMem,
		"cuDevicePrimaryCtxRetain":     &d.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": &d.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":              &d.cuCtxSetCurrent,
		"cuCtxSynchronize":             &d.cuCtxSynchronize,
		"cuModuleLoadData":             &d.cuModuleLoadData,
		"cuModuleUnload":               &d.cuModuleUnload,
		"cuModuleGetFunction":          &d.cuModuleGetFunction,
		"cuFuncSetAttribute":           &d.cuFuncSetAttribute,
		"cuLaunchKernel":               &d.cuLaunchKernel,
		"cuMemAlloc_v2":                &d.cuMemAlloc,
		"cuMemFree_v2":                 &d.cuMemFree,
		"cuMemcpyHtoD_v2":              &d.cuMemcpyHtoD,
		"cuMemcpyHtoDAsync_v2":         &d.cuMemcpyHtoDAsync,
		"cuMemcpyDtoH_v2":              &d.cuMemcpyDtoH,
		"cuMemsetD8_v2":                &d.cuMemsetD8,
		"cuMemcpyDtoD_v2":              &d.cuMemcpyDtoD,
		"cuMemAllocHost_v2":            &d.cuMemAllocHost,
		"cuMemFreeHost":                &d.cuMemFreeHost,
		"cuMemHostRegister_v2":         &d.cuMemHostRegister,
		"cuMemHostUnregister":          &d.cuMemHostUnregister,
	}); err != nil {
		return nil, fmt.Errorf("CUDA driver: %w", err)
	}
	var v int32
	if r := d.cuDriverGetVersion(&v); r != cudaSuccess {
		return nil, fmt.Errorf("CUDA driver %s: cuDriverGetVersion: %w", lib.path, d.err(r))
	}
	d.version = Version{int(v) / 1000, int(v) % 1000 / 10}
	if d.version.Less(MinDriver) {
		return nil, fmt.Errorf("CUDA driver %s: %w: it supports CUDA %s, the backend needs %s or newer", lib.path, ErrTooOld, d.version, MinDriver)
	}
	if r := d.cuInit(0); r != cudaSuccess {
		if r == cudaErrorNoDevice {
			return nil, fmt.Errorf("CUDA driver %s (CUDA %s): cuInit: %w", lib.path, d.version, ErrNoDevice)
		}
		return nil, fmt.Errorf("CUDA driver %s (CUDA %s): cuInit: %w", lib.path, d.version, d.err(r))
	}
	return d, nil
}

// Path is the library the driver was loaded from.
func (d *Driver) Path() string { return d.lib.path }

// Version is the CUDA version the driver supports.
func (d *Driver) Version() Version { return d.version }

// DriverError is a CUresult other than success.
type DriverError struct {
	Code int32
	Msg  string
}

func (e *DriverError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("CUDA error %d (%s)", e.Code, e.Msg)
	}
	return fmt.Sprintf("CUDA error %d", e.Code)
}

func (d *Driver) err(r int32) error {
	e := &DriverError{Code: r}
	var s *byte
	if d.cuGetErrorString != nil && d.cuGetErrorString(r, &s) == cudaSuccess && s != nil {
		e.Msg = goString(s, 256)
	}
	return e
}

// goString copies the NUL-terminated C string at p, at most max bytes.
func goString(p *byte, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// DeviceInfo describes one GPU as the driver reports it.
type DeviceInfo struct {
	Index       int
	Name        string
	Arch        int // compute capability as major*10+minor: 80, 90
	SMs         int
	MemoryBytes uint64
}

func (i DeviceInfo) String() string {
	return fmt.Sprintf("%d: %s (sm_%d, %d SMs, %.1f GiB)", i.Index, i.Name, i.Arch, i.SMs, float64(i.MemoryBytes)/(1<<30))
}

// Devices lists the GPUs the driver sees (after CUDA_VISIBLE_DEVICES).
func (d *Driver) Devices() ([]DeviceInfo, error) {
	var n int32
	if r := d.cuDeviceGetCount(&n); r != cudaSuccess {
		return nil, fmt.Errorf("cuDeviceGetCount: %w", d.err(r))
	}
	out := make([]DeviceInfo, 0, n)
	for i := int32(0); i < n; i++ {
		var dev int32
		if r := d.cuDeviceGet(&dev, i); r != cudaSuccess {
			return nil, fmt.Errorf("cuDeviceGet(%d): %w", i, d.err(r))
		}
		name := make([]byte, 256)
		if r := d.cuDeviceGetName(&name[0], int32(len(name)), dev); r != cudaSuccess {
			return nil, fmt.Errorf("cuDeviceGetName(%d): %w", i, d.err(r))
		}
		var major, minor, sms int32
		for _, a := range []struct {
			attr int32
			v    *int32
		}{{attrComputeCapabilityMajr, &major}, {attrComputeCapabilityMinr, &minor}, {attrMultiprocessorCount, &sms}} {
			if r := d.cuDeviceGetAttribute(a.v, a.attr, dev); r != cudaSuccess {
				return nil, fmt.Errorf("cuDeviceGetAttribute(%d, %d): %w", i, a.attr, d.err(r))
			}
		}
		var mem uint64
		if r := d.cuDeviceTotalMem(&mem, dev); r != cudaSuccess {
			return nil, fmt.Errorf("cuDeviceTotalMem(%d): %w", i, d.err(r))
		}
		out = append(out, DeviceInfo{Index: int(i), Name: cString(name), Arch: int(major*10 + minor), SMs: int(sms), MemoryBytes: mem})
	}
	return out, nil
}

// onContext runs fn on a locked OS thread with dev's primary context
// current: CUDA contexts are per thread, goroutines are not.
func (d *Driver) onContext(ctx uintptr, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := d.cuCtxSetCurrent(ctx); r != cudaSuccess {
		return fmt.Errorf("cuCtxSetCurrent: %w", d.err(r))
	}
	return fn()
}
