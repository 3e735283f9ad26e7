/* Run an AVR firmware (avr_main.c) in simavr: stdin feeds its GPIOR1 reads, its GPIOR2 writes go to
 * stdout, and the cycle counts between its GPIOR0 marks (1: step starts, 2: step ends) are summed.
 * Prints "steps N cycles_total C cycles_max M" on stdout at the end (simavr's own messages go to stdout
 * and stderr too, so the firmware's bytes go to a file of their own).
 *
 *   simavr_harness FIRMWARE.elf MCU FREQUENCY_HZ OUTPUT_FILE < input
 */
#include <stdio.h>
#include <stdlib.h>

#include <sim_avr.h>
#include <sim_elf.h>
#include <sim_io.h>

#define GPIOR0_ADDR 0x3E
#define GPIOR1_ADDR 0x4A
#define GPIOR2_ADDR 0x4B

static avr_cycle_count_t started, total, largest;
static unsigned long steps;
static FILE *output;

static uint8_t next_byte(avr_t *avr, avr_io_addr_t addr, void *param)
{
    (void)avr; (void)addr; (void)param;
    const int c = getchar();
    return c == EOF ? 'q' : (uint8_t)c;
}

static void output_byte(avr_t *avr, avr_io_addr_t addr, uint8_t value, void *param)
{
    (void)param;
    avr->data[addr] = value;
    fputc(value, output);
}

static void mark(avr_t *avr, avr_io_addr_t addr, uint8_t value, void *param)
{
    (void)param;
    avr->data[addr] = value;
    if (value == 1) {
        started = avr->cycle;
    } else if (value == 2) {
        const avr_cycle_count_t cycles = avr->cycle - started;
        total += cycles;
        if (cycles > largest) largest = cycles;
        ++steps;
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s FIRMWARE.elf MCU FREQUENCY_HZ OUTPUT_FILE\n", argv[0]);
        return 2;
    }
    output = fopen(argv[4], "wb");
    if (!output) {
        fprintf(stderr, "cannot write %s\n", argv[4]);
        return 2;
    }
    static elf_firmware_t firmware;
    if (elf_read_firmware(argv[1], &firmware) != 0) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    avr_t *avr = avr_make_mcu_by_name(argv[2]);
    if (!avr) {
        fprintf(stderr, "unknown MCU %s\n", argv[2]);
        return 2;
    }
    avr_init(avr);
    avr->frequency = (uint32_t)strtoul(argv[3], NULL, 10);
    avr->log = 0;
    avr_load_firmware(avr, &firmware);
    avr_register_io_read(avr, GPIOR1_ADDR, next_byte, NULL);
    avr_register_io_write(avr, GPIOR2_ADDR, output_byte, NULL);
    avr_register_io_write(avr, GPIOR0_ADDR, mark, NULL);
    int state = cpu_Running;
    while (state != cpu_Done && state != cpu_Crashed) state = avr_run(avr);
    fclose(output);
    printf("\nsteps %lu cycles_total %llu cycles_max %llu\n", steps, (unsigned long long)total,
           (unsigned long long)largest);
    return state == cpu_Crashed ? 1 : 0;
}
