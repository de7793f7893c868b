// Device-side error flags of the CUDA backend: how a kernel reports a bad input value (a Gather
// index or a class label out of range) that the CPU kernels raise as a cb::Error on the spot.
// A kernel cannot throw, and reading the indices on the host would cost a device->host copy per
// launch, so:
//   - each stream has one DeviceErrorFlag: a claim word in device memory and a record that the
//     host can read without a copy (CUDA: pinned host memory mapped into the device's address
//     space; host-run: plain host memory);
//   - the first kernel thread that meets a bad value claims the word (compare-and-swap 0 -> 1)
//     and writes the record (what, the value, the bound); every other thread and later kernel
//     leaves it alone, so the record names the first bad value in stream order. The kernel still
//     writes defined values (zeros) where it met the bad one, so nothing downstream faults;
//   - the device reads the record at the synchronisations that already exist (Device::synchronize
//     and download, which end a step, an evaluation or a copy to the host), clears it and throws
//     the CPU's message (kernels/common/kernel_errors.h), so both backends say the same.
// Included by launch.h (GpuCtx holds the stream's flag).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/common/kernel_errors.h"
#include "kernels/common/scalar_math.h"

#if !defined(__CUDA_ARCH__)
#include <atomic>
#endif

#ifndef CB_GPU_NS
#error "CB_GPU_NS must be defined by the build: cuda (nvcc build) or cuda_host (host-run build)"
#endif

namespace cb::CB_GPU_NS {

enum class DeviceErrorCode : uint32_t {
  None = 0,
  GatherIndex,      // value: the index, aux: the axis, bound: the axis's size
  GatherGradIndex,  // as GatherIndex
  Label,            // value: the label, aux: the label element, bound: the number of classes
};

struct DeviceErrorRecord {
  uint32_t code = 0;  // a DeviceErrorCode; None while nothing was reported
  int64_t value = 0, aux = 0, bound = 0;
};

// What kernel bodies capture: both pointers null means "not checked" (raise is then a no-op).
struct DeviceErrorFlag {
  unsigned int* claim = nullptr;        // 0, or 1 once a thread has claimed the record
  DeviceErrorRecord* record = nullptr;  // written only by the thread that claimed it
};

// Reports a bad value: the first call since the flag was cleared wins, the others do nothing.
CB_HOST_DEVICE inline void raise_device_error(const DeviceErrorFlag& f, DeviceErrorCode code,
                                              int64_t value, int64_t aux, int64_t bound) {
  if (!f.claim) return;
#if defined(__CUDA_ARCH__)
  if (atomicCAS(f.claim, 0u, 1u) != 0u) return;
#else
  unsigned int expected = 0;
  if (!std::atomic_ref<unsigned int>(*f.claim).compare_exchange_strong(expected, 1u)) return;
#endif
  f.record->value = value;
  f.record->aux = aux;
  f.record->bound = bound;
  f.record->code = static_cast<uint32_t>(code);
}

// The message of a reported record (the CPU kernels' wording).
inline std::string device_error_message(const DeviceErrorRecord& r) {
  switch (static_cast<DeviceErrorCode>(r.code)) {
    case DeviceErrorCode::GatherIndex:
      return index_out_of_range("Gather", r.value, r.aux, r.bound);
    case DeviceErrorCode::GatherGradIndex:
      return index_out_of_range("GatherGrad", r.value, r.aux, r.bound);
    case DeviceErrorCode::Label:
      return label_out_of_range(r.value, r.aux, r.bound);
    case DeviceErrorCode::None:
      break;
  }
  return fmt::format("a kernel reported error code {} (value {}, {}, bound {})", r.code, r.value,
                     r.aux, r.bound);
}

}  // namespace cb::CB_GPU_NS
