/* A generated model on a Cortex-M4 in QEMU (mps2-an386): the inputs are compiled in (probe_data.h,
 * written by the host), the outputs after each sequence's last step and the counts go out through
 * semihosting as text. Timing: SysTick on the core clock; under `qemu -icount shift=0` every instruction
 * advances the virtual clock by 1 ns, so ticks * 1e9 / SYSCLK counts the step's instructions.
 *
 * Output: one line "out <hex bytes>" per sequence, then "ticks <total> steps <n> stack <bytes> step_stack <bytes>";
 * a step's status other than NAME_OK stops the run.
 */
#include <stdint.h>

#include "model_glue.h"
#include "probe_data.h"

#define PAINT 0xA5A5A5A5u
#define SYST_CSR (*(volatile uint32_t *)0xE000E010)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018)
#define CPACR (*(volatile uint32_t *)0xE000ED88)

extern uint32_t _data_load, _data_start, _data_end, _bss_start, _bss_end, _stack_top;
int main(void);

static void semihost(uint32_t operation, const void *argument)
{
    register uint32_t r0 __asm__("r0") = operation;
    register const void *r1 __asm__("r1") = argument;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}

static void print(const char *text) { semihost(0x04, text); } /* SYS_WRITE0 */

static void finish(void) { semihost(0x18, (const void *)0x20026); } /* SYS_EXIT, application exit */

void reset_handler(void)
{
    uint32_t *from = &_data_load, *to = &_data_start;
    while (to < &_data_end) *to++ = *from++;
    for (to = &_bss_start; to < &_bss_end; ++to) *to = 0;
    CPACR |= 0xFu << 20; /* the FPU (CP10, CP11) */
    __asm__ volatile("dsb\n isb");
    main();
    finish();
    for (;;) {
    }
}

static void fault(void)
{
    print("fault\n");
    finish();
}

__attribute__((section(".vectors"), used)) static void (*const vectors[16])(void) = {
    (void (*)(void))&_stack_top, reset_handler, fault, fault, fault, fault, fault,
};

static char *hex(char *to, uint32_t value, int digits)
{
    static const char digit[] = "0123456789abcdef";
    for (int i = digits - 1; i >= 0; --i) *to++ = digit[(value >> (4 * i)) & 15];
    return to;
}

static char *decimal(char *to, uint32_t value)
{
    char buffer[12];
    int n = 0;
    do buffer[n++] = (char)('0' + value % 10); while (value /= 10);
    while (n) *to++ = buffer[--n];
    return to;
}

static STATE_T state;
static OUTPUT_T out[OUTPUT_SIZE];

int main(void)
{
    uint32_t *p = &_bss_end, marker;
    const uint32_t top = (uint32_t)&marker;
    while ((uint32_t)p < top - 64) *p++ = PAINT;
    SYST_RVR = 0xFFFFFF;
    SYST_CVR = 0;
    SYST_CSR = 5; /* enabled, core clock, no interrupt */
    uint32_t ticks = 0, steps = 0;
    char line[16 + 2 * sizeof out];
    for (int s = 0; s < PROBE_SEQUENCES; ++s) {
        MODEL_INIT(&state);
        for (int t = 0; t < probe_lengths[s]; ++t) {
            const uint32_t before = SYST_CVR;
            const int status = MODEL_STEP(probe_inputs + ((long)s * PROBE_STEPS + t) * INPUT_SIZE, &state, out);
            ticks += (before - SYST_CVR) & 0xFFFFFF;
            if (status != 0) {
                print("status not ok\n");
                return 1;
            }
            ++steps;
        }
        char *q = line;
        q[0] = 'o', q[1] = 'u', q[2] = 't', q[3] = ' ', q += 4;
        const uint8_t *bytes = (const uint8_t *)out;
        for (unsigned i = 0; i < sizeof out; ++i) q = hex(q, bytes[i], 2);
        *q++ = '\n', *q = 0;
        print(line);
    }
    uint32_t *low = &_bss_end;
    while (*low == PAINT) ++low;
    char summary[96], *q = summary;
    const char *parts[] = {"ticks ", " steps ", " stack ", " step_stack "};
    const uint32_t values[] = {ticks, steps, (uint32_t)&_stack_top - (uint32_t)low, top - (uint32_t)low};
    for (int i = 0; i < 4; ++i) {
        for (const char *c = parts[i]; *c; ++c) *q++ = *c;
        q = decimal(q, values[i]);
    }
    *q++ = '\n', *q = 0;
    print(summary);
    return 0;
}
