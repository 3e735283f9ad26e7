/* The element-wise part of one MIST step, forward and backward, for ltdrnn.cells.mist.
 *
 * Built on first use by ltdrnn.kernels.load_kernel and called through ctypes once per time step; the
 * two matrix products of a step stay in PyTorch (BLAS). Layouts (all contiguous):
 *   gates  (B, G), G = nd + H: on entry the logits [a | r]; the forward pass replaces them in place
 *          by softmax(a-logits) and sigmoid(r-logits), which the backward pass reads.
 *   states: h_s for s = t - N .. t - 1 and later; h_{t - 2^i} of sequence b is at
 *          states + (past + t - 2^i) * time_stride + b * batch_stride. The scan passes the
 *          time-major (N + T, B, H) buffer (time_stride B*H, batch_stride H); the streaming step
 *          passes the batch-first (B, N, H) history with past = N, t = 0 (time_stride H,
 *          batch_stride N*H).
 *   rm, d_rm (B, H): rm_t = r_t * m_t with the mix m_t = sum_i a_i h_{t-2^i}, and its gradient.
 *   scratch: H values of work space.
 *   grad   (N + T, B, H): dL/dh for every row; the backward step adds into the delayed rows.
 *   d_gates (B, G): gradient of the logits [a | r].
 */
#include <math.h>

#define DEFINE_MIST(REAL, SUFFIX, EXP)                                                            \
int mist_forward_step_##SUFFIX(REAL *gates, const REAL *states, REAL *rm, REAL *scratch,          \
                               long t, long past, long B, long H, long nd,                        \
                               long time_stride, long batch_stride)                               \
{                                                                                                 \
    const long G = nd + H;                                                                        \
    for (long b = 0; b < B; ++b) {                                                                \
        REAL *a = gates + b * G, *r = a + nd, *m = scratch, *out = rm + b * H;                    \
        REAL top = a[0], total = 0;                                                               \
        for (long i = 1; i < nd; ++i) top = a[i] > top ? a[i] : top;                              \
        for (long i = 0; i < nd; ++i) { a[i] = EXP(a[i] - top); total += a[i]; }                  \
        for (long i = 0; i < nd; ++i) a[i] /= total;                                              \
        for (long j = 0; j < H; ++j) r[j] = (REAL)1 / ((REAL)1 + EXP(-r[j]));                     \
        for (long j = 0; j < H; ++j) m[j] = 0;                                                    \
        for (long i = 0; i < nd; ++i) {                                                           \
            const REAL *h = states + (past + t - (1L << i)) * time_stride + b * batch_stride;     \
            const REAL w = a[i];                                                                  \
            for (long j = 0; j < H; ++j) m[j] += w * h[j];                                        \
        }                                                                                         \
        for (long j = 0; j < H; ++j) out[j] = r[j] * m[j];                                        \
    }                                                                                             \
    return 0;                                                                                     \
}                                                                                                 \
                                                                                                  \
/* Uses 1 - r = (dr/dlogit) / r, so only rm (not m) is needed: dL/dlogit_r = d_rm * rm * (1 - r). */ \
int mist_backward_step_##SUFFIX(const REAL *gates, const REAL *rm, const REAL *d_rm,              \
                                const REAL *states, REAL *grad, REAL *d_gates, REAL *scratch,     \
                                long t, long past, long B, long H, long nd)                       \
{                                                                                                 \
    const long G = nd + H;                                                                        \
    for (long b = 0; b < B; ++b) {                                                                \
        const REAL *a = gates + b * G, *r = a + nd, *q = rm + b * H, *d = d_rm + b * H;           \
        REAL *da = d_gates + b * G, *dr = da + nd, *dm = scratch;                                 \
        for (long j = 0; j < H; ++j) {                                                            \
            dm[j] = d[j] * r[j];                                                                  \
            dr[j] = d[j] * q[j] * ((REAL)1 - r[j]);                                               \
        }                                                                                         \
        REAL weighted = 0;                                                                        \
        for (long i = 0; i < nd; ++i) {                                                           \
            const long row = ((past + t - (1L << i)) * B + b) * H;                                \
            const REAL *h = states + row;                                                         \
            REAL *gh = grad + row, dot = 0, w = a[i];                                             \
            for (long j = 0; j < H; ++j) { dot += h[j] * dm[j]; gh[j] += w * dm[j]; }             \
            da[i] = dot;                                                                          \
            weighted += w * dot;                                                                  \
        }                                                                                         \
        for (long i = 0; i < nd; ++i) da[i] = a[i] * (da[i] - weighted);                          \
    }                                                                                             \
    return 0;                                                                                     \
}

DEFINE_MIST(float, f32, expf)
DEFINE_MIST(double, f64, exp)
