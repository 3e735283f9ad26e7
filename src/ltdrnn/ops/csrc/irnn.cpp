// The whole training recurrence of iRNN at K = 1 (ltdrnn.ops.irnn_torch, FusedIRNN), forward and backward,
// each time loop in one call: the per-step products are BLAS calls on raw pointers (common.h, gemm), the
// activation, the Euler update and its gradient one pass per step. No tensor, view or ATen operator is
// made or called inside a time loop: through ATen the products and views were 4,859 operator calls per
// 784-step sequence, 40 % of the time at batch 1. Operators: torch.ops.ltdrnn.irnn_k1_forward /
// irnn_k1_backward.
//
// Layouts (time-major, contiguous unless said otherwise):
//   c (T, B, H), forward only: on entry the input map c_t = W' x_t + b'; the forward adds the products of the
//       step in place (M y_0 dense, y_0 second^T first^T low rank: there the y_0 of the identity is added on
//       the fly and never stored).
//   h0 (B, H); first, second: M itself (H, H) and an empty second, or the low-rank M = I + first second
//       with first = V' (H, R) and second = H (R, H) (any strides: each call makes a contiguous copy of a
//       strided one before its loop, at most H * H numbers).
//   record (T or 1, B, H): phi of every step (1 reused row when no backward follows); with relu (T or 1, B,
//       ceil(H / 8)) uint8, only the bits of phi > 0 (check_record); outputs (T, B, H).
//   zs (T or 1, B, R), low rank only: h_{t-1} second^T, the forward's inner product, kept for the gradient of
//       V' (sum_t dpre_t^T z_t); an empty tensor for a dense M.
//   grad_outputs (T, B, H), any strides (the gradient of a sum or mean arrives expanded, stride 0).
//   x (T, B, d) and weight (H, d), backward only: the input and the input map's weight W' (any strides), for
//       the gradients of W' (eta sum_t dpre_t^T x_t) and of x (eta dpre_t W').
// The backward keeps no (T, B, H) gradient: each thread adds its rows' share of every parameter gradient
// step by step, while the step's dpre is in cache (not by products over all steps after the loop, which
// re-read dpre and the outputs: measured in lab/notes/irnn-speed.md).
// Per step, with the reading's (s, r) (ltdrnn.cells.irnn.READINGS):
//   y_0 = s h_{t-1};  pre = M y_0 + c_t;  y_1 = y_0 + eta (phi(pre) - alpha y_0);  h_t = y_1 - r h_{t-1}
//
// Low rank (R = 16 at H = 128): the two factors cost 2 R / H = 1/4 of the dense product's FLOPs, forward
// and backward, and the gradients of V' and H come from each step's products with R columns instead of the
// (H, H) gradient of M. (The PyTorch loop applies the dense M: there each extra product
// is a dispatch that costs more than the FLOPs it saves.)
//
// float32 relu with a low-rank M on an AVX-512 CPU (the benchmark's iRNN) runs its own loops, in fused tiles
// (namespace fused below: the product through V' or H and the step's elementwise work in one tile).
//
// Threads: as TARNN's loops (csrc/tarnn.cpp, "Threads"): the batch is split once into one block of rows
// per thread, and each thread runs all T steps of its rows with single-threaded BLAS (over_batch_blocks),
// so nothing is handed between threads per step. Only the parameter gradients are shared: each block
// keeps its own sums and they are added in block order (the same result for a given thread count).
#include "common.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <tuple>
#include <utility>

namespace {

using namespace ltdrnn;

// `lead` (named `name`: the outputs) fixes T, B, H and the dtype.
void check_sequence(const at::Tensor& lead, const char* name, const at::Tensor& h0, int64_t act, const char* op) {
  TORCH_CHECK(lead.device().is_cpu() && lead.dim() == 3 && lead.is_contiguous() && lead.size(0) > 0, op, ": ", name,
              " must be a contiguous CPU (T, B, H) tensor with T > 0, got ", lead.sizes());
  TORCH_CHECK(lead.scalar_type() == at::kFloat || lead.scalar_type() == at::kDouble, op,
              ": expected float32 or float64, got ", lead.scalar_type());
  TORCH_CHECK(h0.sizes() == at::IntArrayRef({lead.size(1), lead.size(2)}) && h0.is_contiguous() &&
                  h0.scalar_type() == lead.scalar_type() && h0.device().is_cpu(),
              op, ": h0 must be a contiguous (B, H) = (", lead.size(1), ", ", lead.size(2), ") CPU tensor of ", name,
              "'s dtype, got ", h0.sizes(), " ", h0.scalar_type());
  TORCH_CHECK(act >= 0 && act <= 2, op, ": activation code must be 0 (relu), 1 (tanh) or 2 (sigmoid), got ", act);
}

// A contiguous CPU (T, B, cols) tensor of lead's dtype; (1, B, cols) also when one_row_allowed.
void check_rows(const at::Tensor& t, const at::Tensor& lead, const char* lead_name, int64_t cols,
                bool one_row_allowed, const char* op, const char* name) {
  const bool rows = t.dim() == 3 && (t.size(0) == lead.size(0) || (one_row_allowed && t.size(0) == 1));
  TORCH_CHECK(rows && t.size(1) == lead.size(1) && t.size(2) == cols && t.is_contiguous() &&
                  t.scalar_type() == lead.scalar_type() && t.device().is_cpu(),
              op, ": ", name, " must be a contiguous CPU ", one_row_allowed ? "(T or 1, B, " : "(T, B, ", cols,
              ") tensor of ", lead_name, "'s dtype, got ", t.sizes(), " ", t.scalar_type());
}

// relu's record: one bit per hidden unit, set where phi > 0 (NaN: not set), rows of sign_bytes(H) bytes
// (common.h).

// What the forward keeps of phi for the backward (T or 1 steps: one_row_allowed), `lead`'s (T, B) rows: with
// tanh and sigmoid phi itself, lead's dtype and H columns; with relu (act 0) its sign bits, uint8 with
// ceil(H / 8) columns: relu's slope is 0 or 1, and its value enters only <g, phi>, which irnn_k1_backward
// forms without phi. 1/32 of the bytes of phi in float32 (51 MB a sequence at pixel MNIST), written once
// and read once per training step.
void check_record(const at::Tensor& record, const at::Tensor& lead, int64_t act, bool one_row_allowed,
                  const char* op) {
  if (act != 0) return check_rows(record, lead, "outputs", lead.size(2), one_row_allowed, op, "record");
  const bool rows = record.dim() == 3 && (record.size(0) == lead.size(0) || (one_row_allowed && record.size(0) == 1));
  TORCH_CHECK(rows && record.size(1) == lead.size(1) && record.size(2) == sign_bytes(lead.size(2)) &&
                  record.is_contiguous() && record.device().is_cpu() && record.scalar_type() == at::kByte,
              op, ": record must be a contiguous CPU ", one_row_allowed ? "(T or 1, B, " : "(T, B, ", "ceil(H / 8) = ",
              sign_bytes(lead.size(2)), ") uint8 tensor of relu's sign bits, got ", record.sizes(), " ",
              record.scalar_type());
}

// first and second (the layouts above); returns R, or 0 for a dense M.
int64_t check_operator(const at::Tensor& first, const at::Tensor& second, const at::Tensor& lead,
                       const char* lead_name, const char* op) {
  const int64_t hidden = lead.size(2);
  auto check_kind = [&](const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == lead.scalar_type(), op, ": ", name, " must be a CPU tensor of ",
                lead_name, "'s dtype, got ", t.scalar_type(), " on ", t.device());
  };
  check_kind(first, "first");
  check_kind(second, "second");
  if (second.numel() == 0) {
    TORCH_CHECK(first.sizes() == at::IntArrayRef({hidden, hidden}), op, ": first must be M, (H, H) = (", hidden,
                ", ", hidden, "), when second is empty, got ", first.sizes());
    return 0;
  }
  TORCH_CHECK(first.dim() == 2 && first.size(0) == hidden && first.size(1) > 0, op,
              ": first must be V', (H, R) with H = ", hidden, ", got ", first.sizes());
  const int64_t rank = first.size(1);
  TORCH_CHECK(second.sizes() == at::IntArrayRef({rank, hidden}), op, ": second must be (R, H) = (", rank, ", ",
              hidden, "), got ", second.sizes());
  return rank;
}

// Where row `begin` of step t starts in a contiguous (T or 1, B, n) tensor: a tensor of one step (kept
// when no backward follows) serves every t. The loops index their buffers by pointer, never by a view.
template <typename T>
class StepPointer {
 public:
  StepPointer() = default;
  StepPointer(const at::Tensor& all, int64_t begin)
      : first_(all.data_ptr<T>() + begin * all.size(2)), stride_(all.size(0) == 1 ? 0 : all.size(1) * all.size(2)) {}
  T* at(int64_t t) const { return first_ + t * stride_; }

 private:
  T* first_ = nullptr;
  int64_t stride_ = 0;
};

// The forward's products per step, their weights packed once for all T steps (products.h): pre = b' + x_t W'^T
// + s h_{t-1} M^T, dense; low rank through z = h_{t-1} H^T (kept for the backward), pre = b' + x_t W'^T + s z
// V'^T (the identity's s h is added by forward_span). first = M or V', second = H, weight = W', contiguous.
template <typename T>
struct ForwardProducts {
  StepProduct<T> z, pre;
  ForwardProducts(const T* first, const T* second, const T* weight, int64_t hidden, int64_t rank, int64_t dim, T s)
      : z(rank, {second, 1, hidden}, rank > 0 ? hidden : 0),
        pre(hidden, {first, 1, rank > 0 ? rank : hidden}, rank > 0 ? rank : hidden, {weight, 1, dim}, dim, s) {}

  void run(T* pre_rows, const T* h, T* z_rows, const T* x, const T* bias, int64_t rows, int64_t hidden,
           int64_t rank, int64_t dim) const {
    if (rank == 0) {
      pre.run(rows, h, hidden, x, dim, pre_rows, hidden, Start::bias, bias);
      return;
    }
    z.run(rows, h, hidden, nullptr, 0, z_rows, rank, Start::zero);
    pre.run(rows, z_rows, rank, x, dim, pre_rows, hidden, Start::bias, bias);
  }
};

// Forward, one step over n = rows * H entries: phi = phi(pre (+ y_0 for low rank)), h_t from h_{t-1}.
template <int Act, bool LowRank, typename T>
void forward_span(const T* __restrict pre, const T* __restrict h, T* __restrict phi_out, T* __restrict out,
                  int64_t n, T eta, T alpha, T s, T r) {
  for (int64_t i = 0; i < n; ++i) {
    const T y = s * h[i];
    const T phi = activate<Act>(LowRank ? pre[i] + y : pre[i]);
    phi_out[i] = phi;
    out[i] = y + eta * (phi - alpha * y) - r * h[i];
  }
}

// forward_span for relu with the sign bits, in float32 with AVX-512: the compare that makes relu's mask gives
// the bits too, and phi is never stored (no scratch row, no second pass). Elsewhere: forward_span into a
// scratch row, then pack_positive (common.h).
template <bool LowRank, typename T>
void relu_span_with_signs(const T* pre, const T* h, T* phi, uint8_t* bits, T* out, int64_t rows, int64_t hidden,
                          T eta, T alpha, T s, T r) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 zero = _mm512_setzero_ps(), sv = _mm512_set1_ps(s), ev = _mm512_set1_ps(eta);
    const __m512 av = _mm512_set1_ps(alpha), rv = _mm512_set1_ps(r);
    for (int64_t b = 0; b < rows; ++b, pre += hidden, h += hidden, out += hidden, bits += sign_bytes(hidden)) {
      for (int64_t j = 0; j < hidden; j += 16) {
        const __mmask16 lanes = avx512::lanes(hidden - j);
        const __m512 hv = _mm512_maskz_loadu_ps(lanes, h + j), y = _mm512_mul_ps(sv, hv);
        const __m512 v = LowRank ? _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, pre + j), y)
                                 : _mm512_maskz_loadu_ps(lanes, pre + j);
        const __m512 phi_v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_NLE_UQ), v);  // keeps NaN
        const uint16_t positive = _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ) & lanes;
        const __m512 step = _mm512_fmadd_ps(ev, _mm512_fnmadd_ps(av, y, phi_v), y);  // y + eta (phi - alpha y)
        const __m512 next = _mm512_fnmadd_ps(rv, hv, step);
        if (lanes == 0xFFFF) {  // masked stores are slow on Zen 4: only at a row's end
          _mm512_storeu_ps(out + j, next);
          std::memcpy(bits + j / 8, &positive, sizeof positive);
        } else {
          _mm512_mask_storeu_ps(out + j, lanes, next);
          std::memcpy(bits + j / 8, &positive, hidden - j > 8 ? 2 : 1);
        }
      }
    }
    return;
  }
#endif
  forward_span<0, LowRank>(pre, h, phi, out, rows * hidden, eta, alpha, s, r);
  for (int64_t b = 0; b < rows; ++b) pack_positive(bits + b * sign_bytes(hidden), phi + b * hidden, hidden);
}

// The slopes (0 or 1) of n values from their bits, as pack_positive (common.h) wrote them.
template <typename T>
void load_slopes(const uint8_t* bits, int64_t n, T* slopes) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; j + 16 <= n; j += 16) {
      uint16_t mask;
      std::memcpy(&mask, bits + j / 8, sizeof mask);
      _mm512_storeu_ps(slopes + j, _mm512_maskz_mov_ps(mask, _mm512_set1_ps(1.0f)));
    }
  } else {
    for (; j + 8 <= n; j += 8) _mm512_storeu_pd(slopes + j, _mm512_maskz_mov_pd(bits[j / 8], _mm512_set1_pd(1.0)));
  }
#endif
  for (; j < n; ++j) slopes[j] = T((bits[j / 8] >> (j % 8)) & 1);
}

// ---- fused tiles: relu, low rank, float32 with AVX-512 ---------------------------------------------------
// The products of inner size R (+ d) and H columns (forward pre = b' + x_t W'^T + s z V'^T, backward carry +=
// s eta w H) in StepProduct's 8 x 32 tiles did only R x R FMAs between zeroing the registers and storing them, and
// the elementwise pass then re-read what they stored. Here one tile keeps a few rows' whole chunk of 128 columns
// in registers over the sum and applies the step's elementwise work in its epilogue: pre and the product's share
// of the carry are never stored (the training step 15-19 % less CPU time at one thread: lab/notes/irnn-speed.md,
// 2026-11-27, eighth session). The products of inner size H (z = h H^T, w = d V') stay StepProduct's.
#if defined(__AVX512F__)
namespace fused {

using avx512::kLanes;
constexpr int kVectors = 8;                   // registers per row of a tile
constexpr int64_t kChunk = kVectors * kLanes;  // columns per tile
constexpr int kRows = 3;                      // rows per tile: 24 accumulators, the A values and one B register

// The weights of a fused product, prepared once per call: chunk by chunk of kChunk columns, the rows of each part
// in order (part: k rows of scale * B, B's entry (i, j) at data[i * row + j * col]), each kChunk floats, zero
// past n; a tile reads its chunk's rows one after another.
class Panels {
 public:
  struct Part {
    Strided<float> b;
    int64_t k;
    float scale;
  };

  Panels(int64_t n, std::initializer_list<Part> parts) {
    for (const Part& part : parts) depth_ += part.k;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const size_t bytes = size_t(std::max<int64_t>(1, chunks * depth_) * kChunk) * sizeof(float);  // a multiple of 64
    data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    TORCH_CHECK(data_, "irnn: out of memory packing a ", depth_, " x ", n, " weight");
    float* out = data_.get();
    for (int64_t col = 0; col < chunks * kChunk; col += kChunk) {
      for (const Part& part : parts) {
        for (int64_t i = 0; i < part.k; ++i, out += kChunk) {
          for (int64_t j = 0; j < kChunk; ++j) {
            out[j] = col + j < n ? part.scale * part.b.data[i * part.b.row + (col + j) * part.b.col] : 0.0f;
          }
        }
      }
    }
  }

  // The rows of the chunk that starts at column col (a multiple of kChunk).
  const float* chunk(int64_t col) const { return data_.get() + col / kChunk * depth_ * kChunk; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t depth_ = 0;
};

// acc[r] += sum over kk < k of a[r * lda + kk] b[kk] (b: k rows of kChunk floats). One register of B at a time
// and the Rows values of A held, so that 24 accumulators fit with them (a whole row of B held would not).
template <int Rows, int Vectors>
__attribute__((always_inline)) inline void accumulate_rows(__m512 (&acc)[Rows][Vectors], const float* a, int64_t lda,
                                                           const float* b, int64_t k) {
  for (int64_t kk = 0; kk < k; ++kk, b += kChunk) {
    __m512 av[Rows];
    #pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) av[r] = _mm512_set1_ps(a[r * lda + kk]);
    #pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) {
      const __m512 bv = _mm512_load_ps(b + v * kLanes);
      #pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) acc[r][v] = _mm512_fmadd_ps(av[r], bv, acc[r][v]);
    }
  }
}

// Runs Tile<rows, vectors>::run(args) for rows in 1 .. kRows and vectors in 1 .. kVectors.
template <template <int, int> class Tile, typename Args, int... I>
void run_tile_of(int64_t rows, int64_t vectors, const Args& args, std::integer_sequence<int, I...>) {
  const int64_t index = (rows - 1) * kVectors + vectors - 1;
  (void)((index == I ? (Tile<I / kVectors + 1, I % kVectors + 1>::run(args), true) : false) || ...);
}

template <template <int, int> class Tile, typename Args>
void run_tile(int64_t rows, int64_t vectors, const Args& args) {
  run_tile_of<Tile>(rows, vectors, args, std::make_integer_sequence<int, kRows * kVectors>{});
}

// Calls tile(row, col, rows, vectors, last) over a block's rows, tile by tile, chunk by chunk (`last` masks the
// lanes of a chunk's last register that lie inside the row).
template <typename Body>
void over_tiles(int64_t rows, int64_t hidden, const Body& tile) {
  for (int64_t col = 0; col < hidden; col += kChunk) {
    const int64_t columns = std::min(kChunk, hidden - col), vectors = (columns + kLanes - 1) / kLanes;
    const __mmask16 last = avx512::lanes(columns - (vectors - 1) * kLanes);
    for (int64_t row = 0; row < rows; row += kRows) tile(row, col, std::min<int64_t>(kRows, rows - row), vectors, last);
  }
}

// One forward tile: its rows' pre-activations over one chunk, from the panel (bias, s V'^T, W'^T) and the rows
// of z and x_t, then relu's step on pre + s h_{t-1} into the outputs and the sign bits. Pointers at the tile's
// first row and the chunk's first column.
struct ForwardTileArgs {
  const float* panel;
  const float *z, *x, *h;
  float* out;
  uint8_t* bits;
  int64_t rank, dim, hidden;
  __mmask16 last;
  float eta, alpha, s, r;
};

template <int Rows, int Vectors>
struct ForwardTile {
  static void run(const ForwardTileArgs& arguments) {
    const ForwardTileArgs args = arguments;  // a local copy: its fields stay in registers across the stores
    const int64_t hidden = args.hidden, bit_row = sign_bytes(hidden);
    __m512 acc[Rows][Vectors];
    #pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) {
      const __m512 bias = _mm512_load_ps(args.panel + v * kLanes);
      #pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) acc[r][v] = bias;
    }
    const float* weights = args.panel + kChunk;
    accumulate_rows<Rows, Vectors>(acc, args.z, args.rank, weights, args.rank);
    accumulate_rows<Rows, Vectors>(acc, args.x, args.dim, weights + args.rank * kChunk, args.dim);
    const __m512 zero = _mm512_setzero_ps(), sv = _mm512_set1_ps(args.s), ev = _mm512_set1_ps(args.eta);
    const __m512 av = _mm512_set1_ps(args.alpha), rv = _mm512_set1_ps(args.r);
    #pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      const float* h = args.h + r * hidden;
      float* out = args.out + r * hidden;
      uint8_t* bits = args.bits + r * bit_row;
      #pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v) {
        const bool whole = v + 1 < Vectors || args.last == 0xFFFF;  // masked stores are slow on Zen 4
        const __m512 hv = whole ? _mm512_loadu_ps(h + v * kLanes) : _mm512_maskz_loadu_ps(args.last, h + v * kLanes);
        const __m512 y = _mm512_mul_ps(sv, hv), pre = _mm512_add_ps(acc[r][v], y);
        const __m512 phi = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(pre, zero, _CMP_NLE_UQ), pre);  // keeps NaN
        const __m512 next = _mm512_fnmadd_ps(rv, hv, _mm512_fmadd_ps(ev, _mm512_fnmadd_ps(av, y, phi), y));
        if (whole) {
          const uint16_t positive = _mm512_cmp_ps_mask(pre, zero, _CMP_GT_OQ);
          _mm512_storeu_ps(out + v * kLanes, next);
          std::memcpy(bits + v * 2, &positive, sizeof positive);
        } else {
          const uint16_t positive = _mm512_cmp_ps_mask(pre, zero, _CMP_GT_OQ) & args.last;
          _mm512_mask_storeu_ps(out + v * kLanes, args.last, next);
          std::memcpy(bits + v * 2, &positive, args.last > 0xFF ? 2 : 1);
        }
      }
    }
  }
};

// The forward's products and relu step of one step over a block's rows: z = h_{t-1} H^T by StepProduct (inner
// size H: its tiles run near their peak), then the fused tiles. first = V' (H, R), second = H (R, H), weight =
// W' (H, d), bias = b', contiguous.
class ReluForward {
 public:
  ReluForward(const float* first, const float* second, const float* weight, const float* bias, int64_t hidden,
              int64_t rank, int64_t dim, float s)
      : z_(rank, {second, 1, hidden}, hidden),
        panels_(hidden, {{{bias, 0, 1}, 1, 1.0f}, {{first, 1, rank}, rank, s}, {{weight, 1, dim}, dim, 1.0f}}),
        hidden_(hidden), rank_(rank), dim_(dim) {}

  void run(const float* h, float* z, const float* x, float* out, uint8_t* bits, int64_t rows, float eta, float alpha,
           float s, float r) const {
    z_.run(rows, h, hidden_, nullptr, 0, z, rank_, Start::zero);
    over_tiles(rows, hidden_, [&](int64_t row, int64_t col, int64_t tile_rows, int64_t vectors, __mmask16 last) {
      const ForwardTileArgs args{panels_.chunk(col), z + row * rank_, x + row * dim_, h + row * hidden_ + col,
                                 out + row * hidden_ + col, bits + row * sign_bytes(hidden_) + col / 8, rank_, dim_,
                                 hidden_, last, eta, alpha, s, r};
      run_tile<ForwardTile>(tile_rows, vectors, args);
    });
  }

 private:
  StepProduct<float> z_;
  Panels panels_;
  int64_t hidden_, rank_, dim_;
};

}  // namespace fused
#endif

// x (T, B, d) contiguous and the input map's weight (H, d) (any strides), T, B, H and the dtype those of
// `lead` (named `lead_name`); returns d.
int64_t check_input(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lead, const char* lead_name,
                    const char* op) {
  TORCH_CHECK(x.dim() == 3 && x.size(0) == lead.size(0) && x.size(1) == lead.size(1) && x.size(2) > 0, op,
              ": x must be a (T, B, d) = (", lead.size(0), ", ", lead.size(1), ", d) tensor, got ", x.sizes());
  check_rows(x, lead, lead_name, x.size(2), false, op, "x");
  check_tensor(weight, lead, {lead.size(2), x.size(2)}, op, "weight", false);
  return x.size(2);
}

#if defined(__AVX512F__)
// irnn_k1_forward's loop in fused tiles (fused::ReluForward): relu, low rank, float32; operands checked, first,
// second, weight and bias contiguous.
void relu_forward_in_tiles(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& h0,
                           const at::Tensor& first, const at::Tensor& second, float eta, float alpha, float s, float r,
                           const at::Tensor& record, const at::Tensor& zs, const at::Tensor& outputs) {
  const int64_t steps = outputs.size(0), batch = outputs.size(1), hidden = outputs.size(2);
  const fused::ReluForward tiles(first.data_ptr<float>(), second.data_ptr<float>(), weight.data_ptr<float>(),
                                 bias.data_ptr<float>(), hidden, first.size(1), x.size(2), s);
  over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
    const int64_t rows = end - begin;
    const StepPointer<float> x_rows(x, begin), outs(outputs, begin), z_rows(zs, begin);
    const StepPointer<uint8_t> sign_rows(record, begin);
    const float* first_h = h0.data_ptr<float>() + begin * hidden;
    for (int64_t t = 0; t < steps && rows > 0; ++t) {
      tiles.run(t == 0 ? first_h : outs.at(t - 1), z_rows.at(t), x_rows.at(t), outs.at(t), sign_rows.at(t), rows, eta,
                alpha, s, r);
    }
  });
}
#endif

void irnn_k1_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& h0,
                     const at::Tensor& first, const at::Tensor& second, double eta, double alpha, double s, double r,
                     int64_t act, at::Tensor record, at::Tensor zs, at::Tensor outputs) {
  constexpr const char* op = "irnn_k1_forward";
  check_sequence(outputs, "outputs", h0, act, op);
  const int64_t rank = check_operator(first, second, outputs, "outputs", op);
  check_record(record, outputs, act, true, op);
  const bool signs = act == 0;
  if (rank > 0) check_rows(zs, outputs, "outputs", rank, true, op, "zs");
  const int64_t dim = check_input(x, weight, outputs, "outputs", op);
  check_tensor(bias, outputs, {outputs.size(2)}, op, "bias", false);
  const int64_t steps = outputs.size(0), batch = outputs.size(1), hidden = outputs.size(2);
  // a copy only if strided
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous();
  const at::Tensor weight_c = weight.contiguous(), bias_c = bias.contiguous();
#if defined(__AVX512F__)
  if (outputs.scalar_type() == at::kFloat && rank > 0 && signs) {
    return relu_forward_in_tiles(x, weight_c, bias_c, h0, first_c, second_c, float(eta), float(alpha), float(s),
                                 float(r), record, zs, outputs);
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(outputs.scalar_type(), op, [&] {
    const auto e = static_cast<scalar_t>(eta), a = static_cast<scalar_t>(alpha);
    const auto sv = static_cast<scalar_t>(s), rv = static_cast<scalar_t>(r);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    const scalar_t *input_weight = weight_c.data_ptr<scalar_t>(), *input_bias = bias_c.data_ptr<scalar_t>();
    const ForwardProducts<scalar_t> products(m_first, m_second, input_weight, hidden, rank, dim, sv);
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      over_batch_blocks(batch, rows_per_thread(batch), [&](int64_t begin, int64_t end, int64_t) {
        const int64_t rows = end - begin;
        // this step's pre-activations, and phi when relu's bits are taken from it (relu_span_with_signs)
        std::vector<scalar_t> pre(rows * hidden), phi(signs ? rows * hidden : 0);
        const StepPointer<scalar_t> x_rows(x, begin), outs(outputs, begin);
        const StepPointer<scalar_t> phi_rows = signs ? StepPointer<scalar_t>() : StepPointer<scalar_t>(record, begin);
        const StepPointer<uint8_t> sign_rows = signs ? StepPointer<uint8_t>(record, begin) : StepPointer<uint8_t>();
        const StepPointer<scalar_t> z_rows = rank > 0 ? StepPointer<scalar_t>(zs, begin) : StepPointer<scalar_t>();
        const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
        for (int64_t t = 0; t < steps && rows > 0; ++t) {
          const scalar_t* h = t == 0 ? first_h : outs.at(t - 1);
          products.run(pre.data(), h, z_rows.at(t), x_rows.at(t), input_bias, rows, hidden, rank, dim);
          if (signs && rank > 0) {
            relu_span_with_signs<true>(pre.data(), h, phi.data(), sign_rows.at(t), outs.at(t), rows, hidden, e, a, sv,
                                       rv);
          } else if (signs) {
            relu_span_with_signs<false>(pre.data(), h, phi.data(), sign_rows.at(t), outs.at(t), rows, hidden, e, a, sv,
                                        rv);
          } else if (rank > 0) {
            forward_span<Act, true>(pre.data(), h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          } else {
            forward_span<Act, false>(pre.data(), h, phi_rows.at(t), outs.at(t), rows * hidden, e, a, sv, rv);
          }
        }
      });
    });
  });
}

// How a row of grad_outputs is laid out: unit stride (as autograd usually hands it over), stride 0 (the
// gradient of a sum or mean arrives expanded) or any other stride. A template argument, so that the first
// two read a plain array or one number and the row loop vectorises (a run-time stride made it scalar).
enum class GradRow { unit, broadcast, strided };

template <typename Body>
void with_grad_row(int64_t stride, Body body) {
  if (stride == 1) return body(std::integral_constant<GradRow, GradRow::unit>{});
  if (stride == 0) return body(std::integral_constant<GradRow, GradRow::broadcast>{});
  return body(std::integral_constant<GradRow, GradRow::strided>{});
}

template <GradRow Layout, typename T>
inline T grad_entry(const T* row, int64_t j, int64_t stride) {
  if constexpr (Layout == GradRow::unit) return row[j];
  if constexpr (Layout == GradRow::broadcast) return row[0];
  return row[j * stride];
}

// One block's share of the parameter gradients, summed over its rows and all steps while each step's rows
// are in cache (before the factors eta and s): sum_t d_t^T z_t (low rank, for V') or d_t^T h_{t-1} (dense,
// for M); sum_t w_t^T h_{t-1} (low rank, for H); sum_t d_t^T x_t and the column sums of d_t (the input
// map's weight and bias); and the sums <g, phi>, <g, y_0> for eta and alpha.
template <typename T>
struct BlockSums {
  BlockSums(int64_t first_size, int64_t second_size, int64_t hidden, int64_t dim)
      : first(first_size), second(second_size), weight(hidden * dim), bias(hidden) {}
  std::vector<T> first, second, weight, bias;
  double dot_phi = 0.0, dot_y = 0.0;
};

// Backward, one step over `rows` rows: g = grad_out + carry; d (over c_t) = g phi'(pre); carry becomes
// keep g, plus s eta d, the identity's part of d M, for low rank. Adds <g, phi>, <g, y_0> and the column
// sums of d to the block's sums. With Signs (relu's record), `phi` holds the slopes (0 or 1), and in place
// of <g, phi> = <d, pre> it adds <d, h_{t-1}> (low rank; see irnn_k1_backward). Each row of step t - 1's
// grad_out (grad_step elements back) is fetched while row b of step t is worked (prefetch_previous_step).
template <int Act, bool LowRank, bool Signs, GradRow Layout, typename T>
void backward_rows(T* __restrict d, const T* __restrict phi, const T* __restrict prev, const T* grad_out,
                   const int64_t* grad_strides, T* __restrict carry, int64_t rows, int64_t hidden, T s, T keep,
                   T s_eta, BlockSums<T>& sums, int64_t t, int64_t grad_step) {
  T* __restrict bias = sums.bias.data();
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t row = b * hidden;
    const T* grad_b = grad_out + b * grad_strides[0];
    prefetch_previous_step(grad_b, t, grad_step, grad_strides[0], hidden);
    T sum_phi = 0, sum_y = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      const T gj = grad_entry<Layout>(grad_b, j, grad_strides[1]) + carry[row + j];
      const T phi_j = phi[row + j];
      sum_y += gj * s * prev[row + j];
      const T dj = gj * (Signs ? phi_j : activation_slope<Act>(phi_j));
      if constexpr (!Signs) sum_phi += gj * phi_j;
      if constexpr (Signs && LowRank) sum_phi += dj * prev[row + j];
      d[row + j] = dj;
      bias[j] += dj;
      carry[row + j] = LowRank ? keep * gj + s_eta * dj : keep * gj;
    }
    sums.dot_phi += static_cast<double>(sum_phi);
    sums.dot_y += static_cast<double>(sum_y);
  }
}

#if defined(__AVX512F__)
namespace fused {

// One backward tile: its rows of step t over one chunk. The gradient of h_t is the carry kept from step t + 1
// (keep g + s eta d, its part outside the product) plus s eta w_{t+1} H (the panel's R rows; none at the last
// step, which has no step after it); with grad_out it makes g, then d = g where pre > 0 (the sign bits), and the
// carry for step t - 1 is written in place of the old one. d is stored for the products after the tiles
// (w = d V', the factor sums); its column sums, <d, h_{t-1}> (relu's share of <g, phi>, irnn_k1_backward) and
// <g, h_{t-1}> are added to the block's sums. Pointers at the tile's first row and the chunk's first column;
// grad_out's rows of unit stride, grad_row apart, grad_step from step to step.
struct BackwardTileArgs {
  const float *panel, *w;
  float* carry;
  const float* grad;
  int64_t grad_row, grad_step;
  const uint8_t* bits;
  const float* prev;
  float *d, *bias_sums;
  double *dot_phi, *dot_y;
  int64_t rank, hidden, t;
  __mmask16 last;
  float keep, s_eta, s;
};

template <int Rows, int Vectors>
struct BackwardTile {
  static void run(const BackwardTileArgs& arguments) {
    const BackwardTileArgs args = arguments;  // a local copy: its fields stay in registers across the stores
    const int64_t hidden = args.hidden, bit_row = sign_bytes(hidden);
    __m512 acc[Rows][Vectors];
    #pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      #pragma GCC unroll 8
      for (int v = 0; v < Vectors; ++v) {
        const float* carry = args.carry + r * hidden + v * kLanes;
        acc[r][v] = v + 1 < Vectors ? _mm512_loadu_ps(carry) : _mm512_maskz_loadu_ps(args.last, carry);
      }
    }
    accumulate_rows<Rows, Vectors>(acc, args.w, args.rank, args.panel, args.rank);
    const __m512 keep = _mm512_set1_ps(args.keep), s_eta = _mm512_set1_ps(args.s_eta);
    __m512 sum_phi = _mm512_setzero_ps(), sum_y = _mm512_setzero_ps();
    #pragma GCC unroll 8
    for (int v = 0; v < Vectors; ++v) {
      const bool whole = v + 1 < Vectors || args.last == 0xFFFF;  // masked stores are slow on Zen 4
      const __mmask16 lanes = v + 1 < Vectors ? __mmask16(0xFFFF) : args.last;
      __m512 column_sum = _mm512_setzero_ps();
      #pragma GCC unroll 8
      for (int r = 0; r < Rows; ++r) {
        const int64_t at = r * hidden + v * kLanes;
        uint16_t positive = 0;
        std::memcpy(&positive, args.bits + r * bit_row + v * 2, lanes > 0xFF ? 2 : 1);
        const float* grad = args.grad + r * args.grad_row + v * kLanes;
        const __m512 g = _mm512_add_ps(whole ? _mm512_loadu_ps(grad) : _mm512_maskz_loadu_ps(lanes, grad), acc[r][v]);
        const __m512 d = _mm512_maskz_mov_ps(positive & lanes, g);
        const __m512 prev = whole ? _mm512_loadu_ps(args.prev + at) : _mm512_maskz_loadu_ps(lanes, args.prev + at);
        sum_y = _mm512_fmadd_ps(g, prev, sum_y);
        sum_phi = _mm512_fmadd_ps(d, prev, sum_phi);
        column_sum = _mm512_add_ps(column_sum, d);
        const __m512 carry = _mm512_fmadd_ps(keep, g, _mm512_mul_ps(s_eta, d));
        if (whole) {
          _mm512_storeu_ps(args.d + at, d);
          _mm512_storeu_ps(args.carry + at, carry);
        } else {
          _mm512_mask_storeu_ps(args.d + at, lanes, d);
          _mm512_mask_storeu_ps(args.carry + at, lanes, carry);
        }
      }
      float* bias = args.bias_sums + v * kLanes;
      if (whole) {
        _mm512_storeu_ps(bias, _mm512_add_ps(_mm512_loadu_ps(bias), column_sum));
      } else {
        _mm512_mask_storeu_ps(bias, lanes, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, bias), column_sum));
      }
    }
    // after this step's rows are read: a step's rows share the same few L1 sets (common.h), so fetched before, they
    // evict what the tile is about to read
    #pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      prefetch_previous_step(args.grad + r * args.grad_row, args.t, args.grad_step, args.grad_row, Vectors * kLanes);
    }
    *args.dot_phi += static_cast<double>(_mm512_reduce_add_ps(sum_phi));
    *args.dot_y += static_cast<double>(args.s) * static_cast<double>(_mm512_reduce_add_ps(sum_y));
  }
};

// The backward's relu step of step t over a block's rows in fused tiles (BackwardTile), then w = d V' for the
// next step's tiles and the factor sums (StepProduct: inner size H); after step 0, finish() adds s eta w_0 H to
// the carry (no step before it takes it in a tile). first = V' (H, R), second = H (R, H), contiguous.
class ReluBackward {
 public:
  ReluBackward(const float* first, const float* second, int64_t hidden, int64_t rank, float s_eta)
      : w_(rank, {first, rank, 1}, hidden),
        carry_(hidden, {second, hidden, 1}, rank, {}, 0, s_eta),
        panels_(hidden, {{{second, hidden, 1}, rank, s_eta}}),
        hidden_(hidden),
        rank_(rank) {}

  // `w` holds step t + 1's w on entry (ignored at the last step) and step t's on return; grad_out's rows of unit
  // stride, grad_row apart, grad_step from step to step.
  void run(float* carry, float* d, float* w, const float* grad, int64_t grad_row, int64_t grad_step,
           const uint8_t* bits, const float* prev, BlockSums<float>& sums, int64_t rows, int64_t t, int64_t steps,
           float keep, float s_eta, float s) const {
    const int64_t rank = t + 1 < steps ? rank_ : 0;
    over_tiles(rows, hidden_, [&](int64_t row, int64_t col, int64_t tile_rows, int64_t vectors, __mmask16 last) {
      const int64_t at = row * hidden_ + col;
      const BackwardTileArgs args{panels_.chunk(col), w + row * rank_, carry + at, grad + row * grad_row + col,
                                  grad_row, grad_step, bits + row * sign_bytes(hidden_) + col / 8, prev + at, d + at,
                                  sums.bias.data() + col, &sums.dot_phi, &sums.dot_y, rank, hidden_, t, last, keep,
                                  s_eta, s};
      run_tile<BackwardTile>(tile_rows, vectors, args);
    });
    w_.run(rows, d, hidden_, nullptr, 0, w, rank_, Start::zero);
  }

  void finish(float* carry, const float* w, int64_t rows) const {
    carry_.run(rows, w, rank_, nullptr, 0, carry, hidden_, Start::add);
  }

 private:
  StepProduct<float> w_, carry_;
  Panels panels_;
  int64_t hidden_, rank_;
};

}  // namespace fused
#endif

// The backward's products through M per step, packed once (products.h): carry += s eta d M, dense; low rank
// through w = d V' (for the gradient of H too): carry += s eta w H (the identity's part is in backward_rows).
template <typename T>
struct BackwardProducts {
  StepProduct<T> w, carry;
  BackwardProducts(const T* first, const T* second, int64_t hidden, int64_t rank, T s_eta)
      : w(rank, {first, rank, 1}, rank > 0 ? hidden : 0),
        carry(hidden, rank > 0 ? Strided<T>{second, hidden, 1} : Strided<T>{first, hidden, 1},
              rank > 0 ? rank : hidden, {}, 0, s_eta) {}

  void run(T* carry_rows, const T* d, T* w_rows, int64_t rows, int64_t hidden, int64_t rank) const {
    if (rank == 0) {
      carry.run(rows, d, hidden, nullptr, 0, carry_rows, hidden, Start::add);
      return;
    }
    w.run(rows, d, hidden, nullptr, 0, w_rows, rank, Start::zero);
    carry.run(rows, w_rows, rank, nullptr, 0, carry_rows, hidden, Start::add);
  }
};

// The step's share of the gradients of M's factors: low rank first += d^T z, second += w^T h_{t-1}; dense
// first += d^T h_{t-1} (y_0 = s h_{t-1}: the factor s is applied with eta at the end).
template <typename T>
void add_operator_factor_sums(BlockSums<T>& sums, const T* d, const T* w, const T* z, const T* prev, int64_t rows,
                              int64_t hidden, int64_t rank) {
  if (rank == 0) {
    add_at_b(hidden, hidden, rows, d, hidden, prev, hidden, sums.first.data(), hidden);
    return;
  }
  add_at_b(hidden, rank, rows, d, hidden, z, rank, sums.first.data(), rank);
  add_at_b(rank, hidden, rows, w, rank, prev, hidden, sums.second.data(), hidden);
}

// The step's share of the input map's weight gradient (weight += d^T x_t) and, when wanted, the gradient of
// x_t itself: eta d W (W the input map's (H, d) weight, contiguous).
template <typename T>
void add_input_gradients(BlockSums<T>& sums, T* grad_x, const T* d, const T* x, const T* weight, int64_t rows,
                         int64_t hidden, int64_t dim, T eta) {
  add_at_b(hidden, dim, rows, d, hidden, x, dim, sums.weight.data(), dim);
  if (grad_x) gemm(false, false, rows, dim, hidden, eta, d, hidden, weight, dim, T(0), grad_x, dim);
}

// out = factor * (sum over blocks, in block order) of one of their sums: deterministic for a thread count.
template <typename T>
void add_blocks(at::Tensor& out, const std::vector<BlockSums<T>>& parts, std::vector<T> BlockSums<T>::*member,
                double factor) {
  T* total = out.data_ptr<T>();
  std::fill_n(total, out.numel(), T(0));
  for (const auto& part : parts) {
    const std::vector<T>& values = part.*member;
    for (size_t i = 0; i < values.size(); ++i) total[i] += values[i];
  }
  const auto scale = static_cast<T>(factor);
  for (int64_t i = 0; i < out.numel(); ++i) total[i] *= scale;
}

// Writes the gradients of the parameters from the blocks' sums: of M (dense) or V' and H, s eta times the sums
// (y_0 = s h_{t-1}); of the input map, eta times. Returns the blocks' (<g, phi>, <g, y_0>) added.
template <typename T>
std::tuple<double, double> write_gradients(const std::vector<BlockSums<T>>& parts, at::Tensor& grad_first,
                                           at::Tensor& grad_second, at::Tensor& grad_weight, at::Tensor& grad_bias,
                                           double s, double eta) {
  add_blocks(grad_first, parts, &BlockSums<T>::first, s * eta);
  add_blocks(grad_second, parts, &BlockSums<T>::second, s * eta);
  add_blocks(grad_weight, parts, &BlockSums<T>::weight, eta);
  add_blocks(grad_bias, parts, &BlockSums<T>::bias, eta);
  double dot_phi = 0.0, dot_y = 0.0;
  for (const auto& part : parts) {
    dot_phi += part.dot_phi;
    dot_y += part.dot_y;
  }
  return {dot_phi, dot_y};
}

// The gradients the backward writes: of h0 (carry, (B, H)), of x ((T, B, d), or an empty tensor when it is
// not wanted), of first and second (their shapes; second empty for a dense M) and of the input map's weight
// (H, d) and bias (H).
void check_gradient_outputs(const at::Tensor& outputs, const at::Tensor& h0, const at::Tensor& x,
                            const at::Tensor& first, const at::Tensor& second, const at::Tensor& weight,
                            const at::Tensor& carry, const at::Tensor& grad_x, const at::Tensor& grad_first,
                            const at::Tensor& grad_second, const at::Tensor& grad_weight, const at::Tensor& grad_bias,
                            const char* op) {
  check_tensor(carry, outputs, h0.sizes(), op, "carry");
  if (!(grad_x.dim() == 1 && grad_x.numel() == 0)) check_tensor(grad_x, outputs, x.sizes(), op, "grad_x");
  check_tensor(grad_first, outputs, first.sizes(), op, "grad_first");
  check_tensor(grad_second, outputs, second.sizes(), op, "grad_second");
  check_tensor(grad_weight, outputs, weight.sizes(), op, "grad_weight");
  check_tensor(grad_bias, outputs, {outputs.size(2)}, op, "grad_bias");
}

// relu's <g, phi> summed over a block's rows and all steps, without phi: phi = relu(pre) and d = g phi'(pre),
// so <g, phi> = <d, pre>, and pre = b' + x_t W'^T + s h_{t-1} M^T is linear in the weights whose gradient
// sums the block holds: <d, pre> = <bias, b'> + <weight, W'> + s <first, M> (dense), and low rank, where
// pre = b' + x_t W'^T + s z V'^T + s h_{t-1}, <bias, b'> + <weight, W'> + s <first, V'> + s <d, h_{t-1}>
// (the last one summed by backward_rows into dot_phi).
template <typename T>
double relu_dot_phi(const BlockSums<T>& sums, const T* bias, const T* weight, const T* first, double s) {
  const auto frobenius = [](const std::vector<T>& a, const T* b) {
    double total = 0.0;
    for (size_t i = 0; i < a.size(); ++i) total += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    return total;
  };
  return frobenius(sums.bias, bias) + frobenius(sums.weight, weight) + s * frobenius(sums.first, first) +
         s * sums.dot_phi;
}

#if defined(__AVX512F__)
// rows x hidden values of grad_out (rows grad_strides[0] apart, entries grad_strides[1]: 0 when expanded) into `out`.
inline void copy_grad_rows(const float* grad, const int64_t* grad_strides, int64_t rows, int64_t hidden, float* out) {
  for (int64_t b = 0; b < rows; ++b, out += hidden) {
    const float* row = grad + b * grad_strides[0];
    for (int64_t j = 0; j < hidden; ++j) out[j] = row[j * grad_strides[1]];
  }
}

// irnn_k1_backward's loop in fused tiles (fused::ReluBackward): relu, low rank, float32; operands checked, first,
// second, weight and bias contiguous. Each block's sums as irnn_k1_backward's loop keeps them.
std::tuple<double, double> relu_backward_in_tiles(const at::Tensor& record, const at::Tensor& outputs,
                                                  const at::Tensor& h0, const at::Tensor& grad_outputs,
                                                  const at::Tensor& x, const at::Tensor& zs, const at::Tensor& first,
                                                  const at::Tensor& second, const at::Tensor& weight,
                                                  const at::Tensor& bias, double eta, double alpha, double s, double r,
                                                  at::Tensor& carry, at::Tensor& grad_x, at::Tensor& grad_first,
                                                  at::Tensor& grad_second, at::Tensor& grad_weight,
                                                  at::Tensor& grad_bias) {
  const int64_t steps = outputs.size(0), batch = outputs.size(1), hidden = outputs.size(2);
  const int64_t rank = first.size(1), dim = x.size(2);
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)}, grad_step = grad_outputs.stride(0);
  const int64_t chunk = rows_per_thread(batch);
  const auto keep = static_cast<float>(s * (1.0 - eta * alpha) - r);  // d h_t / d h_{t-1} outside M
  const auto s_eta = static_cast<float>(s * eta), e = static_cast<float>(eta), sv = static_cast<float>(s);
  const float *m_first = first.data_ptr<float>(), *input_weight = weight.data_ptr<float>();
  const fused::ReluBackward tiles(m_first, second.data_ptr<float>(), hidden, rank, s_eta);
  std::vector<BlockSums<float>> parts;
  for (int64_t part = 0; part < batch_blocks(batch, chunk); ++part) parts.emplace_back(0, 0, 0, 0);
  over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
    const int64_t rows = end - begin;
    // allocated by the thread that fills it: each block's sums and scratch in its own memory
    BlockSums<float> sums(first.numel(), second.numel(), hidden, dim);
    std::vector<float> d(rows * hidden), w(rows * rank);  // this step's dpre and dpre V'
    // the step's rows of grad_out when they are not of unit stride (the tiles read whole registers)
    std::vector<float> grad_rows(grad_strides[1] == 1 ? 0 : rows * hidden);
    float* own_carry = carry.data_ptr<float>() + begin * hidden;
    std::fill_n(own_carry, rows * hidden, 0.0f);
    const float* grad_base = grad_outputs.data_ptr<float>() + begin * grad_strides[0];
    const StepPointer<float> outs(outputs, begin), x_rows(x, begin), z_rows(zs, begin);
    const StepPointer<uint8_t> sign_rows(record, begin);
    const StepPointer<float> grad_x_rows = grad_x.numel() > 0 ? StepPointer<float>(grad_x, begin) : StepPointer<float>();
    const float* first_h = h0.data_ptr<float>() + begin * hidden;
    for (int64_t t = steps - 1; t >= 0 && rows > 0; --t) {
      const float* prev = t == 0 ? first_h : outs.at(t - 1);
      const float* grad_t = grad_base + t * grad_step;
      if (grad_rows.empty()) {
        tiles.run(own_carry, d.data(), w.data(), grad_t, grad_strides[0], grad_step, sign_rows.at(t), prev, sums, rows,
                  t, steps, keep, s_eta, sv);
      } else {
        copy_grad_rows(grad_t, grad_strides, rows, hidden, grad_rows.data());
        tiles.run(own_carry, d.data(), w.data(), grad_rows.data(), hidden, 0, sign_rows.at(t), prev, sums, rows, t,
                  steps, keep, s_eta, sv);
      }
      add_operator_factor_sums(sums, d.data(), w.data(), z_rows.at(t), prev, rows, hidden, rank);
      add_input_gradients(sums, grad_x_rows.at(t), d.data(), x_rows.at(t), input_weight, rows, hidden, dim, e);
    }
    if (rows > 0) tiles.finish(own_carry, w.data(), rows);
    sums.dot_phi = relu_dot_phi(sums, bias.data_ptr<float>(), input_weight, m_first, s);
    parts[part] = std::move(sums);
  });
  return write_gradients(parts, grad_first, grad_second, grad_weight, grad_bias, s, eta);
}
#endif

// Last step to first: carry becomes dL/dh0, grad_x (when not empty) dL/dx, and grad_first, grad_second,
// grad_weight, grad_bias the gradients of M's factors and of the input map (each block sums its rows' share
// step by step; the blocks' sums are added in block order). dpre is never stored: each step's lives in a
// block's scratch rows. Returns (sum_t <g_t, phi_t>, sum_t <g_t, y_0,t>), the parts of the gradients of eta
// and alpha. `record` is the forward's (check_record); `bias` the input map's, read for relu's <g, phi>.
std::tuple<double, double> irnn_k1_backward(const at::Tensor& record, const at::Tensor& outputs, const at::Tensor& h0,
                                            const at::Tensor& grad_outputs, const at::Tensor& x, const at::Tensor& zs,
                                            const at::Tensor& first, const at::Tensor& second,
                                            const at::Tensor& weight, const at::Tensor& bias, double eta, double alpha,
                                            double s, double r, int64_t act, at::Tensor carry, at::Tensor grad_x,
                                            at::Tensor grad_first, at::Tensor grad_second, at::Tensor grad_weight,
                                            at::Tensor grad_bias) {
  constexpr const char* op = "irnn_k1_backward";
  check_sequence(outputs, "outputs", h0, act, op);
  const int64_t rank = check_operator(first, second, outputs, "outputs", op);
  const int64_t steps = outputs.size(0), batch = outputs.size(1), hidden = outputs.size(2);
  check_record(record, outputs, act, false, op);
  if (rank > 0) check_rows(zs, outputs, "outputs", rank, false, op, "zs");
  const int64_t dim = check_input(x, weight, outputs, "outputs", op);
  check_tensor(bias, outputs, {hidden}, op, "bias", false);
  TORCH_CHECK(grad_outputs.device().is_cpu() && grad_outputs.sizes() == outputs.sizes() &&
                  grad_outputs.scalar_type() == outputs.scalar_type(),
              op, ": grad_outputs must be a CPU (T, B, H) tensor of outputs' dtype, got ", grad_outputs.sizes());
  check_gradient_outputs(outputs, h0, x, first, second, weight, carry, grad_x, grad_first, grad_second, grad_weight,
                         grad_bias, op);
  const bool input_gradient = grad_x.numel() > 0;
  const int64_t grad_strides[2] = {grad_outputs.stride(1), grad_outputs.stride(2)}, grad_step = grad_outputs.stride(0);
  const int64_t chunk = rows_per_thread(batch), blocks = batch_blocks(batch, chunk);
  // a copy only if strided
  const at::Tensor first_c = first.contiguous(), second_c = second.contiguous(), weight_c = weight.contiguous();
  const at::Tensor bias_c = bias.contiguous();
#if defined(__AVX512F__)
  if (outputs.scalar_type() == at::kFloat && rank > 0 && act == 0) {
    return relu_backward_in_tiles(record, outputs, h0, grad_outputs, x, zs, first_c, second_c, weight_c, bias_c, eta,
                                  alpha, s, r, carry, grad_x, grad_first, grad_second, grad_weight, grad_bias);
  }
#endif
  double dot_phi = 0.0, dot_y = 0.0;
  AT_DISPATCH_FLOATING_TYPES(outputs.scalar_type(), op, [&] {
    const auto sv = static_cast<scalar_t>(s), e = static_cast<scalar_t>(eta);
    const auto keep = static_cast<scalar_t>(s * (1.0 - eta * alpha) - r);  // d h_t / d h_{t-1} outside M
    const auto s_eta = static_cast<scalar_t>(s * eta);
    const scalar_t *m_first = first_c.data_ptr<scalar_t>(), *m_second = second_c.data_ptr<scalar_t>();
    const scalar_t* input_weight = weight_c.data_ptr<scalar_t>();
    std::vector<BlockSums<scalar_t>> parts;
    for (int64_t part = 0; part < blocks; ++part) parts.emplace_back(0, 0, 0, 0);
    const BackwardProducts<scalar_t> products(m_first, m_second, hidden, rank, s_eta);
    with_activation(act, [&](auto kind) {
      constexpr int Act = decltype(kind)::value;
      constexpr bool Signs = Act == 0;  // relu's record: sign bits (check_record)
      with_grad_row(grad_strides[1], [&](auto layout) {
        constexpr GradRow Layout = decltype(layout)::value;
        over_batch_blocks(batch, chunk, [&](int64_t begin, int64_t end, int64_t part) {
          const int64_t rows = end - begin;
          // allocated by the thread that fills it: each block's sums and scratch in its own memory
          BlockSums<scalar_t> sums(first.numel(), second.numel(), hidden, dim);
          // this step's dpre, dpre V' and, for relu, slopes
          std::vector<scalar_t> d(rows * hidden), w(rows * rank), slopes(Signs ? rows * hidden : 0);
          scalar_t* own_carry = carry.data_ptr<scalar_t>() + begin * hidden;
          std::fill_n(own_carry, rows * hidden, scalar_t(0));
          const scalar_t* grad_base = grad_outputs.data_ptr<scalar_t>() + begin * grad_strides[0];
          const StepPointer<scalar_t> outs(outputs, begin), x_rows(x, begin);
          const StepPointer<scalar_t> phi_rows = Signs ? StepPointer<scalar_t>() : StepPointer<scalar_t>(record, begin);
          const StepPointer<uint8_t> sign_rows = Signs ? StepPointer<uint8_t>(record, begin) : StepPointer<uint8_t>();
          const StepPointer<scalar_t> z_rows = rank > 0 ? StepPointer<scalar_t>(zs, begin) : StepPointer<scalar_t>();
          const StepPointer<scalar_t> grad_x_rows =
              input_gradient ? StepPointer<scalar_t>(grad_x, begin) : StepPointer<scalar_t>();
          const scalar_t* first_h = h0.data_ptr<scalar_t>() + begin * hidden;
          for (int64_t t = steps - 1; t >= 0 && rows > 0; --t) {
            const scalar_t* prev = t == 0 ? first_h : outs.at(t - 1);
            const scalar_t* grad_t = grad_base + t * grad_step;
            const scalar_t* phi = Signs ? slopes.data() : phi_rows.at(t);
            for (int64_t b = 0; Signs && b < rows; ++b) {
              load_slopes(sign_rows.at(t) + b * sign_bytes(hidden), hidden, slopes.data() + b * hidden);
            }
            if (rank > 0) {
              backward_rows<Act, true, Signs, Layout>(d.data(), phi, prev, grad_t, grad_strides, own_carry, rows,
                                                      hidden, sv, keep, s_eta, sums, t, grad_step);
            } else {
              backward_rows<Act, false, Signs, Layout>(d.data(), phi, prev, grad_t, grad_strides, own_carry, rows,
                                                       hidden, sv, keep, s_eta, sums, t, grad_step);
            }
            products.run(own_carry, d.data(), w.data(), rows, hidden, rank);
            add_operator_factor_sums(sums, d.data(), w.data(), z_rows.at(t), prev, rows, hidden, rank);
            add_input_gradients(sums, grad_x_rows.at(t), d.data(), x_rows.at(t), input_weight, rows, hidden, dim, e);
          }
          if (Signs) sums.dot_phi = relu_dot_phi(sums, bias_c.data_ptr<scalar_t>(), input_weight, m_first, s);
          parts[part] = std::move(sums);
        });
      });
    });
    std::tie(dot_phi, dot_y) = write_gradients(parts, grad_first, grad_second, grad_weight, grad_bias, s, eta);
  });
  return {dot_phi, dot_y};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ltdrnn, m) {  // a fragment: every cell's library adds to the same namespace
  m.def("irnn_k1_forward(Tensor x, Tensor weight, Tensor bias, Tensor h0, Tensor first, Tensor second, float eta, "
        "float alpha, float s, float r, int act, Tensor(a!) record, Tensor(b!) zs, Tensor(c!) outputs) -> ()");
  m.def("irnn_k1_backward(Tensor record, Tensor outputs, Tensor h0, Tensor grad_outputs, Tensor x, Tensor zs, "
        "Tensor first, Tensor second, Tensor weight, Tensor bias, float eta, float alpha, float s, float r, int act, "
        "Tensor(a!) carry, Tensor(b!) grad_x, Tensor(c!) grad_first, Tensor(d!) grad_second, Tensor(e!) grad_weight, "
        "Tensor(f!) grad_bias) -> (float, float)");
}

TORCH_LIBRARY_IMPL(ltdrnn, CPU, m) {
  m.impl("irnn_k1_forward", &irnn_k1_forward);
  m.impl("irnn_k1_backward", &irnn_k1_backward);
}
