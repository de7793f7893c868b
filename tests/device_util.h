// The tests' one door to a Device: kernel tests and the op harness (test_backend_ops.cpp) allocate,
// copy and launch only through these helpers, never through cb::cpu:: functions or a ThreadPool of
// their own. The Device interface is changing (a stream argument to launch; KernelArgs::pool goes
// away, the device owns its workers): such a change is an edit here, not in every test file.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "runtime/device.h"
#include "runtime/kernel_args.h"

namespace cb::test {

// Runs `op` on views of `dev`'s memory and waits for it: the tests' only call of Device::launch.
// The workspace the device asks for (Device::workspace_bytes) is given as the executor gives it.
inline void launch_on(Device& dev, OpKind op, KernelArgs& args) {
  REQUIRE_MESSAGE(dev.supports(op, kernel_dtype(args)), "no kernel for this op and dtype");
  DeviceBuffer ws;
  if (!args.workspace) {
    if (const size_t bytes = dev.workspace_bytes(op, args)) {
      ws = DeviceBuffer(dev, bytes);
      args.workspace = ws.get();
      args.workspace_bytes = bytes;
    }
  }
  dev.launch(op, args);
  dev.synchronize();
  if (ws.get()) {
    args.workspace = nullptr;
    args.workspace_bytes = 0;
  }
}

// `bytes` of device memory holding a copy of host `src` (nothing copied when src is nullptr).
inline DeviceBuffer upload_new(Device& dev, const void* src, size_t bytes) {
  DeviceBuffer b(dev, bytes);
  if (src && bytes) dev.upload(b.get(), src, bytes);
  return b;
}

inline void download_to(Device& dev, void* dst, const void* src, size_t bytes) {
  if (bytes) dev.download(dst, src, bytes);
  dev.synchronize();
}

// Runs `op` on views of host memory (std::vectors): each present view is copied into device
// memory, the kernel runs on those copies, and every view is copied back (outputs, and inputs too:
// optimizer steps update their inputs in place). Absent views (data == nullptr) stay absent.
inline void launch_host(Device& dev, OpKind op, KernelArgs& host) {
  KernelArgs d = host;
  std::vector<DeviceBuffer> keep;
  auto stage = [&](std::vector<TensorView>& views) {
    for (TensorView& v : views) {
      if (!v.present()) continue;
      keep.push_back(upload_new(dev, v.data, v.bytes()));
      v.data = keep.back().get();
    }
  };
  stage(d.in);
  stage(d.out);
  launch_on(dev, op, d);
  auto back = [&](const std::vector<TensorView>& dv, const std::vector<TensorView>& hv) {
    for (size_t i = 0; i < hv.size(); ++i)
      if (hv[i].present()) download_to(dev, hv[i].data, dv[i].data, hv[i].bytes());
  };
  back(d.in, host.in);
  back(d.out, host.out);
}

}  // namespace cb::test
