/* SRNN's sequential part, h_t = act(roll(h_{t-1}, 1) + beta_t), fused with the gate of beta.
 *
 * Built on first use by ltdrnn.scan.load_kernel (plain C, called through ctypes, so no torch headers
 * are compiled). All arrays are contiguous; (T, B, H) arrays are time-major.
 *
 *   beta_t = f_t * sigmoid(g_t)          when g != NULL (the gate), else beta_t = f_t
 *   roll(h, 1)[i] = h[i - 1 mod H]       (element i receives element i - 1)
 *   act = relu (relu != 0) or tanh
 *
 * The backward pass walks time in reverse: with gz_t = dL/dz_t (z_t the pre-activation),
 *   dL/dh_t[i] = dh[t][i] + gz_{t+1}[i + 1 mod H]   and   gz_t = dL/dh_t * act'(z_t),
 * where act' is read from the output: relu' = (h > 0), tanh' = 1 - h^2.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFINE_SRNN(REAL, SUFFIX, EXP, TANH)                                                      \
static inline REAL sigmoid_##SUFFIX(REAL v) { return (REAL)1 / ((REAL)1 + EXP(-v)); }           \
                                                                                                  \
int srnn_forward_##SUFFIX(const REAL *f, const REAL *g, const REAL *h0, REAL *h,                 \
                           long T, long B, long H, int relu)                                      \
{                                                                                                 \
    for (long t = 0; t < T; ++t) {                                                                \
        const REAL *prev_t = t ? h + (t - 1) * B * H : h0;                                        \
        for (long b = 0; b < B; ++b) {                                                            \
            const long row = (t * B + b) * H;                                                     \
            const REAL *prev = prev_t + b * H, *fr = f + row, *gr = g ? g + row : NULL;           \
            REAL *out = h + row;                                                                  \
            if (gr) {                                                                             \
                for (long i = 0; i < H; ++i) out[i] = fr[i] * sigmoid_##SUFFIX(gr[i]);            \
            } else {                                                                              \
                memcpy(out, fr, (size_t)H * sizeof(REAL));                                        \
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
    return 0;                                                                                     \
}                                                                                                 \
                                                                                                  \
/* Writes df (= dL/dbeta without gate), dg (if g != NULL) and dh0. Returns 0, or 1 on no memory. */ \
int srnn_backward_##SUFFIX(const REAL *dh, const REAL *h, const REAL *f, const REAL *g,           \
                           REAL *df, REAL *dg, REAL *dh0,                          \
                           long T, long B, long H, int relu)                                      \
{                                                                                                 \
    REAL *next = calloc((size_t)(B * H), sizeof(REAL));                                           \
    REAL *cur = calloc((size_t)(B * H), sizeof(REAL));                                            \
    if (!next || !cur) { free(next); free(cur); return 1; }                                       \
    for (long t = T - 1; t >= 0; --t) {                                                           \
        for (long b = 0; b < B; ++b) {                                                            \
            const long row = (t * B + b) * H;                                                     \
            const REAL *d = dh + row, *out = h + row, *nx = next + b * H;                         \
            REAL *gz = cur + b * H;                                                               \
            for (long i = 0; i < H - 1; ++i) gz[i] = d[i] + nx[i + 1];                            \
            gz[H - 1] = d[H - 1] + nx[0];                                                         \
            if (relu) {                                                                           \
                for (long i = 0; i < H; ++i) gz[i] = out[i] > 0 ? gz[i] : 0;                      \
            } else {                                                                              \
                for (long i = 0; i < H; ++i) gz[i] *= (REAL)1 - out[i] * out[i];                  \
            }                                                                                     \
            if (g) {                                                                              \
                const REAL *fr = f + row, *gr = g + row;                                          \
                REAL *dfr = df + row, *dgr = dg + row;                                            \
                for (long i = 0; i < H; ++i) {                                                    \
                    const REAL s = sigmoid_##SUFFIX(gr[i]);                                       \
                    dfr[i] = gz[i] * s;                                                           \
                    dgr[i] = gz[i] * fr[i] * s * ((REAL)1 - s);                                   \
                }                                                                                 \
            } else {                                                                              \
                memcpy(df + row, gz, (size_t)H * sizeof(REAL));                                   \
            }                                                                                     \
        }                                                                                         \
        REAL *swap = next; next = cur; cur = swap;                                                \
    }                                                                                             \
    for (long b = 0; b < B; ++b) {                                                                \
        const REAL *nx = next + b * H;                                                            \
        for (long i = 0; i < H - 1; ++i) dh0[b * H + i] = nx[i + 1];                              \
        dh0[b * H + H - 1] = nx[0];                                                               \
    }                                                                                             \
    free(next); free(cur);                                                                        \
    return 0;                                                                                     \
}

DEFINE_SRNN(float, f32, expf, tanhf)
DEFINE_SRNN(double, f64, exp, tanh)
