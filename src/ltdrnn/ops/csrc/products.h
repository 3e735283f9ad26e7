// The per-step matrix products of the time loops (included by common.h). A recurrence multiplies the
// same weights at every step, so they are prepared once per call and reused T times:
//
//   StepProduct  C (m x n) = start + s A1 B1 + A2 B2: B1 (k1 x n) and B2 (k2 x n) are weights (s a number
//                fixed for the call), the A's a step's rows (the state, the input, a gradient); start is 0,
//                C itself or a bias row;
//   add_at_b     C (m x n) += A^T B: a weight gradient summed over a step's k rows.
//
// float32 on an AVX-512 CPU: our own register-tiled kernels. StepProduct packs the weights once per call
// into panels of 32 columns, each read as two registers per row of the panel, so every step streams its
// weights from cache in the order the tile consumes them and nothing is copied per step (a BLAS call packs
// its operands again at every call: 5-7 % of a TARNN training step went to that packing). Each tile keeps
// an 8 x 32 block of C in 16 registers over the whole sum. On this 2-core AVX-512 VM (Zen 4), one thread:
// the tiles ran the steps' (64 x 128) x (128 x 384) products at 113-117 GFLOP/s, MKL's sgemm at 93-101.
// Anything else (float64, other CPUs, tiny n): the BLAS product of common.h (gemm).
#pragma once

#include <array>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ltdrnn {

// One operand of a product on raw memory: entry (i, j) of a matrix is data[i * row + j * col].
template <typename T>
struct Strided {
  const T* data = nullptr;
  int64_t row = 0, col = 1;
};

// Where a product's accumulation starts: 0, the current C, or a bias row (n) added to every row.
enum class Start { zero, add, bias };

#if defined(__AVX512F__)
namespace avx512 {

constexpr int64_t kLanes = 16;  // floats per register
constexpr int64_t kPanel = 32;  // columns per packed panel: two registers
constexpr int kRows = 8;        // rows of C per tile

inline __mmask16 lanes(int64_t count) {
  return count >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << count) - 1u);
}

// The sum of one tile: `k` terms a[r * a_row + kk * a_step] b[kk * b_step + lane].
struct Sum {
  const float* a;
  int64_t a_row, a_step;
  const float* b;
  int64_t b_step, k;
};

// acc += the sum's k terms, one row of B (Vectors whole registers: B's rows are readable that far) per term.
// No masked load in here: with one, gcc kept the accumulators in memory (a store per FMA pair).
template <int Rows, int Vectors>
__attribute__((always_inline)) inline void accumulate(__m512 (&acc)[Rows][Vectors], const Sum& sum) {
  const float* a = sum.a;
  const float* b = sum.b;
  const int64_t a_row = sum.a_row, a_step = sum.a_step, b_step = sum.b_step, k = sum.k;
  for (int64_t kk = 0; kk < k; ++kk, a += a_step, b += b_step) {
    __m512 bv[Vectors];
    for (int v = 0; v < Vectors; ++v) bv[v] = _mm512_loadu_ps(b + v * kLanes);
    for (int r = 0; r < Rows; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * a_row]);
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
}

// C (Rows x Vectors registers of columns, row stride ldc) = start + the `count` sums (1 or 2). `last` masks
// the columns of C's last register (its loads and stores never pass the end of a row).
template <int Rows, int Vectors>
void tile(const Sum* sums, int count, Start start, const float* bias, float* c, int64_t ldc, __mmask16 last) {
  __m512 acc[Rows][Vectors];
  for (int r = 0; r < Rows; ++r) {
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  accumulate<Rows, Vectors>(acc, sums[0]);
  if (count > 1) accumulate<Rows, Vectors>(acc, sums[1]);
  for (int r = 0; r < Rows; ++r) {
    for (int v = 0; v < Vectors; ++v) {
      float* out = c + r * ldc + v * kLanes;
      const float* from = start == Start::add ? out : bias + v * kLanes;
      if (v + 1 < Vectors || last == 0xFFFF) {  // masked stores are slow on Zen 4: only where needed
        const __m512 base = start == Start::zero ? _mm512_setzero_ps() : _mm512_loadu_ps(from);
        _mm512_storeu_ps(out, _mm512_add_ps(base, acc[r][v]));
      } else {
        const __m512 base = start == Start::zero ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(last, from);
        _mm512_mask_storeu_ps(out, last, _mm512_add_ps(base, acc[r][v]));
      }
    }
  }
}

using TileFunction = void (*)(const Sum*, int, Start, const float*, float*, int64_t, __mmask16);

template <int Vectors, int... Rows>
constexpr std::array<TileFunction, sizeof...(Rows)> tiles_of(std::integer_sequence<int, Rows...>) {
  return {&tile<Rows + 1, Vectors>...};
}

// tile<rows, vectors> for rows 1 .. 8 and vectors 1 .. 2.
inline TileFunction tile_for(int64_t rows, int64_t vectors) {
  static constexpr auto one = tiles_of<1>(std::make_integer_sequence<int, kRows>{});
  static constexpr auto two = tiles_of<2>(std::make_integer_sequence<int, kRows>{});
  return (vectors == 1 ? one : two)[rows - 1];
}

// Columns [begin, begin + 32) of C over all m rows, tile by tile. sums[s].b points at the column block.
inline void column_block(int64_t m, int64_t columns, Sum* sums, int count, Start start, const float* bias, float* c,
                         int64_t ldc) {
  const int64_t vectors = columns > kLanes ? 2 : 1;
  const __mmask16 last = lanes(columns - (vectors - 1) * kLanes);
  Sum moved[2];
  for (int64_t r = 0; r < m; r += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, m - r);
    for (int s = 0; s < count; ++s) moved[s] = {sums[s].a + r * sums[s].a_row, sums[s].a_row, sums[s].a_step,
                                                sums[s].b, sums[s].b_step, sums[s].k};
    tile_for(rows, vectors)(moved, count, start, bias, c + r * ldc, ldc, last);
  }
}

}  // namespace avx512
#endif

// The weights B1 (k1 x n), scaled by s, and optionally B2 (k2 x n) of a step's product C = start + s A1 B1 +
// A2 B2, prepared once per call; run() is then called once per step, from any thread (it only reads them).
template <typename T>
class StepProduct {
 public:
  StepProduct(int64_t n, Strided<T> b1, int64_t k1, Strided<T> b2 = {}, int64_t k2 = 0, T s = T(1))
      : n_(n), k1_(k1), k2_(b2.data ? k2 : 0), b1_(b1), b2_(b2), s_(s) {
    TORCH_CHECK((b1.col == 1 || b1.row == 1) && (b2.col == 1 || b2.row == 1),
                "ltdrnn: a product's weights must have rows or columns of unit stride");
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      if (n_ >= avx512::kLanes) pack();
    }
#endif
  }

  // C (m x n, row stride ldc) = start + s A1 B1 + A2 B2, A1 (m x k1) and A2 (m x k2) row-major with row
  // strides lda1, lda2; bias (n) is read when start is Start::bias, C when it is Start::add.
  void run(int64_t m, const T* a1, int64_t lda1, const T* a2, int64_t lda2, T* c, int64_t ldc, Start start,
           const T* bias = nullptr) const {
    if (m == 0 || n_ == 0) return;
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<T, float>) {
      if (packed_) {
        const int64_t depth = k1_ + k2_;
        for (int64_t col = 0; col < n_; col += avx512::kPanel) {
          const float* panel = packed_.get() + col * depth;
          avx512::Sum sums[2] = {{a1, lda1, 1, panel, avx512::kPanel, k1_},
                                 {a2, lda2, 1, panel + k1_ * avx512::kPanel, avx512::kPanel, k2_}};
          avx512::column_block(m, std::min(avx512::kPanel, n_ - col), sums, k2_ > 0 ? 2 : 1, start,
                               bias ? bias + col : nullptr, c + col, ldc);
        }
        return;
      }
    }
#endif
    if (start == Start::bias) {
      for (int64_t r = 0; r < m; ++r) std::copy_n(bias, n_, c + r * ldc);
    }
    blas(m, a1, lda1, b1_, k1_, c, ldc, s_, start == Start::zero ? T(0) : T(1));
    if (k2_ > 0) blas(m, a2, lda2, b2_, k2_, c, ldc, T(1), T(1));
  }

 private:
  // C = beta C + alpha A B through common.h's gemm: B's layout as a (transposed) row-major matrix.
  void blas(int64_t m, const T* a, int64_t lda, Strided<T> b, int64_t k, T* c, int64_t ldc, T alpha, T beta) const {
    const bool transposed = b.col != 1;  // stored as its transpose (n x k), row stride b.col
    // (a single row, k = 1, has row stride 1 when it comes from a (n x 1) matrix; BLAS wants ld >= n)
    gemm(false, transposed, m, n_, k, alpha, a, lda, b.data, transposed ? b.col : std::max(b.row, n_), beta, c, ldc);
  }

#if defined(__AVX512F__)
  // Panel p (columns [32p, 32p + 32)) holds, for every row of s B1 then of B2, its 32 entries, zero past n.
  void pack() {
    const int64_t depth = k1_ + k2_, panels = (n_ + avx512::kPanel - 1) / avx512::kPanel;
    const size_t bytes = size_t(panels * depth * avx512::kPanel) * sizeof(float);  // a multiple of 64
    packed_.reset(static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
    TORCH_CHECK(packed_, "ltdrnn: out of memory packing a ", depth, " x ", n_, " weight");
    float* out = packed_.get();
    for (int64_t col = 0; col < panels * avx512::kPanel; col += avx512::kPanel) {
      for (const auto& [b, k, scale] : {std::tuple{b1_, k1_, s_}, std::tuple{b2_, k2_, 1.0f}}) {
        for (int64_t i = 0; i < k; ++i, out += avx512::kPanel) {
          for (int64_t j = 0; j < avx512::kPanel; ++j) {
            out[j] = col + j < n_ ? scale * b.data[i * b.row + (col + j) * b.col] : 0.0f;
          }
        }
      }
    }
  }

  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> packed_;
#endif
  int64_t n_, k1_, k2_;
  Strided<T> b1_, b2_;
  T s_;
};

// C (m x n, row stride ldc) += A^T B for A stored (k x m) and B (k x n), row strides lda and ldb: a weight
// gradient, summed over the k rows of a step.
template <typename T>
void add_at_b(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
              int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (n % avx512::kLanes == 0 && ldb % avx512::kLanes == 0) {  // B's rows in whole registers
      for (int64_t col = 0; col < n; col += avx512::kPanel) {
        avx512::Sum sum{a, 1, lda, b + col, ldb, k};
        avx512::column_block(m, std::min(avx512::kPanel, n - col), &sum, 1, Start::add, nullptr, c + col, ldc);
      }
      return;
    }
    if (n == 1) {  // a column: c += A^T b, one row of A at a time (vectorised over m)
      for (int64_t i = 0; i < k; ++i) {
        const float scale = b[i * ldb];
        const float* row = a + i * lda;
        for (int64_t r = 0; r < m; ++r) c[r * ldc] += scale * row[r];
      }
      return;
    }
  }
#endif
  gemm(true, false, m, n, k, T(1), a, lda, b, ldb, T(1), c, ldc);
}

}  // namespace ltdrnn
