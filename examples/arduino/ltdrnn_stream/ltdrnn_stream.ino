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
 * A model whose training series were z-normalised one by one (MODEL_NORMALISE_WINDOW in model.h, e.g.
 * UCR's GunPoint) needs each window whole: the sketch keeps the window's samples, z-normalises them
 * (model_normalise_window) and runs the sequence at the window's end.
 *
 *   > 0.12, -0.7            one sample
 *   < 1 "2" 3.52 -1.07      at a sequence's end: class index, class name, the logits
 *   < E -1                  the model refused the sequence (MODEL_ERR_*: -1 a NaN or infinite value); it
 *                           starts again with the next sample
 */
#include <stdlib.h>

#include "model.h"

#ifndef MODEL_VALIDATED_LENGTH
#define MODEL_VALIDATED_LENGTH 0 /* no validated length: only an empty line ends a sequence */
#endif
#if MODEL_NORMALISE_WINDOW && MODEL_VALIDATED_LENGTH == 0
#error "model.h: a model that normalises each window needs MODEL_VALIDATED_LENGTH (export it from a run)"
#endif

static const char *const class_names[] = {MODEL_CLASS_NAMES};
static MODEL_state_t state;
static MODEL_output_t out[MODEL_OUTPUT_SIZE];
static char line[16 * MODEL_INPUT_SIZE + 8];
static unsigned char used = 0;
static int steps = 0;
#if MODEL_NORMALISE_WINDOW
static float window[MODEL_VALIDATED_LENGTH][MODEL_INPUT_SIZE];
#endif

static float logit(int k)
{
#if MODEL_INTEGER
    return (float)out[k] / (float)(1L << MODEL_OUTPUT_FRAC);
#else
    return out[k];
#endif
}

/* one raw sample into the model: MODEL_OK, or the quantiser's or the step's negative status */
static int feed(const float *x)
{
#if MODEL_INTEGER
    MODEL_input_t x_q[MODEL_INPUT_SIZE];
    const int status = model_quantise(x, x_q);
    return status != MODEL_OK ? status : model_step(x_q, &state, out);
#else
    return model_step(x, &state, out);
#endif
}

static void restart(void)
{
    model_init(&state);
    steps = 0;
}

static void refuse(int status)
{
    Serial.print("E ");
    Serial.print(status);
    Serial.println();
    restart();
}

static void finish_sequence(void)
{
#if MODEL_NORMALISE_WINDOW
    if (steps > 0) {
        int status = model_normalise_window(&window[0][0], steps);
        for (int t = 0; status == MODEL_OK && t < steps; ++t) status = feed(window[t]);
        if (status != MODEL_OK) {
            refuse(status);
            return;
        }
    }
#endif
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
    restart();
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
#if MODEL_NORMALISE_WINDOW
    for (int i = 0; i < MODEL_INPUT_SIZE; ++i) window[steps][i] = x[i];
#else
    const int status = feed(x);
    if (status != MODEL_OK) {
        refuse(status);
        return;
    }
#endif
    if (++steps == MODEL_VALIDATED_LENGTH) finish_sequence();
}

void setup()
{
    Serial.begin(115200);
    restart();
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
