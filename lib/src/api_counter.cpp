// API-call accounting through CUPTI's callback API. One process-wide subscriber counts the
// runtime calls that matter to the copy chapters and to the timing rules; ApiCounter objects
// take differences of the running totals, so regions may nest or overlap.
#include "wb/api_counter.hpp"

#include <cuda_runtime.h>
#include <cupti.h>

#include <atomic>
#include <mutex>
#include <sstream>

namespace wb {
namespace {

struct Totals {
  std::atomic<std::uint64_t> mallocs{0}, frees{0}, host_allocs{0}, memcpys{0}, memsets{0},
      syncs{0}, launches{0}, h2d{0}, d2h{0}, d2d{0}, h2h{0};
};
Totals g_totals;
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_available = false;
std::string g_reason = "not initialized";
// Our own cudaPointerGetAttributes calls (to classify cudaMemcpyDefault) re-enter the
// callback; they must not be counted.
thread_local int g_inside_callback = 0;

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void count_copy(const void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  g_totals.memcpys++;
  if (kind == cudaMemcpyDefault) {
    const bool d = is_device_pointer(dst), s = is_device_pointer(src);
    kind = s ? (d ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
             : (d ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  }
  switch (kind) {
    case cudaMemcpyHostToDevice: g_totals.h2d += bytes; break;
    case cudaMemcpyDeviceToHost: g_totals.d2h += bytes; break;
    case cudaMemcpyDeviceToDevice: g_totals.d2d += bytes; break;
    default: g_totals.h2h += bytes; break;
  }
}

template <typename P>
void count_copy_params(const CUpti_CallbackData* info) {
  const auto* p = static_cast<const P*>(info->functionParams);
  count_copy(p->dst, p->src, p->count, p->kind);
}

template <typename P>
void count_copy2d_params(const CUpti_CallbackData* info) {
  const auto* p = static_cast<const P*>(info->functionParams);
  count_copy(p->dst, p->src, p->width * p->height, p->kind);
}

void CUPTIAPI on_runtime_call(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_ENTER || g_inside_callback > 0) return;
  ++g_inside_callback;
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020:
      g_totals.mallocs++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
      g_totals.frees++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020:
      g_totals.host_allocs++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
      count_copy_params<cudaMemcpy_v3020_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000:
      count_copy_params<cudaMemcpy_ptds_v7000_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
      count_copy_params<cudaMemcpyAsync_v3020_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000:
      count_copy_params<cudaMemcpyAsync_ptsz_v7000_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020:
      count_copy2d_params<cudaMemcpy2D_v3020_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020:
      count_copy2d_params<cudaMemcpy2DAsync_v3020_params>(info);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000:
      g_totals.memsets++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
      g_totals.syncs++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
      g_totals.launches++;
      break;
    default:
      break;
  }
  --g_inside_callback;
}

constexpr CUpti_CallbackId kCountedCalls[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
};

void subscribe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CUptiResult r = cuptiSubscribe(&g_subscriber, on_runtime_call, nullptr);
    if (r != CUPTI_SUCCESS) {
      const char* text = nullptr;
      cuptiGetResultString(r, &text);
      g_reason = std::string("CUPTI subscription failed: ") + (text ? text : "unknown") +
                 " (a profiler may already be attached)";
      return;
    }
    // Only the calls we count: every other runtime call runs without a callback.
    for (CUpti_CallbackId cbid : kCountedCalls) {
      if (cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, cbid) != CUPTI_SUCCESS) {
        g_reason = "CUPTI could not enable a runtime API callback";
        cuptiUnsubscribe(g_subscriber);
        return;
      }
    }
    g_available = true;
    g_reason.clear();
  });
}

ApiCounts snapshot() {
  ApiCounts c;
  c.mallocs = g_totals.mallocs;
  c.frees = g_totals.frees;
  c.host_allocs = g_totals.host_allocs;
  c.memcpys = g_totals.memcpys;
  c.memsets = g_totals.memsets;
  c.syncs = g_totals.syncs;
  c.launches = g_totals.launches;
  c.bytes_h2d = g_totals.h2d;
  c.bytes_d2h = g_totals.d2h;
  c.bytes_d2d = g_totals.d2d;
  c.bytes_h2h = g_totals.h2h;
  return c;
}

ApiCounts minus(const ApiCounts& a, const ApiCounts& b) {
  ApiCounts c;
  c.mallocs = a.mallocs - b.mallocs;
  c.frees = a.frees - b.frees;
  c.host_allocs = a.host_allocs - b.host_allocs;
  c.memcpys = a.memcpys - b.memcpys;
  c.memsets = a.memsets - b.memsets;
  c.syncs = a.syncs - b.syncs;
  c.launches = a.launches - b.launches;
  c.bytes_h2d = a.bytes_h2d - b.bytes_h2d;
  c.bytes_d2h = a.bytes_d2h - b.bytes_d2h;
  c.bytes_d2d = a.bytes_d2d - b.bytes_d2d;
  c.bytes_h2h = a.bytes_h2h - b.bytes_h2h;
  return c;
}

}  // namespace

std::string ApiCounts::summary() const {
  std::ostringstream s;
  s << mallocs << " cudaMalloc, " << frees << " cudaFree, " << memcpys << " copies (H2D "
    << bytes_h2d << " B, D2H " << bytes_d2h << " B, D2D " << bytes_d2d << " B), " << syncs
    << " synchronizations, " << launches << " launches";
  return s.str();
}

bool ApiCounter::available() {
  subscribe_once();
  return g_available;
}

std::string ApiCounter::unavailable_reason() {
  subscribe_once();
  return g_reason;
}

ApiCounter::ApiCounter() {
  subscribe_once();
  start_ = snapshot();
}

ApiCounts ApiCounter::counts() const { return minus(snapshot(), start_); }
void ApiCounter::reset() { start_ = snapshot(); }

ApiCounts api_totals() {
  subscribe_once();
  return snapshot();
}

}  // namespace wb
