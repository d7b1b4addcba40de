#pragma once
// Chapter 08 test support: double-precision CPU references of the three kernels of this
// chapter (RoPE + cache append, attention over the KV cache, SwiGLU), the inputs the tests
// draw, a few references of the usual mistakes (to name the rule a wrong answer broke), and
// an element comparison with a per-element tolerance that also accepts an expected NaN.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace ch08::reference {

// ---- RoPE --------------------------------------------------------------------------------
// llama2.c's angle of the pair starting at even element i, computed the way the kernels
// compute it (and llama2.c does): in float, frequency = 1 / powf(10000, (i % head_size) /
// head_size), angle = float(pos) * frequency. `per_head` false is a mistake: i instead of
// i % head_size.
float rope_angle(int i, int head_size, int pos, bool per_head = true);
// x rotated pair by pair by those angles, in double (cos and sin of the float angle).
std::vector<double> rope(std::span<const float> x, int head_size, int pos, bool per_head = true);
// What a float kernel may honestly differ from rope() by, per element: the rotation's own
// rounding (a few ulp of the pair's length r) plus r times the angle's uncertainty. The angle
// is pos * frequency, computed in float: powf differs by up to ~2 ulp between the CPU and the
// GPU (CUDA's powf is within 4 ulp, or another formula for the same frequency), and the
// product is rounded again, so two honest kernels can disagree by several ulp of the angle
// itself. Allowed: 8 * 2^-23 * |angle| radians, ~4e-3 rad at position 4000 (times r).
std::vector<double> rope_tolerance(std::span<const float> x, int head_size, int pos);

// ---- Attention -----------------------------------------------------------------------------
struct AttentionProblem {
  int n_heads = 0, n_kv_heads = 0, head_size = 0, seq_len = 0, pos = 0;
  std::vector<float> q;                        // n_heads * head_size
  std::vector<float> key_cache, value_cache;   // seq_len * kv_dim, rows past pos: garbage
  int kv_dim() const { return n_kv_heads * head_size; }
};
// The mistakes the tests recognize (a double reference of each).
enum class AttentionMistake { None, NoScale, GroupByModulo };
// out[h * head_size + i], in double from the float inputs; reads rows 0 .. pos only.
std::vector<double> attention(const AttentionProblem& p,
                              AttentionMistake mistake = AttentionMistake::None);
std::string describe(const AttentionProblem& p);  // "12 heads / 12 KV heads x 64, seq_len 256, pos 1"

// ---- SwiGLU --------------------------------------------------------------------------------
// silu(g) * up with silu(g) = g / (1 + exp(-g)) in double, silu(-inf) = 0, NaN propagates.
// `swapped` is the mistake silu(up) * gate.
std::vector<double> swiglu(std::span<const float> gate, std::span<const float> up,
                           bool swapped = false);

// ---- Comparison ----------------------------------------------------------------------------
// Element i passes when |got - expected| <= allowed(i); an expected NaN passes only for a
// NaN, an expected infinity only for the same infinity, a NaN never passes otherwise.
// Returns "" when every element passes, else "N of M elements differ (first mismatches ...,
// largest error ...)", without a trailing newline.
std::string mismatches(std::span<const float> got, std::span<const double> expected,
                       const std::function<double(std::size_t)>& allowed,
                       const std::function<std::string(std::size_t)>& index_name,
                       std::size_t show = 5);
// True when every element passes (for telling which mistake a wrong answer matches).
bool matches(std::span<const float> got, std::span<const double> expected,
             const std::function<double(std::size_t)>& allowed);

}  // namespace ch08::reference
