// API-call accounting through CUPTI's callback API. One process-wide subscriber counts the
// runtime calls that matter to the copy chapters and to the timing rules; ApiCounter objects
// take differences of the running totals, so regions may nest or overlap.
//
// Calls are counted when they return, and only when they succeed: a cudaMalloc that fails
// allocated nothing, and the pointer it returned is known only then. Allocations are
// remembered with their sizes so that a free is counted with the size of what it freed; a
// free of a null pointer (a no-op) is counted apart.
#include "wb/api_counter.hpp"

#include <cuda_runtime.h>
#include <cupti.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace wb {
namespace {

struct Totals {
  std::atomic<std::uint64_t> mallocs{0}, frees{0}, null_frees{0}, malloc_bytes{0}, free_bytes{0},
      host_allocs{0}, host_frees{0}, host_alloc_bytes{0}, host_free_bytes{0}, host_registers{0},
      host_unregisters{0}, host_register_bytes{0}, host_unregister_bytes{0}, memcpys{0}, memsets{0},
      device_syncs{0}, stream_syncs{0}, event_syncs{0}, launches{0}, event_creates{0},
      event_destroys{0}, event_records{0}, elapsed_reads{0}, h2d{0}, d2h{0}, d2d{0}, h2h{0},
      graphs_created{0}, graphs_destroyed{0}, graph_execs_created{0}, graph_execs_destroyed{0},
      graph_launches{0};
};
Totals g_totals;
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_available = false;
// Constructed on first use: a test may subscribe from a static initializer (so that every
// allocation of the process is seen with its size), before this file's globals would be.
std::string& g_reason() {
  static std::string reason = "not initialized";
  return reason;
}
// Our own cudaPointerGetAttributes calls (to classify cudaMemcpyDefault) re-enter the
// callback; they must not be counted.
thread_local int g_inside_callback = 0;

// Live allocations and their sizes: device, pinned host, registered host ranges.
std::mutex g_sizes_mutex;
using Sizes = std::unordered_map<const void*, std::size_t>;
Sizes& device_sizes() {
  static Sizes sizes;
  return sizes;
}
Sizes& host_sizes() {
  static Sizes sizes;
  return sizes;
}
Sizes& registered_sizes() {
  static Sizes sizes;
  return sizes;
}

void remember(std::unordered_map<const void*, std::size_t>& sizes, const void* p, std::size_t bytes) {
  std::lock_guard lock(g_sizes_mutex);
  sizes[p] = bytes;
}
std::size_t forget(std::unordered_map<const void*, std::size_t>& sizes, const void* p) {
  std::lock_guard lock(g_sizes_mutex);
  const auto it = sizes.find(p);
  if (it == sizes.end()) return 0;
  const std::size_t bytes = it->second;
  sizes.erase(it);
  return bytes;
}

// The running trace (at most one).
std::mutex g_trace_mutex;

// ElapsedTimeOverride's state (under g_trace_mutex).
std::function<float(long long, float)> g_elapsed_replace;
long long g_elapsed_replaced = 0;
std::atomic<bool> g_tracing{false};
std::vector<ApiTraceEntry>& g_trace() {
  static std::vector<ApiTraceEntry> trace;
  return trace;
}

void trace(ApiTraceEntry e) {
  if (!g_tracing.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(g_trace_mutex);
  if (g_tracing) g_trace().push_back(e);
}
void trace(ApiCall call, const void* handle = nullptr, cudaStream_t stream = nullptr,
           const void* handle2 = nullptr) {
  trace(ApiTraceEntry{call, 0, handle, handle2, stream});
}

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
  trace(ApiCall::Memcpy);
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
const P& params(const CUpti_CallbackData* info) {
  return *static_cast<const P*>(info->functionParams);
}

template <typename P>
void count_copy_params(const CUpti_CallbackData* info) {
  const P& p = params<P>(info);
  count_copy(p.dst, p.src, p.count, p.kind);
}

template <typename P>
void count_copy2d_params(const CUpti_CallbackData* info) {
  const P& p = params<P>(info);
  count_copy(p.dst, p.src, p.width * p.height, p.kind);
}

void device_alloc(const void* p, std::size_t bytes) {
  g_totals.mallocs++;
  g_totals.malloc_bytes += bytes;
  remember(device_sizes(), p, bytes);
  trace(ApiCall::Malloc, p);
}

void device_free(const void* p) {
  if (p == nullptr) {
    g_totals.null_frees++;
    return;
  }
  g_totals.frees++;
  g_totals.free_bytes += forget(device_sizes(), p);
  trace(ApiCall::Free, p);
}

void event_record(cudaEvent_t e, cudaStream_t s) {
  g_totals.event_records++;
  trace(ApiCall::EventRecord, e, s);
}

void launch(cudaStream_t s) {
  g_totals.launches++;
  trace(ApiCall::Launch, nullptr, s);
}

void count_call(CUpti_CallbackId cbid, const CUpti_CallbackData* info) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: {
      const auto& p = params<cudaMalloc_v3020_params>(info);
      device_alloc(*p.devPtr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020: {
      const auto& p = params<cudaMallocPitch_v3020_params>(info);
      device_alloc(*p.devPtr, *p.pitch * p.height);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000: {
      const auto& p = params<cudaMallocManaged_v6000_params>(info);
      device_alloc(*p.devPtr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020: {
      const auto& p = params<cudaMallocAsync_v11020_params>(info);  // same layout for _ptsz
      device_alloc(*p.devPtr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020: {
      const auto& p = params<cudaMallocFromPoolAsync_v11020_params>(info);
      device_alloc(*p.ptr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
      device_free(params<cudaFree_v3020_params>(info).devPtr);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
      device_free(params<cudaFreeAsync_v11020_params>(info).devPtr);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020: {
      const auto& p = params<cudaMallocHost_v3020_params>(info);
      g_totals.host_allocs++;
      g_totals.host_alloc_bytes += p.size;
      remember(host_sizes(), *p.ptr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020: {
      const auto& p = params<cudaHostAlloc_v3020_params>(info);
      g_totals.host_allocs++;
      g_totals.host_alloc_bytes += p.size;
      remember(host_sizes(), *p.pHost, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020: {
      const void* ptr = params<cudaFreeHost_v3020_params>(info).ptr;
      if (ptr == nullptr) break;
      g_totals.host_frees++;
      g_totals.host_free_bytes += forget(host_sizes(), ptr);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000: {
      const auto& p = params<cudaHostRegister_v4000_params>(info);
      g_totals.host_registers++;
      g_totals.host_register_bytes += p.size;
      remember(registered_sizes(), p.ptr, p.size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000: {
      const void* ptr = params<cudaHostUnregister_v4000_params>(info).ptr;
      g_totals.host_unregisters++;
      g_totals.host_unregister_bytes += forget(registered_sizes(), ptr);
      break;
    }
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
      g_totals.device_syncs++;
      trace(ApiCall::DeviceSync);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
      g_totals.stream_syncs++;
      trace(ApiCall::StreamSync, nullptr, params<cudaStreamSynchronize_v3020_params>(info).stream);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020: {
      g_totals.event_syncs++;
      trace(ApiCall::EventSync, params<cudaEventSynchronize_v3020_params>(info).event);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventCreate_v3020:
      g_totals.event_creates++;
      trace(ApiCall::EventCreate, *params<cudaEventCreate_v3020_params>(info).event);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020:
      g_totals.event_creates++;
      trace(ApiCall::EventCreate, *params<cudaEventCreateWithFlags_v3020_params>(info).event);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020:
      g_totals.event_destroys++;
      trace(ApiCall::EventDestroy, params<cudaEventDestroy_v3020_params>(info).event);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020: {
      const auto& p = params<cudaEventRecord_v3020_params>(info);
      event_record(p.event, p.stream);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000: {
      const auto& p = params<cudaEventRecord_ptsz_v7000_params>(info);
      event_record(p.event, p.stream);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010:
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010: {
      const auto& p = params<cudaEventRecordWithFlags_v11010_params>(info);
      event_record(p.event, p.stream);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v3020:  // same parameters (ms, start, end)
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v12080: {
      const auto& p = params<cudaEventElapsedTime_v12080_params>(info);
      g_totals.elapsed_reads++;
      trace(ApiCall::ElapsedTime, p.start, nullptr, p.end);
      {
        std::lock_guard lock(g_trace_mutex);
        if (g_elapsed_replace && p.ms) *p.ms = g_elapsed_replace(g_elapsed_replaced++, *p.ms);
      }
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
      launch(params<cudaLaunchKernel_v7000_params>(info).stream);
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
      const cudaLaunchConfig_t* config = params<cudaLaunchKernelExC_v11060_params>(info).config;
      launch(config ? config->stream : nullptr);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
      launch(params<cudaLaunchCooperativeKernel_v9000_params>(info).stream);
      break;
    // A graph's kernels run without a host launch each: counted apart from `launches`.
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
      g_totals.graph_launches++;
      break;
    // Graphs: made by a capture or cudaGraphCreate, instantiated into executable graphs;
    // each must be destroyed by its owner (chapter 08's StepGraph).
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphCreate_v10000:
      g_totals.graphs_created++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000: {
      const auto& p = params<cudaStreamEndCapture_v10000_params>(info);
      if (p.pGraph && *p.pGraph) g_totals.graphs_created++;
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphDestroy_v10000:
      g_totals.graphs_destroyed++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000:
      g_totals.graph_execs_created++;
      break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000:
      g_totals.graph_execs_destroyed++;
      break;
    default:
      break;
  }
}

void CUPTIAPI on_runtime_call(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  // Counted on the way out: the call's results (the pointer a cudaMalloc returned) are known
  // then, and a call that failed did nothing.
  if (info->callbackSite != CUPTI_API_EXIT || g_inside_callback > 0) return;
  if (info->functionReturnValue &&
      *static_cast<const cudaError_t*>(info->functionReturnValue) != cudaSuccess)
    return;
  ++g_inside_callback;
  count_call(cbid, info);
  --g_inside_callback;
}

constexpr CUpti_CallbackId kCountedCalls[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000,
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
    CUPTI_RUNTIME_TRACE_CBID_cudaEventCreate_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventCreateWithFlags_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventDestroy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventElapsedTime_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphCreate_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphDestroy_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000,
};

void subscribe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const CUptiResult r = cuptiSubscribe(&g_subscriber, on_runtime_call, nullptr);
    if (r != CUPTI_SUCCESS) {
      const char* text = nullptr;
      cuptiGetResultString(r, &text);
      g_reason() = std::string("CUPTI subscription failed: ") + (text ? text : "unknown") +
                 " (a profiler may already be attached)";
      return;
    }
    // Only the calls we count: every other runtime call runs without a callback.
    for (CUpti_CallbackId cbid : kCountedCalls) {
      if (cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, cbid) != CUPTI_SUCCESS) {
        g_reason() = "CUPTI could not enable a runtime API callback";
        cuptiUnsubscribe(g_subscriber);
        return;
      }
    }
    g_available = true;
    g_reason().clear();
  });
}

// The fields of ApiCounts, in one place: snapshot and difference walk the same list.
#define WB_API_COUNT_FIELDS(X)                                                          \
  X(mallocs, mallocs) X(frees, frees) X(null_frees, null_frees) X(malloc_bytes, malloc_bytes) \
  X(free_bytes, free_bytes) X(host_allocs, host_allocs) X(host_frees, host_frees)       \
  X(host_alloc_bytes, host_alloc_bytes) X(host_free_bytes, host_free_bytes)             \
  X(host_registers, host_registers) X(host_unregisters, host_unregisters)               \
  X(host_register_bytes, host_register_bytes) X(host_unregister_bytes, host_unregister_bytes) \
  X(memcpys, memcpys) X(memsets, memsets) X(device_syncs, device_syncs)                 \
  X(stream_syncs, stream_syncs) X(event_syncs, event_syncs) X(launches, launches)       \
  X(event_creates, event_creates) X(event_destroys, event_destroys)                     \
  X(event_records, event_records) X(elapsed_reads, elapsed_reads) X(bytes_h2d, h2d)     \
  X(bytes_d2h, d2h) X(bytes_d2d, d2d) X(bytes_h2h, h2h) X(graphs_created, graphs_created) \
  X(graphs_destroyed, graphs_destroyed) X(graph_execs_created, graph_execs_created)      \
  X(graph_execs_destroyed, graph_execs_destroyed) X(graph_launches, graph_launches)

ApiCounts snapshot() {
  ApiCounts c;
#define WB_TAKE(field, total) c.field = g_totals.total;
  WB_API_COUNT_FIELDS(WB_TAKE)
#undef WB_TAKE
  c.syncs = c.device_syncs + c.stream_syncs + c.event_syncs;
  return c;
}

ApiCounts minus(const ApiCounts& a, const ApiCounts& b) {
  ApiCounts c;
#define WB_DIFF(field, total) c.field = a.field - b.field;
  WB_API_COUNT_FIELDS(WB_DIFF)
#undef WB_DIFF
  c.syncs = a.syncs - b.syncs;
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

std::string ApiCounts::resources() const {
  std::ostringstream s;
  s << mallocs << " device allocations (" << malloc_bytes << " B) and " << frees << " frees ("
    << free_bytes << " B";
  if (null_frees) s << "; plus " << null_frees << " cudaFree(nullptr), which free nothing";
  s << "); " << host_allocs << " pinned host allocations (" << host_alloc_bytes << " B) and "
    << host_frees << " cudaFreeHost (" << host_free_bytes << " B); " << host_registers
    << " cudaHostRegister and " << host_unregisters << " cudaHostUnregister; " << event_creates
    << " events created and " << event_destroys << " destroyed";
  return s.str();
}

bool ApiCounter::available() {
  subscribe_once();
  return g_available;
}

std::string ApiCounter::unavailable_reason() {
  subscribe_once();
  return g_reason();
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

ApiTrace::ApiTrace() {
  subscribe_once();
  std::lock_guard lock(g_trace_mutex);
  if (g_tracing) throw std::logic_error("wb::ApiTrace: only one trace may run at a time");
  g_trace().clear();
  g_tracing = true;
}

ApiTrace::~ApiTrace() {
  std::lock_guard lock(g_trace_mutex);
  g_tracing = false;
}

std::vector<ApiTraceEntry> ApiTrace::entries() const {
  std::lock_guard lock(g_trace_mutex);
  return g_trace();
}

std::string ApiTrace::codes() const {
  std::string s;
  for (const ApiTraceEntry& e : entries()) s += e.code();
  return s;
}

void ApiTrace::note(char mark) { trace(ApiTraceEntry{ApiCall::Note, mark}); }

ElapsedTimeOverride::ElapsedTimeOverride(std::function<float(long long, float)> replace) {
  subscribe_once();
  std::lock_guard lock(g_trace_mutex);
  if (g_elapsed_replace) throw std::logic_error("wb::ElapsedTimeOverride: only one may live at a time");
  g_elapsed_replace = std::move(replace);
  g_elapsed_replaced = 0;
}

ElapsedTimeOverride::~ElapsedTimeOverride() {
  std::lock_guard lock(g_trace_mutex);
  g_elapsed_replace = nullptr;
}

long long ElapsedTimeOverride::calls() const {
  std::lock_guard lock(g_trace_mutex);
  return g_elapsed_replaced;
}

}  // namespace wb
