/* A generated model on a simulated AVR (simavr, simavr_harness.c): the host streams commands and inputs
 * through GPIOR1 (each read returns the next byte), the firmware answers through GPIOR2 and marks the
 * start and end of every step in GPIOR0, where the harness reads the cycle counter.
 *
 *   'r'            NAME_init(&state)
 *   's' x          one step on x (INPUT_SIZE values as the model takes them, little endian); a status
 *                  other than NAME_OK stops the program (the harness then gets no outputs)
 *   'o'            send out (OUTPUT_SIZE values)
 *   'q'            send the stack high-water marks (whole program, step), then stop
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
#include <stdint.h>

#include "model_glue.h"

#define PAINT 0xA5

extern uint8_t __heap_start;

static uint8_t get(void) { return GPIOR1; }
static void put(uint8_t byte) { GPIOR2 = byte; }

static void read_bytes(void *to, uint16_t count)
{
    uint8_t *p = (uint8_t *)to;
    while (count--) *p++ = get();
}

static void write_bytes(const void *from, uint16_t count)
{
    const uint8_t *p = (const uint8_t *)from;
    while (count--) put(*p++);
}

static uint16_t stack_pointer(void) { return (uint16_t)SP; }

static STATE_T state;
static INPUT_T x[INPUT_SIZE];
static OUTPUT_T out[OUTPUT_SIZE];

int main(void)
{
    /* paint the free RAM between the static data and the stack; the deepest overwritten byte is the
       stack's high-water mark */
    uint8_t *p = &__heap_start;
    const uint16_t top = stack_pointer();
    while ((uint16_t)p < top - 16) *p++ = PAINT;
    for (;;) {
        const uint8_t command = get();
        if (command == 'r') {
            MODEL_INIT(&state);
        } else if (command == 's') {
            read_bytes(x, sizeof x);
            GPIOR0 = 1;
            const int status = MODEL_STEP(x, &state, out);
            GPIOR0 = 2;
            if (status != 0) break;
        } else if (command == 'o') {
            write_bytes(out, sizeof out);
        } else {
            break;
        }
    }
    uint8_t *low = &__heap_start;
    while (*low == PAINT) ++low;
    const uint16_t used = (uint16_t)(RAMEND + 1 - (uint16_t)low), step = (uint16_t)(top - (uint16_t)low);
    write_bytes(&used, 2);
    write_bytes(&step, 2);
    cli();
    sleep_cpu();
    return 0;
}
