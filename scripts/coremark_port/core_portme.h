/* kbench's bare-metal CoreMark port for the board twin (copied into the build folder by scripts/coremark_twin.py). */
#ifndef CORE_PORTME_H
#define CORE_PORTME_H

#include <stddef.h>
#include <stdint.h>

/* What the target offers: no libc I/O, no time.h, no heap; floats only to print the seconds. */
#define HAS_FLOAT 1
#define HAS_TIME_H 0
#define USE_CLOCK 0
#define HAS_STDIO 0
#define HAS_PRINTF 0
#define MAIN_HAS_NOARGC 1
#define MAIN_HAS_NORETURN 0
#define SEED_METHOD SEED_VOLATILE
#define MEM_METHOD MEM_STATIC
#define MULTITHREAD 1

/* The sizes CoreMark's rules require (check_data_types verifies them at run time). */
typedef int16_t ee_s16;
typedef uint16_t ee_u16;
typedef int32_t ee_s32;
typedef uint32_t ee_u32;
typedef uint8_t ee_u8;
typedef uintptr_t ee_ptr_int;
typedef size_t ee_size_t;
typedef ee_u32 CORE_TICKS;

/* Round a pointer up to a 4-byte boundary. */
#define align_mem(x) (void *)(4 + (((ee_ptr_int)(x)-1) & ~3))

#define COMPILER_VERSION "GCC" __VERSION__
#define COMPILER_FLAGS KBENCH_COMPILER_FLAGS
#define MEM_LOCATION "code and data in SRAM (0x20000000), kbench board twin"

typedef struct CORE_PORTABLE_S
{
    ee_u8 portable_id;
} core_portable;

extern ee_u32 default_num_contexts;

void portable_init(core_portable *p, int *argc, char *argv[]);
void portable_fini(core_portable *p);
int  ee_printf(const char *fmt, ...);

#endif
