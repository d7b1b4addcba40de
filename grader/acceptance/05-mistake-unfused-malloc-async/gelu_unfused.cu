// Chapter 05, reference: GELU the way a framework computes
//     0.5 * x * (1 + torch.tanh(sqrt(2/pi) * (x + 0.044715 * torch.pow(x, 3))))
// one elementary op at a time, each op a kernel that reads its operands from device memory
// and writes its result back. Every kernel here is as good as an elementwise kernel gets
// (16-byte accesses, a grid that fills the GPU); what makes the whole slow is the traffic:
//
//   op                       reads    writes
//   t0 = x^3                  1        1
//   t1 = 0.044715 * t0        1        1
//   t0 = x + t1               2        1
//   t1 = sqrt(2/pi) * t0      1        1
//   t0 = tanh(t1)             1        1
//   t1 = 1 + t0               1        1
//   t0 = 0.5 * x              1        1
//   y  = t0 * t1              2        1
//   total                    10   +    8    = 18 passes over n floats, against 2 fused,
//
// and 8 launches instead of 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gelu.cuh"
#include "wb/check.hpp"

namespace ch05 {
namespace {

// The elementary ops.
struct Cube {
  __device__ float operator()(float a) const { return a * a * a; }
};
struct Scale {
  float c;
  __device__ float operator()(float a) const { return c * a; }
};
struct AddScalar {
  float c;
  __device__ float operator()(float a) const { return c + a; }
};
struct Tanh {
  __device__ float operator()(float a) const { return tanhf(a); }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Mul {
  __device__ float operator()(float a, float b) const { return a * b; }
};

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = std::size_t(1) << 20;

// out[i] = op(a[i]) or op(a[i], b[i]): one generic kernel per arity, the same shape as the
// fused kernel (one float4 per thread over a grid that covers the array). `vectorized`:
// every pointer is 16-byte aligned, so the body moves float4s and block 0 does the last
// n % 4 elements; otherwise every element is a scalar.
template <typename Op>
__global__ void __launch_bounds__(kThreads)
    unary_kernel(const float* __restrict__ a, float* __restrict__ out, std::size_t n, Op op,
                 bool vectorized) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  if (!vectorized) {
    for (std::size_t i = first; i < n; i += stride) out[i] = op(a[i]);
    return;
  }
  const std::size_t n4 = n / 4;
  for (std::size_t i = first; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(a)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
  }
  const std::size_t tail = 4 * n4 + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = op(a[tail]);
}

template <typename Op>
__global__ void __launch_bounds__(kThreads)
    binary_kernel(const float* __restrict__ a, const float* __restrict__ b,
                  float* __restrict__ out, std::size_t n, Op op, bool vectorized) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
  if (!vectorized) {
    for (std::size_t i = first; i < n; i += stride) out[i] = op(a[i], b[i]);
    return;
  }
  const std::size_t n4 = n / 4;
  for (std::size_t i = first; i < n4; i += stride) {
    const float4 u = reinterpret_cast<const float4*>(a)[i];
    const float4 v = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] =
        make_float4(op(u.x, v.x), op(u.y, v.y), op(u.z, v.z), op(u.w, v.w));
  }
  const std::size_t tail = 4 * n4 + threadIdx.x;
  if (blockIdx.x == 0 && tail < n) out[tail] = op(a[tail], b[tail]);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Enough blocks for one thread per float4 (at least one: block 0 does the tail).
unsigned grid_for(std::size_t n) {
  const std::size_t threads = std::max<std::size_t>(n / 4, 1);
  return static_cast<unsigned>(std::min((threads + kThreads - 1) / kThreads, kMaxBlocks));
}

template <typename Op>
void unary(const float* a, float* out, std::size_t n, Op op, cudaStream_t stream) {
  const bool vectorized = aligned16(a) && aligned16(out);
  unary_kernel<<<vectorized ? grid_for(n) : grid_for(4 * n), kThreads, 0, stream>>>(
      a, out, n, op, vectorized);
  WB_CHECK_LAUNCH("unary_kernel");
}

template <typename Op>
void binary(const float* a, const float* b, float* out, std::size_t n, Op op,
            cudaStream_t stream) {
  const bool vectorized = aligned16(a) && aligned16(b) && aligned16(out);
  binary_kernel<<<vectorized ? grid_for(n) : grid_for(4 * n), kThreads, 0, stream>>>(
      a, b, out, n, op, vectorized);
  WB_CHECK_LAUNCH("binary_kernel");
}

}  // namespace

void gelu_unfused(const float* x, float* y, float* scratch, std::size_t n, cudaStream_t stream) {
  check_gelu_args("gelu_unfused", x, y, n);
  if (n == 0) return;
  if (scratch == nullptr)
    throw std::invalid_argument(
        "ch05 gelu_unfused: scratch must be a device buffer of gelu_unfused_scratch_count(n) "
        "floats, got a null pointer");
  // Two temporaries: t0 in the caller's scratch, t1 a stream-ordered allocation of our own
  // (allocated and freed on `stream`, so the chain stays asynchronous and capturable).
  float* t0 = scratch;
  float* t1 = nullptr;
  WB_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&t1), n * sizeof(float), stream));
  unary(x, t0, n, Cube{}, stream);                           // x^3
  unary(t0, t1, n, Scale{0.044715f}, stream);                // 0.044715 x^3
  binary(x, t1, t0, n, Add{}, stream);                       // x + 0.044715 x^3
  unary(t0, t1, n, Scale{0.7978845608028654f}, stream);      // u = sqrt(2/pi) (...)
  unary(t1, t0, n, Tanh{}, stream);                          // tanh(u)
  unary(t0, t1, n, AddScalar{1.0f}, stream);                 // 1 + tanh(u)
  unary(x, t0, n, Scale{0.5f}, stream);                      // 0.5 x
  binary(t0, t1, y, n, Mul{}, stream);                       // 0.5 x (1 + tanh(u))
  WB_CUDA(cudaFreeAsync(t1, stream));
}

}  // namespace ch05
