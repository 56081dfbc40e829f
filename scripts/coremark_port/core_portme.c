/* kbench's bare-metal CoreMark port for the board twin (copied into the build folder by scripts/coremark_twin.py).
 * Timer: the Cortex-M4's DWT cycle counter. Output: a buffer in SRAM the host reads back. Seeds: volatile words
 * set by the entry point from its arguments. */
#include <stdarg.h>
#include "coremark.h"

#define DEMCR      (*(volatile ee_u32 *)0xE000EDFCu)
#define DWT_CTRL   (*(volatile ee_u32 *)0xE0001000u)
#define DWT_CYCCNT (*(volatile ee_u32 *)0xE0001004u)
#define DEMCR_TRCENA     (1u << 24)
#define DWT_CYCCNTENA    (1u << 0)

#define KBENCH_CONSOLE_BYTES 4096

volatile ee_s32 seed1_volatile;
volatile ee_s32 seed2_volatile;
volatile ee_s32 seed3_volatile;
volatile ee_s32 seed4_volatile; /* iterations */
volatile ee_s32 seed5_volatile; /* algorithms (0: all) */
ee_u32 default_num_contexts = 1;

char   kbench_console[KBENCH_CONSOLE_BYTES];
ee_u32 kbench_console_length;
ee_u32 kbench_ticks; /* the timed loop's DWT cycles, for the host to read beside the report */

CORE_TICKS start_ticks, stop_ticks;

void start_time(void) { start_ticks = DWT_CYCCNT; }
void stop_time(void) { stop_ticks = DWT_CYCCNT; }
CORE_TICKS get_time(void) { return stop_ticks - start_ticks; } /* modulo 2^32: right across one wrap */
secs_ret time_in_secs(CORE_TICKS ticks) { return (secs_ret)ticks / (secs_ret)KBENCH_CLOCK_HZ; }

void portable_init(core_portable *p, int *argc, char *argv[])
{
    (void)argc;
    (void)argv;
    DEMCR |= DEMCR_TRCENA;       /* the DWT needs trace enabled, */
    DWT_CTRL |= DWT_CYCCNTENA;   /* then the cycle counter runs */
    p->portable_id = 1;
}

void portable_fini(core_portable *p)
{
    kbench_ticks = stop_ticks - start_ticks;
    p->portable_id = 0;
}

/* --- ee_printf: the conversions core_main.c uses (%s %c %d %u %x with 0-padding and width, l, %f) --- */

static void put_char(char c)
{
    if (kbench_console_length < KBENCH_CONSOLE_BYTES - 1)
        kbench_console[kbench_console_length++] = c;
}

static void put_padded(const char *text, int length, int width, int left, char pad)
{
    int i;
    if (!left)
        for (i = length; i < width; i++)
            put_char(pad);
    for (i = 0; i < length; i++)
        put_char(text[i]);
    if (left)
        for (i = length; i < width; i++)
            put_char(' ');
}

static void put_unsigned(ee_u32 value, unsigned base, int negative, int width, int left, char pad, int upper)
{
    const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    char buffer[12];
    int  n = 0, i;
    char text[13];
    do
    {
        buffer[n++] = digits[value % base];
        value /= base;
    } while (value != 0);
    i = 0;
    if (negative)
    {
        if (pad == '0')
        { /* the sign goes before the zeros */
            put_char('-');
            width = width > 0 ? width - 1 : 0;
        }
        else
            text[i++] = '-';
    }
    while (n > 0)
        text[i++] = buffer[--n];
    put_padded(text, i, width, left, pad);
}

static void put_fixed(double value, int precision, int width, int left)
{
    char   text[40];
    int    n = 0, i, digit;
    double scale = 1.0, fraction;
    ee_u32 whole;
    char   integral[12];
    int    m = 0;
    if (precision < 0)
        precision = 6;
    if (value < 0)
    {
        text[n++] = '-';
        value = -value;
    }
    for (i = 0; i < precision; i++)
        scale *= 10.0;
    value += 0.5 / scale; /* round half up at the last printed digit */
    whole = (ee_u32)value;
    fraction = value - (double)whole;
    do
    {
        integral[m++] = (char)('0' + whole % 10u);
        whole /= 10u;
    } while (whole != 0);
    while (m > 0)
        text[n++] = integral[--m];
    if (precision > 0)
        text[n++] = '.';
    for (i = 0; i < precision && n < (int)sizeof(text); i++)
    {
        fraction *= 10.0;
        digit = (int)fraction;
        text[n++] = (char)('0' + digit);
        fraction -= digit;
    }
    put_padded(text, n, width, left, ' ');
}

int ee_printf(const char *fmt, ...)
{
    va_list     ap;
    ee_u32      before = kbench_console_length;
    const char *s;
    va_start(ap, fmt);
    for (; *fmt; fmt++)
    {
        int  left = 0, width = 0, precision = -1, length = 0;
        char pad = ' ';
        if (*fmt != '%')
        {
            put_char(*fmt);
            continue;
        }
        fmt++;
        for (;; fmt++)
        {
            if (*fmt == '-')
                left = 1;
            else if (*fmt == '0')
                pad = '0';
            else
                break;
        }
        while (*fmt >= '0' && *fmt <= '9')
            width = width * 10 + (*fmt++ - '0');
        if (*fmt == '.')
        {
            precision = 0;
            for (fmt++; *fmt >= '0' && *fmt <= '9'; fmt++)
                precision = precision * 10 + (*fmt - '0');
        }
        while (*fmt == 'l')
        {
            length++;
            fmt++;
        }
        (void)length; /* long and int are both 32 bits here */
        switch (*fmt)
        {
            case 'd':
            case 'i':
            {
                ee_s32 value = va_arg(ap, ee_s32);
                put_unsigned(value < 0 ? 0u - (ee_u32)value : (ee_u32)value, 10, value < 0, width, left, pad, 0);
                break;
            }
            case 'u':
                put_unsigned(va_arg(ap, ee_u32), 10, 0, width, left, pad, 0);
                break;
            case 'x':
            case 'X':
                put_unsigned(va_arg(ap, ee_u32), 16, 0, width, left, pad, *fmt == 'X');
                break;
            case 'c':
                put_char((char)va_arg(ap, int));
                break;
            case 's':
                s = va_arg(ap, const char *);
                {
                    int n = 0;
                    while (s[n] && (precision < 0 || n < precision))
                        n++;
                    put_padded(s, n, width, left, ' ');
                }
                break;
            case 'f':
                put_fixed(va_arg(ap, double), precision, width, left);
                break;
            case '%':
                put_char('%');
                break;
            case '\0':
                fmt--; /* a lone '%' at the end */
                break;
            default: /* unknown conversion: print it as written */
                put_char('%');
                put_char(*fmt);
                break;
        }
    }
    va_end(ap);
    return (int)(kbench_console_length - before);
}

/* --- the entry point the host calls: seeds and iterations in, the report's length out --- */

int main(void);

ee_u32 kbench_coremark(ee_s32 seed1, ee_s32 seed2, ee_s32 seed3, ee_s32 iterations)
{
    seed1_volatile = seed1;
    seed2_volatile = seed2;
    seed3_volatile = seed3;
    seed4_volatile = iterations;
    seed5_volatile = 0;
    kbench_console_length = 0;
    main();
    kbench_console[kbench_console_length] = '\0';
    return kbench_console_length;
}

const char *kbench_console_address(void) { return kbench_console; }
ee_u32 kbench_timed_ticks(void) { return kbench_ticks; }
