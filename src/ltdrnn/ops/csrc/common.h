// What every kernel file of ltdrnn/ops/csrc shares: the activations, small loops, the parallel grain and
// the input checks. Each <cell>.cpp includes it and is built into its own shared object by
// ltdrnn.ops.kernels (the build and its cache are described once, in docs/architecture.md).
//
// The calling convention: every kernel is a torch custom operator torch.ops.ltdrnn.<cell>_<what> taking
// tensors and numbers, never addresses. Each operator checks device, dtype, shape and contiguity of
// every tensor it reads or writes (TORCH_CHECK, which Python sees as a RuntimeError naming the operator
// and the argument) before touching data, so a bad call fails loudly instead of reading stray memory.
// A streaming step takes its weights as one Tensor[] list and its flags as an int[] list:
//   <cell>_stream(Tensor[] weights, int[] options, Tensor x, Tensor state) -> its outputs
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/ParallelGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// Fortran BLAS's gemm as torch's BLAS exports it (MKL here; weak: null in a torch built without one).
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*) __attribute__((weak));
}

// MKL's per-thread thread count (its C interface; mkl.h maps mkl_set_num_threads_local to it), when
// torch's BLAS is MKL (a weak symbol: null otherwise).
extern "C" int MKL_Set_Num_Threads_Local(int) __attribute__((weak));

namespace ltdrnn {

// Whether v is NaN, read from its bits: -ffast-math lets the compiler assume no operand is NaN, so
// comparisons (q > 0, min, max) may drop one and v != v may fold to false; integer tests stay exact.
// The activations below use it to propagate NaN as torch's do (a relu that maps NaN to 0 hid
// diverged runs behind finite outputs).
template <typename T>
using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;
template <typename T>
constexpr Bits<T> kMagnitude = ~(Bits<T>(1) << (8 * sizeof(T) - 1));
template <typename T>
constexpr Bits<T> kInfinity = std::is_same_v<T, float> ? Bits<T>(0x7f800000) : Bits<T>(0x7ff0000000000000);

template <typename T>
inline bool is_nan(T v) {
  return (std::bit_cast<Bits<T>>(v) & kMagnitude<T>) > kInfinity<T>;
}

// Whether none of p[0..n) is NaN or infinite (from the bits, as is_nan).
template <typename T>
inline bool all_finite(const T* p, int64_t n) {
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) finite &= (std::bit_cast<Bits<T>>(p[i]) & kMagnitude<T>) < kInfinity<T>;
  return finite;
}

// Clamped where exp(-v) would overflow: under -ffast-math the vectorised 1 / (1 + inf) is NaN, not 0
// (a TARNN gate with r < -88 in float32 turned a whole UCR run into NaN). Below the clamp the value is
// 0, as torch.sigmoid gives: the clamped quotient would be a denormal (6e-39 in float32), and a gate of
// exactly 0 is what freezes a TARNN unit exactly (a select, so the loop still vectorises). NaN stays NaN.
template <typename T>
inline T sigmoid(T v) {
  constexpr T limit = std::is_same_v<T, float> ? T(88) : T(708);
  const T s = T(1) / (T(1) + std::exp(-std::min(std::max(v, -limit), limit)));
  return is_nan(v) ? v : v < -limit ? T(0) : s;
}

// relu that keeps NaN, as torch.relu does
template <typename T>
inline T relu_keeping_nan(T q) {
  return q > T(0) || is_nan(q) ? q : T(0);
}

// The activation is a template argument so that each inner loop has no branch on it and vectorises.
template <int Act, typename T>
inline T activate(T q) {
  if constexpr (Act == 0) return relu_keeping_nan(q);
  if constexpr (Act == 1) return is_nan(q) ? q : std::tanh(q);
  return sigmoid(q);
}

// d phi / d q, from phi's value
template <int Act, typename T>
inline T activation_slope(T phi) {
  if constexpr (Act == 0) return phi > T(0) ? T(1) : T(0);
  if constexpr (Act == 1) return T(1) - phi * phi;
  return phi * (T(1) - phi);
}

// Calls body(std::integral_constant<int, act>{}) for the run-time activation code (0 relu, 1 tanh,
// 2 sigmoid).
template <typename Body>
void with_activation(int64_t act, Body body) {
  if (act == 0) return body(std::integral_constant<int, 0>{});
  if (act == 1) return body(std::integral_constant<int, 1>{});
  return body(std::integral_constant<int, 2>{});
}

// out[r] += sum_c w[r, c] v[c] for r < rows (w row-major). Four rows at a time keep four sums
// independent; at batch 1 this beats a BLAS call plus its dispatch.
template <typename T>
void add_matvec(T* out, const T* w, const T* v, int64_t rows, int64_t cols) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const T *w0 = w + r * cols, *w1 = w0 + cols, *w2 = w1 + cols, *w3 = w2 + cols;
    T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const T vc = v[c];
      a0 += w0[c] * vc;
      a1 += w1[c] * vc;
      a2 += w2[c] * vc;
      a3 += w3[c] * vc;
    }
    out[r] += a0;
    out[r + 1] += a1;
    out[r + 2] += a2;
    out[r + 3] += a3;
  }
  for (; r < rows; ++r) {
    const T* row = w + r * cols;
    T acc = 0;
    for (int64_t c = 0; c < cols; ++c) acc += row[c] * v[c];
    out[r] += acc;
  }
}

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}

// ---- input checks ------------------------------------------------------------------------------------
// `op` names the operator and `name` the argument in every message.

// The tensor that fixes an operator's dtype: on the CPU, float32 or float64.
inline void check_floating(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got one on ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": ", name,
              " must be float32 or float64, got ", t.scalar_type());
}

// A CPU tensor of `like`'s dtype with exactly `shape`, contiguous unless `contiguous` is false.
inline void check_tensor(const at::Tensor& t, const at::Tensor& like, at::IntArrayRef shape, const char* op,
                         const char* name, bool contiguous = true) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == like.scalar_type(), op, ": ", name,
              " must be a CPU tensor of dtype ", like.scalar_type(), ", got ", t.scalar_type(), " on ", t.device());
  TORCH_CHECK(t.sizes() == shape && (!contiguous || t.is_contiguous()), op, ": ", name, " must be ",
              contiguous ? "a contiguous " : "a ", shape, " tensor, got ", t.sizes(),
              t.is_contiguous() ? "" : " (not contiguous)");
}

// A streaming step's input x (B, d) and state (B, *state_tail), checked before any weight is read.
// With whole_state false only x's values are checked: the caller checks the state rows it reads.
inline void check_stream_input(const at::Tensor& x, const at::Tensor& state, at::IntArrayRef state_tail,
                               const char* op, bool whole_state = true) {
  check_floating(x, op, "x");
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), op, ": x must be a contiguous (B, d) tensor, got ", x.sizes());
  std::vector<int64_t> shape{x.size(0)};
  shape.insert(shape.end(), state_tail.begin(), state_tail.end());
  check_tensor(state, x, shape, op, "state");
  // A streaming step is exact for finite input only: its sums run in another order than the reference's
  // and -ffast-math may drop a NaN. NotImplementedError tells the caller to take its general path.
  const auto finite_as = [&](auto zero) {
    using T = decltype(zero);
    return all_finite(x.data_ptr<T>(), x.numel()) && (!whole_state || all_finite(state.data_ptr<T>(), state.numel()));
  };
  const bool finite = x.scalar_type() == at::kFloat ? finite_as(0.0f) : finite_as(0.0);
  TORCH_CHECK_NOT_IMPLEMENTED(finite, op, ": x or state holds NaN or an infinity; use the general path");
}

// The number of weights a streaming step expects, before they are indexed.
inline void check_weight_count(at::TensorList weights, size_t expected, const char* op) {
  TORCH_CHECK(weights.size() == expected, op, ": expected ", expected, " weights, got ", weights.size());
}

// options[i] of a streaming step, after checking the list's length.
inline int64_t option(at::IntArrayRef options, size_t expected, size_t i, const char* op) {
  TORCH_CHECK(options.size() == expected, op, ": expected ", expected, " options, got ", options.size());
  return options[i];
}

// ---- one block of batch rows per thread ------------------------------------------------------------
// A recurrence's batch rows are independent through the whole sequence, so a time loop can split the
// batch once into one block per thread and run all T steps of a block on one thread with single-threaded
// BLAS: no thread hand-off per step (a per-step at::parallel_for would be one per product and per
// elementwise pass, each waiting for the slowest thread on a loaded machine).

// Keeps the BLAS calls of the current thread single-threaded while it lives (MKL would otherwise start
// an OpenMP team for every product, whose threads spin-wait for each other: under load that made the
// K = 5 forward many times slower at 2 threads than at 1, lab/notes/tarnn-speed.md), and
// marks the thread as inside a parallel region, so ATen's own at::parallel_for runs inline.
class SequentialBlock {
 public:
  SequentialBlock() : previous_(MKL_Set_Num_Threads_Local ? MKL_Set_Num_Threads_Local(1) : 0), guard_(true) {}
  ~SequentialBlock() {
    if (MKL_Set_Num_Threads_Local) MKL_Set_Num_Threads_Local(previous_);
  }
  SequentialBlock(const SequentialBlock&) = delete;
  SequentialBlock& operator=(const SequentialBlock&) = delete;

 private:
  int previous_;
  c10::ParallelGuard guard_;
};

// Rows per thread block: one block per thread (torch's intra-op thread count).
inline int64_t rows_per_thread(int64_t batch) {
  const int64_t threads = std::max<int64_t>(1, at::in_parallel_region() ? 1 : at::get_num_threads());
  return std::max<int64_t>(1, (batch + threads - 1) / threads);
}

// The number of blocks of `chunk` rows that over_batch_blocks runs: one, empty, at B = 0.
inline int64_t batch_blocks(int64_t batch, int64_t chunk) {
  return std::max<int64_t>(1, (batch + chunk - 1) / chunk);
}

// Runs body(begin, end, part) for the blocks [part * chunk, (part + 1) * chunk) of the batch, one block per
// thread, joined before returning (errors rethrown). Not at::parallel_for, which splits a range for each call:
// here the split is the batch's, fixed for all T steps. Where torch runs its threads on libgomp, these files
// are built with -fopenmp against that same libgomp.so.1 (kernels.py) and the blocks run on torch's own team:
// after each ATen operator the team's idle threads spin-wait for more work, and on a 2-core machine they took
// one of the two cores from a thread of ours (SRNN's forward at 2 threads 7.3 ms with our own thread, 4.0 ms
// with the spinning turned off; lab/notes/benchmarks.md, 2026-11-28). With another OpenMP runtime in torch,
// where a second one of ours would compete the same way, each block but the first gets a thread of its own.
template <typename Body>
void over_batch_blocks(int64_t batch, int64_t chunk, const Body& body) {
  const int64_t blocks = batch_blocks(batch, chunk);
  std::vector<std::exception_ptr> errors(blocks);
  auto run = [&](int64_t part) {
    try {
      SequentialBlock sequential;
      body(part * chunk, std::min(batch, (part + 1) * chunk), part);
    } catch (...) {
      errors[part] = std::current_exception();
    }
  };
  if (blocks == 1) {
    run(0);
  } else {
#if defined(_OPENMP)
    // a team smaller than asked for runs several blocks per thread, in turn
#pragma omp parallel num_threads(static_cast<int>(blocks))
    for (int64_t part = omp_get_thread_num(); part < blocks; part += omp_get_num_threads()) run(part);
#else
    std::vector<std::thread> workers;
    for (int64_t part = 1; part < blocks; ++part) workers.emplace_back(run, part);
    run(0);
    for (auto& worker : workers) worker.join();
#endif
  }
  for (auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

// Bits [v > 0] of a row of n values, bit i % 8 of byte i / 8 (ceil(n / 8) bytes): what relu's derivative needs
// instead of the values (SRNN's and iRNN's backward passes). [v > 0] is false for NaN.
inline int64_t sign_bytes(int64_t n) { return (n + 7) / 8; }

// v > 0 from its bits, false for NaN (under -ffast-math the comparison may not be): (0, +inf] are the bit
// patterns 1 .. kInfinity.
template <typename T>
inline bool is_positive(T v) {
  return std::bit_cast<Bits<T>>(v) - 1 < kInfinity<T>;
}

// Writes the bits [v[i] > 0] of one row of `hidden` values into `bits`.
template <typename T>
inline void pack_positive(uint8_t* bits, const T* v, int64_t hidden) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 16 <= hidden; i += 16) {
      const uint16_t m = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + i), _mm512_setzero_ps(), _CMP_GT_OQ);
      std::memcpy(bits + i / 8, &m, sizeof(m));
    }
  } else {
    for (; i + 8 <= hidden; i += 8)
      bits[i / 8] = _mm512_cmp_pd_mask(_mm512_loadu_pd(v + i), _mm512_setzero_pd(), _CMP_GT_OQ);
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= hidden; i += 8)
      bits[i / 8] = uint8_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + i), _mm256_setzero_ps(), _CMP_GT_OQ)));
  } else {
    for (; i + 8 <= hidden; i += 8) {
      const __m256d zero = _mm256_setzero_pd();
      const int low = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(v + i), zero, _CMP_GT_OQ));
      const int high = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(v + i + 4), zero, _CMP_GT_OQ));
      bits[i / 8] = uint8_t(low | high << 4);
    }
  }
#endif
  for (; i < hidden; i += 8) {
    uint8_t byte = 0;
    for (int64_t k = 0; k < 8 && i + k < hidden; ++k) byte |= uint8_t(is_positive(v[i + k])) << k;
    bits[i / 8] = byte;
  }
}

// A batch-first layer's incoming gradient is read in place: the rows of one step lie T H elements apart
// (at the pixel-MNIST shape 784 * 512 bytes = 98 pages), B streams read backwards in time, more than the
// hardware prefetcher follows, so without help each row's first read waits for memory (16 % of an iRNN
// training step stalled on that one load). Two ways to fetch it early, measured per loop:
//   prefetch_previous_step  the same row one step back in time, fetched while this step's row is worked:
//                           iRNN's backward 9 % faster per training step; the lines wait in L2, since every
//                           row of a step maps to the same 8 sets of the L1 cache;
//   prefetch_row            a row kPrefetchRowsAhead rows on in the same step: SRNN's piece loop, whose row
//                           work is long enough that two rows are ~1000 cycles early and stay in L1
//                           (lab/notes/srnn-speed.md).
constexpr int64_t kPrefetchRowsAhead = 2;

// Which caches a prefetch fills (__builtin_prefetch's locality): every level (prefetcht0), or L2 and beyond
// only (prefetcht1), for lines needed a whole step later that would evict the step's own rows from L1.
enum class Into : int { l1 = 3, l2 = 2 };

// Fetches n values from `row` on into the cache.
template <Into level = Into::l1, typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t byte = 0; byte < n * int64_t(sizeof(T)); byte += 64) {
    __builtin_prefetch(bytes + byte, 0, static_cast<int>(level));
  }
}

// Fetches the row of step t - 1 (time_stride elements before `row`, n values) when the rows of a step lie
// apart (batch_stride > n; a contiguous step is the hardware prefetcher's own case) and t > 0.
template <Into level = Into::l1, typename T>
inline void prefetch_previous_step(const T* row, int64_t t, int64_t time_stride, int64_t batch_stride, int64_t n) {
  if (t > 0 && batch_stride > n) prefetch_row<level>(row - time_stride, n);
}

}  // namespace ltdrnn

// ---- products on raw pointers -----------------------------------------------------------------------
// A time loop's per-step products go straight to torch's Fortran BLAS: no tensor, no view and no operator
// call per step (through ATen, a select, a narrow and an addmm_ cost a few microseconds each, which at
// batch 1 is most of a step). Without a Fortran BLAS in torch, ATen's product on views of the same memory.

inline bool fortran_gemm(char ta, char tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                         int ldb, float beta, float* c, int ldc) {
  if (!sgemm_) return false;
  sgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
  return true;
}

inline bool fortran_gemm(char ta, char tb, int m, int n, int k, double alpha, const double* a, int lda,
                         const double* b, int ldb, double beta, double* c, int ldc) {
  if (!dgemm_) return false;
  dgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
  return true;
}

// A row-major (rows x cols) matrix with row stride `ld` over existing memory.
template <typename T>
at::Tensor matrix_view(const T* data, int64_t rows, int64_t cols, int64_t ld) {
  return at::from_blob(const_cast<T*>(data), {rows, cols}, {ld, 1},
                       at::TensorOptions(c10::CppTypeToScalarType<T>::value));
}

// Row-major C (m x n, row stride ldc) = beta C + alpha op(A) op(B) with op(A) (m x k) and op(B) (k x n);
// a transposed operand is stored as its transpose (trans_a: A is stored (k x m)), with row stride lda /
// ldb. Column-major BLAS computes the transposed product C^T = op(B)^T op(A)^T on the same memory. C is
// not read when beta is 0.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;  // BLAS rejects the leading dimensions of empty operands
  const auto ld = [](int64_t v) { return static_cast<int>(std::max<int64_t>(1, v)); };
  if (fortran_gemm(trans_b ? 'T' : 'N', trans_a ? 'T' : 'N', static_cast<int>(n), static_cast<int>(m),
                   static_cast<int>(k), alpha, b, ld(ldb), a, ld(lda), beta, c, ld(ldc)))
    return;
  at::Tensor out = matrix_view(c, m, n, ldc);
  at::Tensor left = trans_a ? matrix_view(a, k, m, lda).t() : matrix_view(a, m, k, lda);
  at::Tensor right = trans_b ? matrix_view(b, n, k, ldb).t() : matrix_view(b, k, n, ldb);
  if (beta == T(0)) out.zero_();  // addmm_out reads C even at beta 0 (0 * NaN)
  at::addmm_out(out, out, left, right, beta, alpha);
}

#include "products.h"  // the per-step products of the time loops, on top of gemm
