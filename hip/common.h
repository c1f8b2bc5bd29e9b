// common.h — torch-free, device-free definitions shared by every op's params header and binding:
// dtype codes, the opaque stream handle launchers take, and the "unsupported value" error.
// Plain C++17: included by the torch binding unit (compiled by the host compiler) and by kernels.
#pragma once

#include <stdexcept>
#include <stdint.h>
#include <string>

namespace rk {

// Element type of q / k / v / caches / out (all 16-bit; accumulation is always fp32).
enum class DType : int { kF16 = 0, kBF16 = 1 };

inline const char* dtype_name(DType t) { return t == DType::kF16 ? "float16" : "bfloat16"; }

// Element type of the KV caches: the same 16-bit type as q (kSame), or 8-bit floats read with
// per-tensor / per-KV-head float32 scales (stored x scale = real value).
enum class KVType : int { kSame = 0, kFp8E4M3 = 1, kFp8E5M2 = 2 };

// FP8 dequantisation scales of one cache (device pointers; nullptr when kv_type is kSame): the
// scale of KV head h is scale[h * stride], stride 0 for one per-tensor value, 1 for [H_kv].
struct KVScales {
  const float* k = nullptr;
  const float* v = nullptr;
  int32_t stride = 0;
};

// KV cache layouts (docs/contract.md §4). Kernels never branch on layout: the binding turns it
// into strides.
enum class Layout : int { kBSHD = 0, kBHSD = 1 };

// Launchers take the stream as an opaque pointer (cudaStream_t / hipStream_t), so params headers
// need no GPU runtime header and the binding unit needs no device compiler.
using Stream = void*;

// Thrown by dispatch when a runtime value has no compiled kernel; the binding passes the message
// to Python, where the wrapper raises radixkv.InvalidArgument with it.
struct Unsupported : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

[[noreturn]] inline void throw_unsupported(const char* what, long long got, const char* supported) {
  throw Unsupported(std::string("radixkv: unsupported ") + what + ": " + std::to_string(got) +
                    " (supported in this build: " + supported + ")");
}

// Thrown when a launch fails (bad configuration, no kernel image for this GPU, ...).
struct LaunchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace rk
