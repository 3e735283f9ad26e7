/* The Arduino core's main(), for the stub (Arduino.h). */
#include "Arduino.h"

StubSerial Serial;

int main()
{
    setup();
    for (;;) loop();
}
