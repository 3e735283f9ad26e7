/* SRNN's sequential part, h_t = act(roll(h_{t-1}, 1) + beta_t), fused with the gate of beta.
 *
 * Built on first use by ltdrnn.kernels.load_kernel (plain C, called through ctypes, so no torch headers
 * are compiled). Arrays are contiguous and (T, B, H) arrays time-major, except dh in the backward
 * pass, which is read with the given time and batch strides (its last axis contiguous), so that the
 * transposed gradient of a batch-first output needs no copy.
 *
 *   beta_t = (f_t + bf) * sigmoid(g_t + bg)   when g != NULL (the gate), else beta_t = f_t + bf
 *   roll(h, 1)[i] = h[i - 1 mod H]             (element i receives element i - 1)
 *   act = relu (relu != 0) or tanh
 *
 * f and g come without their biases (bf, bg: (H,)): adding a bias in a matrix product first copies
 * it into every row of the (T, B, H) result, a full extra pass over memory; here it is free. For a
 * small input size d the caller passes no g buffer at all but x (T, B, d) and W_g (H, d): the gate's
 * logits are then formed here (forward and backward), and the backward pass returns dL/dW_g and
 * dL/dx instead of writing dg, which spares two (T, B, H) arrays and a matrix product each way.
 *
 * The backward pass walks time in reverse: with gz_t = dL/dz_t (z_t the pre-activation),
 *   dL/dh_t[i] = dh[t][i] + gz_{t+1}[i + 1 mod H]   and   gz_t = dL/dh_t * act'(z_t),
 * where act' is read from the output: relu' = (h > 0), tanh' = 1 - h^2. It also sums the gradients
 * of the biases (dbf, dbg, accumulated in double) while the rows are in cache.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFINE_SRNN(REAL, SUFFIX, EXP, TANH)                                                      \
static inline REAL sigmoid_##SUFFIX(REAL v) { return (REAL)1 / ((REAL)1 + EXP(-v)); }           \
                                                                                                  \
/* The gate's logits of one row into out (H): g_row + bg, or, without a g buffer, bg + W_g x_row. */ \
static inline void gate_logits_##SUFFIX(REAL *out, const REAL *g_row, const REAL *bg,            \
                                        const REAL *w_g, const REAL *x_row, long d, long H)       \
{                                                                                                 \
    if (g_row) {                                                                                  \
        for (long i = 0; i < H; ++i) out[i] = g_row[i] + bg[i];                                   \
        return;                                                                                   \
    }                                                                                             \
    for (long i = 0; i < H; ++i) out[i] = bg[i];                                                  \
    for (long c = 0; c < d; ++c) {                                                                \
        const REAL v = x_row[c];                                                                  \
        for (long i = 0; i < H; ++i) out[i] += w_g[i * d + c] * v;                                \
    }                                                                                             \
}                                                                                                 \
                                                                                                  \
int srnn_forward_##SUFFIX(const REAL *f, const REAL *bf, const REAL *g, const REAL *bg,            \
                           const REAL *x, const REAL *w_g, long d,                                \
                           const REAL *h0, REAL *h, long T, long B, long H, int relu)             \
{                                                                                                 \
    const int gated = g || w_g;                                                                   \
    REAL *logits = malloc(sizeof(REAL) * H);                                                      \
    if (!logits) return 1;                                                                        \
    for (long t = 0; t < T; ++t) {                                                                \
        const REAL *prev_t = t ? h + (t - 1) * B * H : h0;                                        \
        for (long b = 0; b < B; ++b) {                                                            \
            const long row = (t * B + b) * H;                                                     \
            const REAL *prev = prev_t + b * H, *fr = f + row;                                     \
            REAL *out = h + row;                                                                  \
            if (gated) {                                                                          \
                gate_logits_##SUFFIX(logits, g ? g + row : NULL, bg, w_g, x + (t * B + b) * d, d, H); \
                for (long i = 0; i < H; ++i)                                                      \
                    out[i] = (fr[i] + bf[i]) * sigmoid_##SUFFIX(logits[i]);                       \
            } else {                                                                              \
                for (long i = 0; i < H; ++i) out[i] = fr[i] + bf[i];                              \
            }                                                                                     \
            out[0] += prev[H - 1];                                                                \
            for (long i = 1; i < H; ++i) out[i] += prev[i - 1];                                   \
            if (relu) {                                                                           \
                for (long i = 0; i < H; ++i) out[i] = out[i] > 0 ? out[i] : 0;                    \
            } else {                                                                              \
                for (long i = 0; i < H; ++i) out[i] = TANH(out[i]);                               \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    free(logits);                                                                                 \
    return 0;                                                                                     \
}                                                                                                 \
                                                                                                  \
/* Writes df (= dL/dbeta without gate), dh0 and the bias gradients dbf, dbg; with a g buffer also   \
 * dg, without one (gate computed from x here) the gradients d_wg (H, d) and, if dx != NULL, dx     \
 * (T, B, d). Returns 0, or 1 on no memory. */                                                     \
int srnn_backward_##SUFFIX(const REAL *dh, long dh_time_stride, long dh_batch_stride,            \
                           const REAL *h, const REAL *f, const REAL *bf, const REAL *g,           \
                           const REAL *bg, const REAL *x, const REAL *w_g, long d,                \
                           REAL *df, REAL *dg, REAL *dh0, REAL *dbf, REAL *dbg, REAL *d_wg,       \
                           REAL *dx, long T, long B, long H, int relu)                            \
{                                                                                                 \
    const int gated = g || w_g, inline_gate = !g && w_g;                                          \
    const long wide = inline_gate ? H * d : 0;                                                    \
    REAL *block = calloc((size_t)(3 * B * H), sizeof(REAL));                                      \
    double *sum_f = calloc((size_t)(2 * H + wide), sizeof(double));                               \
    if (!block || !sum_f) { free(block); free(sum_f); return 1; }                                 \
    REAL *next = block, *cur = block + B * H, *work = block + 2 * B * H;                          \
    double *sum_g = sum_f + H, *sum_w = sum_g + H;                                                \
    for (long t = T - 1; t >= 0; --t) {                                                           \
        for (long b = 0; b < B; ++b) {                                                            \
            const long row = (t * B + b) * H;                                                     \
            const REAL *d_h = dh + t * dh_time_stride + b * dh_batch_stride, *out = h + row;      \
            const REAL *nx = next + b * H, *x_row = x ? x + (t * B + b) * d : NULL;               \
            REAL *gz = cur + b * H;                                                               \
            for (long i = 0; i < H - 1; ++i) gz[i] = d_h[i] + nx[i + 1];                          \
            gz[H - 1] = d_h[H - 1] + nx[0];                                                       \
            if (relu) {                                                                           \
                for (long i = 0; i < H; ++i) gz[i] = out[i] > 0 ? gz[i] : 0;                      \
            } else {                                                                              \
                for (long i = 0; i < H; ++i) gz[i] *= (REAL)1 - out[i] * out[i];                  \
            }                                                                                     \
            REAL *dfr = df + row;                                                                 \
            if (!gated) {                                                                         \
                for (long i = 0; i < H; ++i) { dfr[i] = gz[i]; sum_f[i] += gz[i]; }               \
                continue;                                                                         \
            }                                                                                     \
            const REAL *fr = f + row;                                                             \
            REAL *dgr = inline_gate ? work : dg + row;                                            \
            gate_logits_##SUFFIX(dgr, g ? g + row : NULL, bg, w_g, x_row, d, H);                  \
            for (long i = 0; i < H; ++i) {                                                        \
                const REAL s = sigmoid_##SUFFIX(dgr[i]);                                          \
                dfr[i] = gz[i] * s;                                                               \
                dgr[i] = gz[i] * (fr[i] + bf[i]) * s * ((REAL)1 - s);                             \
                sum_f[i] += dfr[i];                                                               \
                sum_g[i] += dgr[i];                                                               \
            }                                                                                     \
            if (!inline_gate) continue;                                                           \
            for (long c = 0; c < d; ++c) {                                                        \
                const REAL v = x_row[c];                                                          \
                double *sw = sum_w + c * H;      /* column c of d_wg, transposed */               \
                REAL acc = 0;                                                                     \
                for (long i = 0; i < H; ++i) { sw[i] += dgr[i] * v; acc += dgr[i] * w_g[i * d + c]; } \
                if (dx) dx[(t * B + b) * d + c] = acc;                                            \
            }                                                                                     \
        }                                                                                         \
        REAL *swap = next; next = cur; cur = swap;                                                \
    }                                                                                             \
    for (long b = 0; b < B; ++b) {                                                                \
        const REAL *nx = next + b * H;                                                            \
        for (long i = 0; i < H - 1; ++i) dh0[b * H + i] = nx[i + 1];                              \
        dh0[b * H + H - 1] = nx[0];                                                               \
    }                                                                                             \
    for (long i = 0; i < H; ++i) { dbf[i] = (REAL)sum_f[i]; if (gated) dbg[i] = (REAL)sum_g[i]; } \
    for (long i = 0; i < H; ++i)                                                                  \
        for (long c = 0; c < d && inline_gate; ++c) d_wg[i * d + c] = (REAL)sum_w[c * H + i];     \
    free(block); free(sum_f);                                                                     \
    return 0;                                                                                     \
}

DEFINE_SRNN(float, f32, expf, tanhf)
DEFINE_SRNN(double, f64, exp, tanh)
