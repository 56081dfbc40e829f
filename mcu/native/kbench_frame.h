/*
 * kbench_frame: the board link's two per-byte steps in C (docs/protocol.md), for the frame server: the frame's
 * CRC-16/CCITT-FALSE and COBS encoding. Pure C99 like the kernel (no libc, `static const` tables only), so the same
 * file builds into q15attn.mpy, the host library the tests and the twin call, and the Cortex-M4 ELF.
 *
 * mcu/board/kbench_framing.py has the same two functions in Python; the server uses these when q15attn has them
 * (version 3 and later) and the Python ones otherwise. tests/mcu/test_frame_native.py holds them equal.
 */
#ifndef KBENCH_FRAME_H
#define KBENCH_FRAME_H

#include <stdint.h>

/* CRC-16/CCITT-FALSE (poly 0x1021, not reflected, no final XOR) of data[0:n], continuing from crc (0xFFFF to
 * start); kbench_crc16("123456789", 9, 0xFFFF) == 0x29B1. */
uint16_t kbench_crc16(const uint8_t *data, int32_t n, uint16_t crc);

/* COBS of data[0:n] written at out; returns the bytes written (at most n + 1 + n / 254). out may lie before data in
 * the same buffer (in place, forwards) when data - out >= 1 + n / 254: the output never overtakes the input. */
int32_t kbench_cobs_encode(uint8_t *out, const uint8_t *data, int32_t n);

/* The longest COBS encoding of n bytes (the code bytes included, the delimiter not). */
#define KBENCH_COBS_MAX(n) ((n) + 1 + (n) / 254)

#endif
