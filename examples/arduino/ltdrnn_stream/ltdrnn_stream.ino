/* ltdrnn_stream: run an exported ltdrnn model on a serial stream (Arduino Uno / Nano, ATmega328P, or any
 * board with a serial port).
 *
 *   ltdrnn export RUN_DIR --format c [--int8] --name model --mcu atmega328p --out SKETCH_FOLDER
 *
 * puts model.c and model.h next to this file; the Arduino IDE (or arduino-cli) builds them with the sketch.
 * Send one sample per line, its MODEL_INPUT_SIZE values separated by spaces or commas, raw as the sensor
 * gives them (the model standardises them itself when it was trained with per-channel standardisation;
 * model.h says which). After every MODEL_VALIDATED_LENGTH samples, or at an empty line or a line "r", the
 * sketch prints the predicted class and starts a new sequence: the model was trained and validated on
 * sequences of that length from a fresh state (the contract in model.h).
 *
 *   > 0.12, -0.7            one sample
 *   < 1 "2" 3.52 -1.07      at a sequence's end: class index, class name, the logits
 */
#include <stdlib.h>

#include "model.h"

#ifndef MODEL_VALIDATED_LENGTH
#define MODEL_VALIDATED_LENGTH 0 /* no validated length: only an empty line ends a sequence */
#endif

static const char *const class_names[] = {MODEL_CLASS_NAMES};
static MODEL_state_t state[MODEL_STATE_SIZE];
static MODEL_value_t out[MODEL_OUTPUT_SIZE];
static char line[16 * MODEL_INPUT_SIZE + 8];
static unsigned char used = 0;
static long steps = 0;

static float logit(int k)
{
#if MODEL_INTEGER
    return (float)out[k] / (float)(1L << MODEL_OUTPUT_FRAC);
#else
    return out[k];
#endif
}

static void finish_sequence(void)
{
    if (steps > 0) {
        int best = 0;
        for (int k = 1; k < MODEL_OUTPUT_SIZE; ++k) best = out[k] > out[best] ? k : best;
        Serial.print(best);
        Serial.print(" \"");
        Serial.print(class_names[best]);
        Serial.print("\"");
        for (int k = 0; k < MODEL_OUTPUT_SIZE; ++k) {
            Serial.print(' ');
            Serial.print(logit(k), 4);
        }
        Serial.println();
    }
    model_init(state);
    steps = 0;
}

static void take_sample(char *text)
{
    float x[MODEL_INPUT_SIZE];
    for (int i = 0; i < MODEL_INPUT_SIZE; ++i) {
        char *end;
        x[i] = (float)strtod(text, &end);
        if (end == text) return; /* too few numbers: not a sample */
        text = end;
        while (*text == ',' || *text == ' ') ++text;
    }
#if MODEL_INTEGER
    int16_t x_q[MODEL_INPUT_SIZE];
    model_quantise(x, x_q);
    model_step(x_q, state, out);
#else
    model_step(x, state, out);
#endif
    if (++steps == MODEL_VALIDATED_LENGTH) finish_sequence();
}

void setup()
{
    Serial.begin(115200);
    model_init(state);
}

void loop()
{
    while (Serial.available() > 0) {
        const char c = (char)Serial.read();
        if (c == '\r') continue;
        if (c != '\n') {
            if (used + 1 < sizeof line) line[used++] = c;
            continue;
        }
        line[used] = 0;
        if (used == 0 || (used == 1 && line[0] == 'r')) finish_sequence();
        else take_sample(line);
        used = 0;
    }
}
