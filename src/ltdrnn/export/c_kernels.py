"""The C helper functions of the integer step (``c_fixed.py``) and its activation tables.

``HELPERS`` holds each function's source, by name: saturation (``sat16``, ``sat30``), the products of a
linear map (``dot_q``: int8 weights from flash times int16 values in int32; ``mul_hi``: an int32 times an
int16 row multiplier, ``round(a m / 2^16)``), and the activations from their tables (``tanh_q15``,
``sigmoid_q15``, ``exp_q15``). On AVR the products use the 8 x 8-bit multiplier; everywhere else they are
plain C, with the same exact results (``tests/test_export_devices.py`` holds the AVR forms against the
integers at the extremes of their types).
"""

from __future__ import annotations

import math
from typing import List

INT16_MAX = 32767
TABLE_STEP_BITS = 5  # tanh table step 1/32
TANH_RANGE = 6


def _table(function, points: int, step: float) -> List[int]:
    return [int(round(function(i * step))) for i in range(points)]


TANH_TABLE = _table(lambda v: math.tanh(v) * 32768, TANH_RANGE * 2**TABLE_STEP_BITS + 1, 2.0**-TABLE_STEP_BITS)
TANH_TABLE = [min(v, INT16_MAX) for v in TANH_TABLE]
POW2_TABLE = _table(lambda v: (2.0**v - 1.0) * 16384, 33, 1 / 32)  # 2^f - 1 in Q14, f in [0, 1]

HELPERS = {
    "sat": """static int16_t sat16(int32_t v) { return v > 32767 ? 32767 : v < -32768 ? -32768 : (int16_t)v; }""",
    "wide": """/* an int32 value of the state's accumulation paths, kept within +-2^30 (two of them add safely) */
static int32_t sat30(int32_t v) { return v > 1073741823L ? 1073741823L : v < -1073741823L ? -1073741823L : v; }""",
    "dot": """/* sum_c w[c] v[c]: int8 weights (flash) times int16 values, in int32. An AVR multiplies 8 x 8 bits in
   one instruction but 16 x 16 in a library call (avr-gcc makes a 16 x 16 product of an int8 one inside a
   loop): there, with the weights in program memory (LPM), each product is q (v >> 8) 2^8 + q (v & 255), a MULS
   and a MULSU added into the sum */
static int32_t dot_q(const int8_t *w, const int16_t *v, int cols)
{
    int32_t acc = 0;
#if defined(LTDRNN_FLASH_LPM) && defined(__AVR_HAVE_MUL__) && defined(__GNUC__)
    uint8_t q, sign;
    int16_t x;
    if (cols > 0)
        __asm__(
            "1: lpm %[q], Z+\\n\\t"
            "ld %A[x], X+\\n\\t"
            "ld %B[x], X+\\n\\t"
            "muls %[q], %B[x]\\n\\t"
            "sbc %[sign], %[sign]\\n\\t"
            "add %B[acc], r0\\n\\t"
            "adc %C[acc], r1\\n\\t"
            "adc %D[acc], %[sign]\\n\\t"
            "mulsu %[q], %A[x]\\n\\t"
            "sbc %[sign], %[sign]\\n\\t"
            "add %A[acc], r0\\n\\t"
            "adc %B[acc], r1\\n\\t"
            "adc %C[acc], %[sign]\\n\\t"
            "adc %D[acc], %[sign]\\n\\t"
            "subi %A[n], 1\\n\\t"
            "sbci %B[n], 0\\n\\t"
            "brne 1b\\n\\t"
            "clr __zero_reg__"
            : [acc] "+r"(acc), [sign] "=&r"(sign), [q] "=&a"(q), [x] "=&a"(x), [n] "+d"(cols), "+z"(w), "+x"(v)
            :
            : "memory");
#else
    for (int c = 0; c < cols; ++c) acc += (int32_t)(int16_t)LTDRNN_READ_I8(w + c) * v[c];
#endif
    return acc;
}

/* round(a m / 2^16) without a 64-bit product: (a >> 16) m + ((a & 0xFFFF) m + 2^15) >> 16 (two 16 x 16 -> 32
   products; on AVR the halves are taken through a union, else avr-gcc multiplies in 32 x 32 bits) */
static int32_t mul_hi(int32_t a, int16_t m)
{
#if defined(__AVR__)
    union { int32_t whole; struct { uint16_t low; int16_t high; } half; } split;
    split.whole = a;
    return (int32_t)split.half.high * m + (((int32_t)split.half.low * m + 32768) >> 16);
#else
    const int32_t high = (int32_t)(int16_t)(a >> 16) * m;
    const int32_t low = ((int32_t)(uint16_t)(a & 0xFFFF) * m + 32768) >> 16;
    return high + low;
#endif
}""",
    "tanh": """/* tanh(x) in Q15 for x in Q12: a table of tanh on [0, 6] in steps of 1/32, interpolated */
static int32_t tanh_q15(int32_t x)
{
    const int32_t ax = x < 0 ? -x : x;
    int32_t y = 32767;
    if (ax < (int32_t)TANH_END << 12) {
        const int i = (int)(ax >> 7), f = (int)(ax & 127);
        const int32_t a = LTDRNN_READ_I16(tanh_table + i), b = LTDRNN_READ_I16(tanh_table + i + 1);
        y = a + (((b - a) * f + 64) >> 7);
    }
    return x < 0 ? -y : y;
}""",
    "sigmoid": """/* sigmoid(x) = (1 + tanh(x / 2)) / 2 in Q15 (1.0 = 32768), from x / 2 in Q12 (that is, x in Q11) */
static int32_t sigmoid_q15(int32_t half) { return (tanh_q15(half) + 32769) >> 1; }""",
    "exp": """/* exp(x) in Q15 (1.0 = 32768) for x <= 0 in Q12: 2^(x log2 e), a table of 2^f - 1 on [0, 1] */
static int32_t exp_q15(int32_t x)
{
    if (x < -16L * 4096) return 0;
    const int32_t y = (x * 23638L + 8192) >> 14;             /* x log2(e), Q12 */
    const int shift = (int)(-(y >> 12));                      /* 2^y = 2^(y & 4095 / 4096) / 2^shift */
    const int i = (int)((y & 4095) >> 7), f = (int)(y & 127);
    const int32_t a = LTDRNN_READ_I16(pow2_table + i), b = LTDRNN_READ_I16(pow2_table + i + 1);
    const int32_t p = 2 * (16384 + a + (((b - a) * f + 64) >> 7));
    return shift > 16 ? 0 : (p + ((1L << shift) >> 1)) >> shift;
}""",
}
