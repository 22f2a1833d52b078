package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// Device runs the kernels on one GPU: every kernel file compiled by NVRTC
// for the device's architecture and loaded into its primary context. It
// implements Launcher by copying slice arguments to device memory and back
// around each launch, which is what tests and scripts/gpu-check.sh need;
// the training backend keeps tensors on the device instead.
//
// This code has not yet run on a GPU.
type Device struct {
	Info DeviceInfo

	drv  *Driver
	dev  int32
	ctx  uintptr
	mu   sync.Mutex
	mods []uintptr
	fns  map[string]uintptr
}

// OpenDevice opens GPU index (as the driver numbers them, after
// CUDA_VISIBLE_DEVICES) and loads every kernel for it, compiled through
// the kernel cache in DefaultKernelCacheDir.
func OpenDevice(index int) (*Device, error) {
	if err := Available().Err(); err != nil {
		return nil, err
	}
	drv, err := OpenDriver()
	if err != nil {
		return nil, err
	}
	nv, err := OpenNVRTC()
	if err != nil {
		return nil, err
	}
	devs, err := drv.Devices()
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= len(devs) {
		return nil, fmt.Errorf("GPU %d: %w: the driver lists %d", index, ErrNoDevice, len(devs))
	}
	d := &Device{Info: devs[index], drv: drv, fns: map[string]uintptr{}}
	if d.Info.Arch < MinArch {
		return nil, fmt.Errorf("GPU %s: %w: the backend needs sm_%d or newer", d.Info, ErrTooOld, MinArch)
	}
	if r := drv.cuDeviceGet(&d.dev, int32(index)); r != cudaSuccess {
		return nil, fmt.Errorf("GPU %d: cuDeviceGet: %w", index, drv.err(r))
	}
	if r := drv.cuDevicePrimaryCtxRetain(&d.ctx, d.dev); r != cudaSuccess {
		return nil, fmt.Errorf("GPU %d: cuDevicePrimaryCtxRetain: %w", index, drv.err(r))
	}
	arch := fmt.Sprintf("sm_%d", d.Info.Arch)
	cache := &KernelCache{Dir: DefaultKernelCacheDir(), NV: nv}
	srcs := Sources()
	cubins, err := cache.Cubins(srcs, arch)
	if err != nil {
		d.Close()
		return nil, err
	}
	for i, s := range srcs {
		cubin := cubins[i]
		err = drv.onContext(d.ctx, func() error {
			var mod uintptr
			if r := drv.cuModuleLoadData(&mod, unsafe.Pointer(&cubin[0])); r != cudaSuccess {
				return fmt.Errorf("GPU %d: load %s for %s: %w", index, s.Name, arch, drv.err(r))
			}
			d.mods = append(d.mods, mod)
			for _, k := range s.Kernels {
				var fn uintptr
				if r := drv.cuModuleGetFunction(&fn, mod, k); r != cudaSuccess {
					return fmt.Errorf("GPU %d: kernel %s of %s: %w", index, k, s.Name, drv.err(r))
				}
				d.fns[k] = fn
			}
			return nil
		})
		if err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// Close unloads the kernels and releases the context.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == 0 {
		return nil
	}
	d.drv.onContext(d.ctx, func() error {
		for _, m := range d.mods {
			d.drv.cuModuleUnload(m)
		}
		return nil
	})
	d.mods = nil
	d.drv.cuDevicePrimaryCtxRelease(d.dev)
	d.ctx = 0
	return nil
}

// Launch runs the kernel on the GPU; see Launcher.
func (d *Device) Launch(kernel string, grid, block Dim3, args ...any) error {
	if err := checkArgs(kernel, grid, block, args); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fn, ok := d.fns[kernel]
	if !ok || d.ctx == 0 {
		return fmt.Errorf("launch %s: not loaded on GPU %d", kernel, d.Info.Index)
	}
	return d.drv.onContext(d.ctx, func() error {
		// slots hold each argument's value as the kernel reads it: a
		// device pointer or a scalar in its low bytes (little-endian).
		slots := make([]uint64, len(args))
		params := make([]unsafe.Pointer, len(args))
		var pin runtime.Pinner
		defer pin.Unpin()
		pin.Pin(&slots[0])
		var allocs []uint64
		defer func() {
			for _, p := range allocs {
				d.drv.cuMemFree(p)
			}
		}()
		for i, a := range args {
			switch v := a.(type) {
			case Null:
			case int32:
				slots[i] = uint64(uint32(v))
			case int64:
				slots[i] = uint64(v)
			case float32:
				slots[i] = uint64(math.Float32bits(v))
			case float64:
				slots[i] = math.Float64bits(v)
			default:
				b := sliceBytes(a)
				if len(b) == 0 {
					break
				}
				var p uint64
				if r := d.drv.cuMemAlloc(&p, uint64(len(b))); r != cudaSuccess {
					return fmt.Errorf("launch %s: argument %d: cuMemAlloc(%d): %w", kernel, i, len(b), d.drv.err(r))
				}
				allocs = append(allocs, p)
				if r := d.drv.cuMemcpyHtoD(p, unsafe.Pointer(&b[0]), uint64(len(b))); r != cudaSuccess {
					return fmt.Errorf("launch %s: argument %d: copy in: %w", kernel, i, d.drv.err(r))
				}
				slots[i] = p
			}
			params[i] = unsafe.Pointer(&slots[i])
		}
		pin.Pin(&params[0])
		r := d.drv.cuLaunchKernel(fn, uint32(grid.X), uint32(grid.Y), uint32(grid.Z), uint32(block.X), uint32(block.Y), uint32(block.Z), 0, 0, unsafe.Pointer(&params[0]), nil)
		if r != cudaSuccess {
			return fmt.Errorf("launch %s (grid %v, block %v): %w", kernel, grid, block, d.drv.err(r))
		}
		if r := d.drv.cuCtxSynchronize(); r != cudaSuccess {
			return fmt.Errorf("launch %s (grid %v, block %v): %w", kernel, grid, block, d.drv.err(r))
		}
		for i, a := range args {
			b := sliceBytes(a)
			if len(b) == 0 {
				continue
			}
			if r := d.drv.cuMemcpyDtoH(unsafe.Pointer(&b[0]), slots[i], uint64(len(b))); r != cudaSuccess {
				return fmt.Errorf("launch %s: argument %d: copy out: %w", kernel, i, d.drv.err(r))
			}
		}
		return nil
	})
}
