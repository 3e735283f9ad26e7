/* simavr_harness.c (src/ltdrnn/export/firmware) with a profile: cycles spent at every program address while
 * a step runs (between the firmware's GPIOR0 marks 1 and 2), written as "pc cycles executions" lines to PROFILE_FILE.
 *
 *   cc -O2 -I/usr/include/simavr -o simavr_profile simavr_profile.c -lsimavr
 *   simavr_profile FIRMWARE.elf atmega328p 16000000 OUTPUT_FILE PROFILE_FILE < input
 */
#include <stdio.h>
#include <stdlib.h>

#include <sim_avr.h>
#include <sim_elf.h>
#include <sim_io.h>

#define GPIOR0_ADDR 0x3E
#define GPIOR1_ADDR 0x4A
#define GPIOR2_ADDR 0x4B
#define FLASH_BYTES 32768

static avr_cycle_count_t started, total;
static unsigned long steps;
static int in_step;
static FILE *output;
static unsigned long long at_pc[FLASH_BYTES], hits[FLASH_BYTES];

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
        in_step = 1;
    } else if (value == 2) {
        total += avr->cycle - started;
        in_step = 0;
        ++steps;
    }
}

int main(int argc, char **argv)
{
    if (argc != 6) return 2;
    output = fopen(argv[4], "wb");
    static elf_firmware_t firmware;
    if (elf_read_firmware(argv[1], &firmware) != 0) return 2;
    avr_t *avr = avr_make_mcu_by_name(argv[2]);
    avr_init(avr);
    avr->frequency = (uint32_t)strtoul(argv[3], NULL, 10);
    avr->log = 0;
    avr_load_firmware(avr, &firmware);
    avr_register_io_read(avr, GPIOR1_ADDR, next_byte, NULL);
    avr_register_io_write(avr, GPIOR2_ADDR, output_byte, NULL);
    avr_register_io_write(avr, GPIOR0_ADDR, mark, NULL);
    int state = cpu_Running;
    while (state != cpu_Done && state != cpu_Crashed) {
        const avr_flashaddr_t pc = avr->pc;
        const avr_cycle_count_t before = avr->cycle;
        const int counting = in_step;
        state = avr_run(avr);
        if (counting && pc < FLASH_BYTES) {
            at_pc[pc] += avr->cycle - before;
            ++hits[pc];
        }
    }
    fclose(output);
    FILE *profile = fopen(argv[5], "w");
    for (long pc = 0; pc < FLASH_BYTES; ++pc)
        if (at_pc[pc]) fprintf(profile, "%ld %llu %llu\n", pc, at_pc[pc], hits[pc]);
    fclose(profile);
    printf("\nsteps %lu cycles_total %llu\n", steps, (unsigned long long)total);
    return state == cpu_Crashed ? 1 : 0;
}
