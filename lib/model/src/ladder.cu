// The transfer-ladder replay (see wb/model/ladder.hpp).
#include "wb/model/ladder.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include "wb/check.hpp"
#include "wb/timing.hpp"  // median_of

namespace wb::model {

namespace {

double now_us() {
  using namespace std::chrono;
  return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// Host time of `step`, with the device idle before and finished after it.
template <typename Step>
double timed(Step&& step) {
  WB_CUDA(cudaDeviceSynchronize());
  const double t0 = now_us();
  step();
  WB_CUDA(cudaDeviceSynchronize());
  return now_us() - t0;
}

// Device memory the protocols keep between calls.
struct Resident {
  float* w = nullptr;  // Preallocated: one buffer for the largest W
  float* x = nullptr;
  float* y = nullptr;
  std::map<const float*, float*> weights;  // Persistent: host matrix -> device copy
  ~Resident() {
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    for (auto& [host, dev] : weights) cudaFree(dev);
  }
};

Breakdown replay_once(const std::vector<MatmulCall>& calls, Protocol protocol,
                      const MatvecLaunch& launch, Resident& resident, std::vector<float>& out) {
  Breakdown b;
  for (const MatmulCall& c : calls) {
    const std::size_t w_bytes = std::size_t(c.n) * std::size_t(c.d) * sizeof(float);
    const std::size_t x_bytes = std::size_t(c.n) * sizeof(float);
    const std::size_t y_bytes = std::size_t(c.d) * sizeof(float);
    // The input is any vector of the right length: the host weights are handy.
    const float* x_host = c.W;
    float *w = resident.w, *x = resident.x, *y = resident.y;
    if (protocol == Protocol::AllocateEveryCall) {
      b.alloc_us += timed([&] {
        WB_CUDA(cudaMalloc(&w, w_bytes));
        WB_CUDA(cudaMalloc(&x, x_bytes));
        WB_CUDA(cudaMalloc(&y, y_bytes));
      });
    }
    if (protocol == Protocol::Persistent) {
      w = resident.weights.at(c.W);
      b.h2d_us += timed([&] { WB_CUDA(cudaMemcpy(x, x_host, x_bytes, cudaMemcpyHostToDevice)); });
    } else {
      b.h2d_us += timed([&] {
        WB_CUDA(cudaMemcpy(w, c.W, w_bytes, cudaMemcpyHostToDevice));
        WB_CUDA(cudaMemcpy(x, x_host, x_bytes, cudaMemcpyHostToDevice));
      });
    }
    b.kernel_us += timed([&] {
      launch(y, x, w, c.n, c.d, nullptr);
      WB_CHECK_LAUNCH("the chapter's matvec");
    });
    b.d2h_us += timed([&] { WB_CUDA(cudaMemcpy(out.data(), y, y_bytes, cudaMemcpyDeviceToHost)); });
    if (protocol == Protocol::AllocateEveryCall) {
      b.free_us += timed([&] {
        WB_CUDA(cudaFree(w));
        WB_CUDA(cudaFree(x));
        WB_CUDA(cudaFree(y));
      });
    }
  }
  return b;
}

}  // namespace

const char* to_string(Protocol p) {
  switch (p) {
    case Protocol::AllocateEveryCall: return "allocate every call";
    case Protocol::Preallocated: return "preallocated";
    case Protocol::Persistent: return "persistent weights";
  }
  return "?";
}

std::vector<MatmulCall> token_matmuls(const Model& model) {
  const Config& c = model.config();
  std::vector<MatmulCall> calls;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = model.weights().layers[std::size_t(l)];
    calls.push_back({"wq", l, w.wq, c.dim, c.dim});
    calls.push_back({"wk", l, w.wk, c.dim, c.kv_dim()});
    calls.push_back({"wv", l, w.wv, c.dim, c.kv_dim()});
    calls.push_back({"wo", l, w.wo, c.dim, c.dim});
    calls.push_back({"w1", l, w.w1, c.dim, c.hidden_dim});
    calls.push_back({"w3", l, w.w3, c.dim, c.hidden_dim});
    calls.push_back({"w2", l, w.w2, c.hidden_dim, c.dim});
  }
  calls.push_back({"classifier", -1, model.weights().classifier, c.dim, c.vocab_size});
  return calls;
}

nlohmann::json Breakdown::to_json() const {
  return {{"alloc", alloc_us}, {"h2d", h2d_us}, {"kernel", kernel_us}, {"d2h", d2h_us}, {"free", free_us}};
}

Breakdown replay_token(const Model& model, Protocol protocol, const MatvecLaunch& launch, int repeats) {
  const std::vector<MatmulCall> calls = token_matmuls(model);
  std::size_t max_n = 0, max_d = 0, max_w = 0;
  for (const MatmulCall& c : calls) {
    max_n = std::max(max_n, std::size_t(c.n));
    max_d = std::max(max_d, std::size_t(c.d));
    max_w = std::max(max_w, std::size_t(c.n) * std::size_t(c.d));
  }
  Resident resident;
  if (protocol != Protocol::AllocateEveryCall) {
    WB_CUDA(cudaMalloc(&resident.x, max_n * sizeof(float)));
    WB_CUDA(cudaMalloc(&resident.y, max_d * sizeof(float)));
  }
  if (protocol == Protocol::Preallocated) WB_CUDA(cudaMalloc(&resident.w, max_w * sizeof(float)));
  if (protocol == Protocol::Persistent) {
    for (const MatmulCall& c : calls) {
      if (resident.weights.count(c.W)) continue;
      const std::size_t bytes = std::size_t(c.n) * std::size_t(c.d) * sizeof(float);
      float* dev = nullptr;
      WB_CUDA(cudaMalloc(&dev, bytes));
      resident.weights[c.W] = dev;
      WB_CUDA(cudaMemcpy(dev, c.W, bytes, cudaMemcpyHostToDevice));
    }
  }
  std::vector<float> out(max_d);
  replay_once(calls, protocol, launch, resident, out);  // untimed: first launches, page faults
  std::vector<double> alloc, h2d, kernel, d2h, free;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const Breakdown b = replay_once(calls, protocol, launch, resident, out);
    alloc.push_back(b.alloc_us);
    h2d.push_back(b.h2d_us);
    kernel.push_back(b.kernel_us);
    d2h.push_back(b.d2h_us);
    free.push_back(b.free_us);
  }
  return {median_of(alloc), median_of(h2d), median_of(kernel), median_of(d2h), median_of(free)};
}

}  // namespace wb::model
