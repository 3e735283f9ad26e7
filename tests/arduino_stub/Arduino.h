/* A stand-in for the Arduino core, for testing examples/arduino in simavr (src/ltdrnn/export/firmware/
 * simavr_harness.c): Serial reads the harness's input through GPIOR1 and prints through GPIOR2. The byte
 * 'q' (never in the sketch's input) ends the run. */
#ifndef ARDUINO_STUB_H
#define ARDUINO_STUB_H

#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
#include <stdint.h>
#include <stdlib.h>

class StubSerial
{
  public:
    void begin(long) {}
    int available()
    {
        if (next < 0) next = GPIOR1;
        if (next == 'q') {
            cli();
            sleep_cpu();
        }
        return 1;
    }
    int read()
    {
        const int c = next;
        next = -1;
        return c;
    }
    void print(const char *text)
    {
        while (*text) GPIOR2 = (uint8_t)*text++;
    }
    void print(char c) { GPIOR2 = (uint8_t)c; }
    void print(int value)
    {
        char buffer[8];
        print(itoa(value, buffer, 10));
    }
    void print(float value, int digits)
    {
        char buffer[20];
        print(dtostrf(value, 0, (unsigned char)digits, buffer));
    }
    void println() { GPIOR2 = '\n'; }

  private:
    int next = -1;
};

extern StubSerial Serial;
void setup();
void loop();

#endif
