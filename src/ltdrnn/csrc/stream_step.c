/* One whole time step per call, for streaming inference at small batch (no autograd).
 *
 * Built on first use by ltdrnn.kernels.load_kernel and called through ctypes by the cells' lean
 * `forward` (TARNN, SRNN, MIST, SA-RNN). At batch 1 a step is a few small matrix-vector products
 * (H = 128: tens of thousands of multiply-adds) plus element-wise work; done as PyTorch ops it costs
 * one dispatch (a few us) per op, here it is one call. The weights are passed once per call as an
 * array of pointers (`w`) and the sizes as an array of longs (`n`), which keeps the ctypes call short.
 * All arrays are contiguous and row-major; batch rows are independent. Work space comes from malloc
 * (returns 1 when it fails), so concurrent calls from several threads are safe.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFINE_STREAM(REAL, S, EXP, TANH)                                                          \
static inline REAL sigmoid_##S(REAL v) { return (REAL)1 / ((REAL)1 + EXP(-v)); }                 \
                                                                                                   \
/* out[r] += sum_c w[r, c] v[c] for r < rows; four rows at a time keep four sums independent */     \
static void add_matvec_##S(REAL *out, const REAL *w, const REAL *v, long rows, long cols)          \
{                                                                                                  \
    long r = 0;                                                                                    \
    for (; r + 4 <= rows; r += 4) {                                                                \
        const REAL *w0 = w + r * cols, *w1 = w0 + cols, *w2 = w1 + cols, *w3 = w2 + cols;          \
        REAL a0 = 0, a1 = 0, a2 = 0, a3 = 0;                                                       \
        for (long c = 0; c < cols; ++c) {                                                          \
            const REAL vc = v[c];                                                                  \
            a0 += w0[c] * vc; a1 += w1[c] * vc; a2 += w2[c] * vc; a3 += w3[c] * vc;                \
        }                                                                                          \
        out[r] += a0; out[r + 1] += a1; out[r + 2] += a2; out[r + 3] += a3;                        \
    }                                                                                              \
    for (; r < rows; ++r) {                                                                        \
        const REAL *row = w + r * cols;                                                            \
        REAL acc = 0;                                                                              \
        for (long c = 0; c < cols; ++c) acc += row[c] * v[c];                                      \
        out[r] += acc;                                                                             \
    }                                                                                              \
}                                                                                                  \
                                                                                                   \
static inline REAL dot_##S(const REAL *a, const REAL *b, long n)                                   \
{                                                                                                  \
    REAL acc = 0;                                                                                  \
    for (long c = 0; c < n; ++c) acc += a[c] * b[c];                                               \
    return acc;                                                                                    \
}                                                                                                  \
                                                                                                   \
static inline REAL activate_##S(REAL v, long kind)   /* 0 relu, 1 tanh, 2 sigmoid */               \
{                                                                                                  \
    return kind == 0 ? (v > 0 ? v : 0) : kind == 1 ? TANH(v) : sigmoid_##S(v);                     \
}                                                                                                  \
                                                                                                   \
/* TARNN.  w: [W_in (3H, d), b_in (3H), W_state (3H, H) = [B2 + A; W2 + U; U_s], U (H, H),         \
 *            eta (K)];  n: [d, H, K, activation, coupled A, gate inside].                         \
 * Per row: [c, q, r] = b_in + W_in x + W_state s; beta = sigmoid(r); delta_0 = 0;                 \
 * G_k = phi(q + U delta_k) + c + A delta_k; delta_{k+1} = delta_k + eta_k beta G_k (inside) or    \
 * + eta_k G_k (outside); s' = s + delta_K (inside) or s + beta delta_K (outside). */                \
int tarnn_stream_##S(void *const *w, const long *n, const REAL *x, const REAL *s, REAL *out,       \
                     REAL *beta, long B)                                                           \
{                                                                                                  \
    const REAL *w_in = w[0], *b_in = w[1], *w_state = w[2], *u = w[3], *eta = w[4];                \
    const long d = n[0], H = n[1], K = n[2], act = n[3], coupled = n[4], inside = n[5];            \
    REAL *qa = malloc(sizeof(REAL) * 6 * H);                                                       \
    if (!qa) return 1;                                                                             \
    REAL *delta = qa + 3 * H, *arg = qa + 4 * H, *g = qa + 5 * H;                                  \
    for (long b = 0; b < B; ++b) {                                                                 \
        const REAL *xb = x + b * d, *sb = s + b * H;                                               \
        REAL *ob = out + b * H, *be = beta + b * H;                                                \
        memcpy(qa, b_in, sizeof(REAL) * 3 * H);                                                    \
        add_matvec_##S(qa, w_in, xb, 3 * H, d);                                                    \
        add_matvec_##S(qa, w_state, sb, 3 * H, H);                                                 \
        const REAL *c = qa, *q = qa + H, *r = qa + 2 * H;                                          \
        for (long j = 0; j < H; ++j) { be[j] = sigmoid_##S(r[j]); delta[j] = 0; }                  \
        for (long k = 0; k < K; ++k) {                                                             \
            memcpy(arg, q, sizeof(REAL) * H);                                                      \
            if (k) add_matvec_##S(arg, u, delta, H, H);                                            \
            for (long j = 0; j < H; ++j) g[j] = activate_##S(arg[j], act) + c[j] - delta[j];       \
            if (coupled) for (long j = 0; j < H / 2; ++j) g[j] += delta[j + H / 2];                \
            const REAL e = eta[k];                                                                 \
            if (inside) for (long j = 0; j < H; ++j) delta[j] += e * be[j] * g[j];                 \
            else        for (long j = 0; j < H; ++j) delta[j] += e * g[j];                         \
        }                                                                                          \
        if (inside) for (long j = 0; j < H; ++j) ob[j] = sb[j] + delta[j];                         \
        else        for (long j = 0; j < H; ++j) ob[j] = sb[j] + be[j] * delta[j];                 \
    }                                                                                              \
    free(qa);                                                                                      \
    return 0;                                                                                      \
}                                                                                                  \
                                                                                                   \
/* SRNN.  w: [A_1, a_1, ..., A_L, a_L, W_out (H, k), b_out, W_g (H, d) | NULL, b_g | NULL];        \
 * n: [d, H, k (hyper size), L, relu].  h' = act(roll(h, 1) + f_r(x) * sigmoid(W_g x + b_g)). */    \
int srnn_stream_##S(void *const *w, const long *n, const REAL *x, const REAL *h, REAL *out, long B) \
{                                                                                                  \
    const long d = n[0], H = n[1], k = n[2], L = n[3], relu = n[4];                                \
    const long width = (d > k ? d : k);                                                            \
    REAL *work = malloc(sizeof(REAL) * (2 * width + H));                                           \
    if (!work) return 1;                                                                           \
    REAL *f = work + 2 * width;                                                                    \
    const REAL *w_out = w[2 * L], *b_out = w[2 * L + 1], *w_g = w[2 * L + 2], *b_g = w[2 * L + 3]; \
    for (long b = 0; b < B; ++b) {                                                                 \
        const REAL *xb = x + b * d, *hb = h + b * H, *feat = xb;                                   \
        long cols = d;                                                                             \
        for (long l = 0; l < L; ++l) {                                                             \
            REAL *next = work + (l % 2) * width;                                                   \
            memcpy(next, w[2 * l + 1], sizeof(REAL) * k);                                          \
            add_matvec_##S(next, w[2 * l], feat, k, cols);                                         \
            for (long i = 0; i < k; ++i) next[i] = next[i] > 0 ? next[i] : 0;                      \
            feat = next; cols = k;                                                                 \
        }                                                                                          \
        memcpy(f, b_out, sizeof(REAL) * H);                                                        \
        add_matvec_##S(f, w_out, feat, H, cols);                                                   \
        if (w_g)                                                                                   \
            for (long i = 0; i < H; ++i) f[i] *= sigmoid_##S(b_g[i] + dot_##S(w_g + i * d, xb, d)); \
        REAL *ob = out + b * H;                                                                    \
        ob[0] = f[0] + hb[H - 1];                                                                  \
        for (long i = 1; i < H; ++i) ob[i] = f[i] + hb[i - 1];                                     \
        for (long i = 0; i < H; ++i) ob[i] = relu ? (ob[i] > 0 ? ob[i] : 0) : TANH(ob[i]);         \
    }                                                                                              \
    free(work);                                                                                    \
    return 0;                                                                                      \
}                                                                                                  \
                                                                                                   \
/* MIST.  w: [W_ih (nd + 2H, d), bias (nd + 2H), W_hh (nd + H, H), W_mix (H, H)];                  \
 * n: [d, H, nd, N].  history (B, N, H) holds h_{t-N} .. h_{t-1}; writes h_t into h_out (B, H) and  \
 * the shifted history (h_{t-N+1} .. h_t) into new_history (B, N, H). */                            \
int mist_stream_##S(void *const *w, const long *n, const REAL *x, const REAL *history,             \
                    REAL *h_out, REAL *new_history, long B)                                        \
{                                                                                                  \
    const REAL *w_ih = w[0], *bias = w[1], *w_hh = w[2], *w_mix = w[3];                            \
    const long d = n[0], H = n[1], nd = n[2], N = n[3], split = nd + H;                            \
    REAL *gates = malloc(sizeof(REAL) * (split + 3 * H));                                          \
    if (!gates) return 1;                                                                          \
    REAL *pre = gates + split, *rm = pre + H, *hn = rm + H;                                        \
    for (long b = 0; b < B; ++b) {                                                                 \
        const REAL *xb = x + b * d, *hist = history + b * N * H, *prev = hist + (N - 1) * H;       \
        memcpy(gates, bias, sizeof(REAL) * split);                                                 \
        memcpy(pre, bias + split, sizeof(REAL) * H);                                               \
        add_matvec_##S(gates, w_ih, xb, split, d);                                                 \
        add_matvec_##S(pre, w_ih + split * d, xb, H, d);                                           \
        add_matvec_##S(gates, w_hh, prev, split, H);                                               \
        REAL *a = gates, *r = gates + nd, top = a[0], total = 0;                                   \
        for (long i = 1; i < nd; ++i) top = a[i] > top ? a[i] : top;                               \
        for (long i = 0; i < nd; ++i) { a[i] = EXP(a[i] - top); total += a[i]; }                   \
        for (long i = 0; i < nd; ++i) a[i] /= total;                                               \
        for (long j = 0; j < H; ++j) rm[j] = 0;                                                    \
        for (long i = 0; i < nd; ++i) {                                                            \
            const REAL *delayed = hist + (N - (1L << i)) * H, wi = a[i];                           \
            for (long j = 0; j < H; ++j) rm[j] += wi * delayed[j];                                 \
        }                                                                                          \
        for (long j = 0; j < H; ++j) rm[j] *= sigmoid_##S(r[j]);                                   \
        memcpy(hn, pre, sizeof(REAL) * H);                                                         \
        add_matvec_##S(hn, w_mix, rm, H, H);                                                       \
        for (long j = 0; j < H; ++j) hn[j] = TANH(hn[j]);                                          \
        REAL *nh = new_history + b * N * H;                                                        \
        memcpy(nh, hist + H, sizeof(REAL) * (N - 1) * H);                                          \
        memcpy(nh + (N - 1) * H, hn, sizeof(REAL) * H);                                            \
        memcpy(h_out + b * H, hn, sizeof(REAL) * H);                                               \
    }                                                                                              \
    free(gates);                                                                                   \
    return 0;                                                                                      \
}                                                                                                  \
                                                                                                   \
/* SA-RNN with a GRU.  w: [W_ih (3H, d), b_ih (3H), W_hh (3H, H), b_hh (3H),                       \
 * (alpha/2) W_i (H, d), (alpha/2) b + 1/2 (H), (alpha/2) w_u (H)];  n: [d, H].                    \
 * pre = (alpha/2)(W_i x + b + w_u h) + 1/2; u = pre > 1/2; prob = clamp(pre, 0, 1); the GRU         \
 * candidate (torch.nn.GRU equations) is computed only for updated units; skipped units keep h. */ \
int sarnn_stream_##S(void *const *w, const long *n, const REAL *x, const REAL *h, REAL *out,       \
                     REAL *prob, REAL *mask, long B)                                               \
{                                                                                                  \
    const REAL *w_ih = w[0], *b_ih = w[1], *w_hh = w[2], *b_hh = w[3];                             \
    const REAL *c_w = w[4], *c_b = w[5], *c_h = w[6];                                              \
    const long d = n[0], H = n[1];                                                                 \
    for (long b = 0; b < B; ++b) {                                                                 \
        const REAL *xb = x + b * d, *hb = h + b * H;                                               \
        REAL *ob = out + b * H, *pb = prob + b * H, *mb = mask + b * H;                            \
        for (long j = 0; j < H; ++j) {                                                             \
            const REAL pre = c_b[j] + dot_##S(c_w + j * d, xb, d) + c_h[j] * hb[j];                \
            pb[j] = pre < 0 ? 0 : pre > 1 ? 1 : pre;                                               \
            mb[j] = pre > (REAL)0.5;                                                               \
            if (!(pre > (REAL)0.5)) { ob[j] = hb[j]; continue; }                                   \
            REAL gi[3], gh[3] = {0, 0, 0};                                                         \
            const REAL *wr = w_hh + j * H, *wz = wr + H * H, *wn = wz + H * H;                     \
            for (long c = 0; c < H; ++c) {  /* three rows at once: independent sums */             \
                gh[0] += wr[c] * hb[c]; gh[1] += wz[c] * hb[c]; gh[2] += wn[c] * hb[c];            \
            }                                                                                      \
            for (long g = 0; g < 3; ++g) {                                                         \
                const long row = g * H + j;                                                        \
                gi[g] = b_ih[row] + dot_##S(w_ih + row * d, xb, d);                                \
                gh[g] += b_hh[row];                                                                \
            }                                                                                      \
            const REAL r = sigmoid_##S(gi[0] + gh[0]), z = sigmoid_##S(gi[1] + gh[1]);             \
            const REAL cand = TANH(gi[2] + r * gh[2]);                                             \
            ob[j] = cand + z * (hb[j] - cand);                                                     \
        }                                                                                          \
    }                                                                                              \
    return 0;                                                                                      \
}

DEFINE_STREAM(float, f32, expf, tanhf)
DEFINE_STREAM(double, f64, exp, tanh)
