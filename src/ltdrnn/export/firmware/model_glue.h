/* Names of one generated model, from -DMODEL=name -DMODEL_UPPER=NAME (shared by the device firmwares). */
#ifndef LTDRNN_MODEL_GLUE_H
#define LTDRNN_MODEL_GLUE_H

#define GLUE_(a, b) a##b
#define GLUE(a, b) GLUE_(a, b)
#define STRING_(a) #a
#define STRING(a) STRING_(a)

#include STRING(MODEL.h)

#define MODEL_INIT GLUE(MODEL, _init)
#define MODEL_STEP GLUE(MODEL, _step)
#define VALUE_T GLUE(MODEL_UPPER, _value_t)
#define INPUT_SIZE GLUE(MODEL_UPPER, _INPUT_SIZE)
#define STATE_SIZE GLUE(MODEL_UPPER, _STATE_SIZE)
#define OUTPUT_SIZE GLUE(MODEL_UPPER, _OUTPUT_SIZE)

#endif
