/* Names of one generated model, from -DLTDRNN_MODEL=name -DLTDRNN_MODEL_UPPER=NAME (shared by the device firmwares). */
#ifndef LTDRNN_MODEL_GLUE_H
#define LTDRNN_MODEL_GLUE_H

#define GLUE_(a, b) a##b
#define GLUE(a, b) GLUE_(a, b)
#define STRING_(a) #a
#define STRING(a) STRING_(a)

#include STRING(LTDRNN_MODEL.h)

#define MODEL_INIT GLUE(LTDRNN_MODEL, _init)
#define MODEL_STEP GLUE(LTDRNN_MODEL, _step)
#define INPUT_T GLUE(LTDRNN_MODEL_UPPER, _input_t)
#define OUTPUT_T GLUE(LTDRNN_MODEL_UPPER, _output_t)
#define STATE_T GLUE(LTDRNN_MODEL_UPPER, _state_t)
#define INPUT_SIZE GLUE(LTDRNN_MODEL_UPPER, _INPUT_SIZE)
#define STATE_SIZE GLUE(LTDRNN_MODEL_UPPER, _STATE_SIZE)
#define OUTPUT_SIZE GLUE(LTDRNN_MODEL_UPPER, _OUTPUT_SIZE)

#endif
