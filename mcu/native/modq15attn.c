/*
 * q15attn: the MicroPython binding of the Q15 attention kernel in attention_q15.c.
 *
 * One source, two ways to ship it:
 *   - a dynamic native module, q15attn.mpy (natmod.mk through py/dynruntime.mk, which defines
 *     MICROPY_ENABLE_DYNRUNTIME): mpy_init stores the functions in the module's globals on import;
 *   - a user C module baked into firmware (USER_C_MODULES with micropython.mk or micropython.cmake): a constant
 *     globals table registered with MP_REGISTER_MODULE.
 *
 * Python API:
 *   attention(q, k, vt, o, oshift, seq, dim, causal, bc, score_mult, score_shift[, row0]) -> cycles or None
 *       q, k, vt and o are array('h') or bytearray (raw little-endian int16, 2-byte aligned: the frame server keeps
 *       the tensors it receives in bytearrays); o is written. oshift is a writable bytearray or array('B') of at
 *       least one byte per row: oshift[r] gets row r's output shift g (docs/q15.md §6: the row is o · 2^(s_V-15-g)).
 *       Computes output rows row0 .. row0 + len(q) // dim - 1 (layouts in attention_q15.h). Returns the DWT cycle
 *       count of the compute on an ARMv7E-M core (Cortex-M4/M7), None on other architectures. A bad argument raises
 *       ValueError with the kernel's message, which names the value and the allowed range.
 *   stream(q, k, vt, o, oshift, state, seq, dim, causal, bc, score_mult, score_shift, row0, key0) -> cycles or None
 *       One key chunk of a streamed head (attention_q15.h, docs/q15.md §7): k holds keys key0 .. key0 + len(k) //
 *       dim - 1 and vt their dim x nkeys columns of Vᵀ; state is a bytearray of state_bytes(dim, rows), kept by the
 *       caller between chunks (8-byte aligned, as a bytearray's own storage is). The chunk that reaches the rows'
 *       last key writes o and oshift. Refusals raise ValueError with the kernel's message.
 *   state_bytes(dim, rows) -> the state's size in bytes
 *   limits() -> (SEQ_MAX, DIM_MAX, BC_MAX)
 *   version() -> Q15ATTN_VERSION (2: stream and state_bytes exist; 3: crc16 and cobs_encode; 4: contract v2, the
 *       oshift argument of attention and stream)
 *   crc16(data, crc, start, end) -> the CRC-16/CCITT-FALSE of data[start:end] continuing from crc (end -1: to the
 *       end of data); cobs_encode(out, at, data, start, end) -> the index in out after the COBS of data[start:end]
 *       written from out[at] (out may be data itself when the output cannot overtake the input). The frame server's
 *       two per-byte steps (kbench_frame.c), the same as kbench_framing.py's: a bad range raises ValueError naming
 *       the value and the allowed range. Neither allocates.
 *
 * Natmod rules hold here too: no initialised .data, no static BSS; buffers and the message live on the stack.
 */
#if MICROPY_ENABLE_DYNRUNTIME
#include "py/dynruntime.h"
#else
#include "py/runtime.h"
#endif

#include "attention_q15.h"
#include "kbench_frame.h"

#define Q15ATTN_MESSAGE_SIZE 128

/* MicroPython's buffer typecode for bytearray and memoryviews of one (BYTEARRAY_TYPECODE in py/objarray.h). */
#define Q15ATTN_BYTEARRAY_TYPECODE 1

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
#define Q15ATTN_TIMED 1
#else
#define Q15ATTN_TIMED 0
#endif

#if MICROPY_ENABLE_DYNRUNTIME && !defined(mp_type_OverflowError)
/* py/dynruntime.h names a few exception types; this one is looked up in builtins the same way. */
#define mp_type_OverflowError (*(mp_obj_type_t *)(mp_load_global(MP_QSTR_OverflowError)))
#endif

/* A literal format and its length, for raise_format. */
#define Q15ATTN_FORMAT(literal) literal, sizeof(literal) - 1

/* Raise an exception of type whose message is format % (items...) (MicroPython's str % formatting, so a value of
 * any size, a big int too, is printed as given). */
static void raise_format(const mp_obj_type_t *type, const char *format, size_t len, size_t n, mp_obj_t *items) {
    mp_obj_t message = mp_binary_op(MP_BINARY_OP_MODULO, mp_obj_new_str(format, len), mp_obj_new_tuple(n, items));
    mp_raise_type_arg(type, message);
}

/* Raise type with "name=value is out of range; allowed: low..high", the kernel's wording. */
static void raise_range(const mp_obj_type_t *type, qstr name, mp_obj_t value, mp_int_t low, mp_int_t high) {
    mp_obj_t items[4] = {MP_OBJ_NEW_QSTR(name), value, mp_obj_new_int(low), mp_obj_new_int(high)};
    raise_format(type, Q15ATTN_FORMAT("%s=%d is out of range; allowed: %d..%d"), 4, items);
}

/* An int argument as int32_t (TypeError for a non-int). A value that does not fit int32 raises OverflowError naming
 * it and the range low..high the kernel allows; one that fits goes to the kernel, which checks the range. The value is
 * read truncated and then compared with the argument: a natmod's mp_obj_get_int truncates a big int to mp_int_t
 * silently (py/nativeglue.c), so 2**64 + 17 would otherwise pass as 17. */
static int32_t int32_arg(mp_obj_t arg, qstr name, int32_t low, int32_t high) {
    const mp_int_t v = mp_obj_get_int_truncated(arg);
    if (!mp_obj_is_small_int(arg) && mp_binary_op(MP_BINARY_OP_EQUAL, mp_obj_new_int(v), arg) != mp_const_true) {
        raise_range(&mp_type_OverflowError, name, arg, low, high);
    }
#if INTPTR_MAX > INT32_MAX
    if (v > INT32_MAX || v < INT32_MIN) {
        raise_range(&mp_type_OverflowError, name, arg, low, high);
    }
#endif
    return (int32_t)v;
}

/* row0 or key0: beyond Q15ATTN_SEQ_MAX - 1 no value can be right, and the kernel's message would add a row or key
 * count to it (int32 overflow), so the binding refuses it here. */
static int32_t position_arg(mp_obj_t arg, qstr name) {
    const int32_t v = int32_arg(arg, name, 0, Q15ATTN_SEQ_MAX - 1);
    if (v > Q15ATTN_SEQ_MAX - 1) {
        raise_range(&mp_type_ValueError, name, arg, 0, Q15ATTN_SEQ_MAX - 1);
    }
    return v;
}

/* The buffer behind arg and its description for q15attn_check_buffers. TypeError, naming the argument and the type
 * given, if it has no buffer (o: no writable one, e.g. bytes). */
static void buffer_arg(mp_obj_t arg, qstr name, mp_uint_t flags, mp_buffer_info_t *info, q15attn_buffer *buffer) {
    if (!mp_get_buffer(arg, info, flags)) {
        mp_obj_t items[2] = {MP_OBJ_NEW_QSTR(name), MP_OBJ_NEW_QSTR(mp_obj_get_type(arg)->name)};
        if (flags & MP_BUFFER_WRITE) {
            raise_format(&mp_type_TypeError, Q15ATTN_FORMAT("%s is %s; allowed: a writable array('h') or bytearray"),
                         2, items);
        }
        raise_format(&mp_type_TypeError, Q15ATTN_FORMAT("%s is %s; allowed: array('h') or bytearray"), 2, items);
    }
    buffer->typecode = (int32_t)info->typecode;
    if (info->typecode == Q15ATTN_BYTEARRAY_TYPECODE) {
        /* a bytearray is raw int16 storage; the kernel reads it as int16, so it must be 2-byte aligned */
        if (((uintptr_t)info->buf & 1u) != 0) {
            mp_obj_t items[1] = {MP_OBJ_NEW_QSTR(name)};
            raise_format(&mp_type_ValueError,
                         Q15ATTN_FORMAT("%s starts at an odd address; allowed: a 2-byte boundary (a bytearray, or a "
                                        "memoryview of one at an even offset)"), 1, items);
        }
        buffer->typecode = 'h';
    }
    buffer->nbytes = info->len > INT32_MAX ? INT32_MAX : (int32_t)info->len;
}

/* The buffer behind oshift, one uint8 per output row: a bytearray (or a memoryview of one) or array('B') is 'B'
 * for the kernel; another typecode goes as it is, for the kernel to refuse naming it. TypeError, as buffer_arg's, if
 * it has no writable buffer (None, bytes); an int there is a caller of q15attn 3's attention(q, k, vt, o, seq, ...),
 * an old frame server, told so in one line. */
static void shift_arg(mp_obj_t arg, mp_buffer_info_t *info, q15attn_buffer *buffer) {
    if (!mp_get_buffer(arg, info, MP_BUFFER_WRITE)) {
        if (mp_obj_is_small_int(arg) || mp_obj_get_type(arg) == &mp_type_int) {
            mp_obj_t value[1] = {arg};
            raise_format(&mp_type_TypeError,
                         Q15ATTN_FORMAT("oshift=%d is an int: the caller predates q15attn 4 (contract v2 takes an oshift "
                                        "buffer after o); allowed: a writable bytearray or array('B'), a byte per row; "
                                        "re-deploy the board code with python -m mcu.deploy"), 1, value);
        }
        mp_obj_t items[1] = {MP_OBJ_NEW_QSTR(mp_obj_get_type(arg)->name)};
        raise_format(&mp_type_TypeError,
                     Q15ATTN_FORMAT("oshift is %s; allowed: a writable bytearray or array('B'), a byte per row"), 1,
                     items);
    }
    buffer->typecode = info->typecode == Q15ATTN_BYTEARRAY_TYPECODE ? 'B' : (int32_t)info->typecode;
    buffer->nbytes = info->len > INT32_MAX ? INT32_MAX : (int32_t)info->len;
}

/* Raise ValueError with the kernel's one-line message for status. */
static void raise_status(int status, const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[5]) {
    char message[Q15ATTN_MESSAGE_SIZE];
    int32_t len = q15attn_describe(status, p, row0, bufs, message, (int32_t)sizeof(message));
    mp_raise_type_arg(&mp_type_ValueError, mp_obj_new_str(message, (size_t)len));
}

/* The six kernel parameters from args[0..5] (seq, dim, causal, bc, score_mult, score_shift). */
static void params_arg(const mp_obj_t *args, q15attn_params *p) {
    p->seq = int32_arg(args[0], MP_QSTR_seq, 1, Q15ATTN_SEQ_MAX);
    p->dim = int32_arg(args[1], MP_QSTR_dim, 1, Q15ATTN_DIM_MAX);
    p->causal = int32_arg(args[2], MP_QSTR_causal, 0, 1);
    p->bc = int32_arg(args[3], MP_QSTR_bc, 1, Q15ATTN_BC_MAX);
    p->score_mult = int32_arg(args[4], MP_QSTR_score_mult, Q15ATTN_MULT_MIN, Q15ATTN_MULT_MAX);
    p->score_shift = int32_arg(args[5], MP_QSTR_score_shift, Q15ATTN_SHIFT_MIN, Q15ATTN_SHIFT_MAX);
}

static mp_obj_t q15attn_attention(size_t n_args, const mp_obj_t *args) {
    enum { ARG_q, ARG_k, ARG_vt, ARG_o, ARG_oshift, ARG_seq, ARG_row0 = ARG_seq + 6 };
    mp_buffer_info_t info[5];
    q15attn_buffer bufs[5];
    buffer_arg(args[ARG_q], MP_QSTR_q, MP_BUFFER_READ, &info[0], &bufs[0]);
    buffer_arg(args[ARG_k], MP_QSTR_k, MP_BUFFER_READ, &info[1], &bufs[1]);
    buffer_arg(args[ARG_vt], MP_QSTR_vt, MP_BUFFER_READ, &info[2], &bufs[2]);
    buffer_arg(args[ARG_o], MP_QSTR_o, MP_BUFFER_WRITE, &info[3], &bufs[3]);
    shift_arg(args[ARG_oshift], &info[4], &bufs[4]);

    q15attn_params p;
    params_arg(args + ARG_seq, &p);
    int32_t row0 = n_args > ARG_row0 ? position_arg(args[ARG_row0], MP_QSTR_row0) : 0;

    int32_t nrows = 0;
    int status = q15attn_check_buffers(&p, row0, bufs, &nrows);
    if (status != Q15ATTN_OK) {
        raise_status(status, &p, row0, bufs);
    }

    const int16_t *q = info[0].buf;
    const int16_t *k = info[1].buf;
    const int16_t *vt = info[2].buf;
    int16_t *o = info[3].buf;
    uint8_t *oshift = info[4].buf;
    #if Q15ATTN_TIMED
    uint32_t cycles = 0;
    status = q15attn_rows_timed(&p, row0, nrows, q, k, vt, o, oshift, &cycles);
    #else
    status = q15attn_rows(&p, row0, nrows, q, k, vt, o, oshift);
    #endif
    if (status != Q15ATTN_OK) {
        raise_status(status, &p, row0, bufs);
    }
    #if Q15ATTN_TIMED
    return mp_obj_new_int_from_uint(cycles);
    #else
    return mp_const_none;
    #endif
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(q15attn_attention_obj, 11, 12, q15attn_attention);

/* Raise ValueError with the kernel's one-line message for a streamed call's status. */
static void raise_stream_status(int status, const q15attn_params *p, int32_t row0, int32_t key0,
    const q15attn_buffer bufs[6]) {
    char message[Q15ATTN_MESSAGE_SIZE + 64];
    int32_t len = q15attn_describe_stream(status, p, row0, key0, bufs, message, (int32_t)sizeof(message));
    mp_raise_type_arg(&mp_type_ValueError, mp_obj_new_str(message, (size_t)len));
}

static mp_obj_t q15attn_stream_fn(size_t n_args, const mp_obj_t *args) {
    enum { ARG_q, ARG_k, ARG_vt, ARG_o, ARG_oshift, ARG_state, ARG_seq, ARG_row0 = ARG_seq + 6, ARG_key0 };
    mp_buffer_info_t info[6];
    q15attn_buffer bufs[6];
    buffer_arg(args[ARG_q], MP_QSTR_q, MP_BUFFER_READ, &info[0], &bufs[0]);
    buffer_arg(args[ARG_k], MP_QSTR_k, MP_BUFFER_READ, &info[1], &bufs[1]);
    buffer_arg(args[ARG_vt], MP_QSTR_vt, MP_BUFFER_READ, &info[2], &bufs[2]);
    buffer_arg(args[ARG_o], MP_QSTR_o, MP_BUFFER_WRITE, &info[3], &bufs[3]);
    shift_arg(args[ARG_oshift], &info[4], &bufs[4]);
    if (!mp_get_buffer(args[ARG_state], &info[5], MP_BUFFER_WRITE)) {
        mp_obj_t items[1] = {MP_OBJ_NEW_QSTR(mp_obj_get_type(args[ARG_state])->name)};
        raise_format(&mp_type_TypeError, Q15ATTN_FORMAT("state is %s; allowed: a bytearray of state_bytes(dim, rows)"),
                     1, items);
    }
    if (info[5].typecode != Q15ATTN_BYTEARRAY_TYPECODE && info[5].typecode != 'h') {
        const char code = (char)info[5].typecode;
        mp_obj_t items[1] = {mp_obj_new_str(&code, 1)};
        raise_format(&mp_type_ValueError,
                     Q15ATTN_FORMAT("state has typecode '%s'; allowed: a bytearray of state_bytes(dim, rows)"), 1, items);
    }
    bufs[5].typecode = 'h';
    bufs[5].nbytes = info[5].len > INT32_MAX ? INT32_MAX : (int32_t)info[5].len;
    if (((uintptr_t)info[5].buf & 7u) != 0) {
        mp_obj_t items[1] = {MP_OBJ_NEW_SMALL_INT((mp_int_t)((uintptr_t)info[5].buf & 7u))};
        raise_format(&mp_type_ValueError,
                     Q15ATTN_FORMAT("state starts at an address = %d mod 8; allowed: 0 mod 8 (a whole bytearray, or a "
                                    "memoryview of one at a multiple of 8)"), 1, items);
    }

    q15attn_params p;
    params_arg(args + ARG_seq, &p);
    int32_t row0 = position_arg(args[ARG_row0], MP_QSTR_row0);
    int32_t key0 = position_arg(args[ARG_key0], MP_QSTR_key0);

    int32_t nrows = 0, nkeys = 0;
    int status = q15attn_check_stream_buffers(&p, row0, key0, bufs, &nrows, &nkeys);
    if (status != Q15ATTN_OK) {
        raise_stream_status(status, &p, row0, key0, bufs);
    }
    const int16_t *q = info[0].buf;
    const int16_t *k = info[1].buf;
    const int16_t *vt = info[2].buf;
    int16_t *o = info[3].buf;
    uint8_t *oshift = info[4].buf;
    int64_t *state = info[5].buf;
    #if Q15ATTN_TIMED
    uint32_t cycles = 0;
    status = q15attn_stream_timed(&p, row0, nrows, key0, nkeys, q, k, vt, state, o, oshift, &cycles);
    #else
    status = q15attn_stream(&p, row0, nrows, key0, nkeys, q, k, vt, state, o, oshift);
    #endif
    if (status != Q15ATTN_OK) {
        raise_stream_status(status, &p, row0, key0, bufs);
    }
    #if Q15ATTN_TIMED
    return mp_obj_new_int_from_uint(cycles);
    #else
    return mp_const_none;
    #endif
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(q15attn_stream_obj, 14, 14, q15attn_stream_fn);

static mp_obj_t q15attn_state_bytes_fn(mp_obj_t dim_in, mp_obj_t rows_in) {
    const int32_t dim = int32_arg(dim_in, MP_QSTR_dim, 1, Q15ATTN_DIM_MAX);
    const int32_t rows = int32_arg(rows_in, MP_QSTR_rows, 1, Q15ATTN_SEQ_MAX);
    if (dim < 1 || dim > Q15ATTN_DIM_MAX) {
        raise_range(&mp_type_ValueError, MP_QSTR_dim, dim_in, 1, Q15ATTN_DIM_MAX);
    }
    if (rows < 1 || rows > Q15ATTN_SEQ_MAX) {
        raise_range(&mp_type_ValueError, MP_QSTR_rows, rows_in, 1, Q15ATTN_SEQ_MAX);
    }
    return MP_OBJ_NEW_SMALL_INT(q15attn_state_bytes(dim, rows));
}
static MP_DEFINE_CONST_FUN_OBJ_2(q15attn_state_bytes_obj, q15attn_state_bytes_fn);

static mp_obj_t q15attn_limits(void) {
    mp_obj_t items[3] = {
        MP_OBJ_NEW_SMALL_INT(Q15ATTN_SEQ_MAX),
        MP_OBJ_NEW_SMALL_INT(Q15ATTN_DIM_MAX),
        MP_OBJ_NEW_SMALL_INT(Q15ATTN_BC_MAX),
    };
    return mp_obj_new_tuple(3, items);
}
static MP_DEFINE_CONST_FUN_OBJ_0(q15attn_limits_obj, q15attn_limits);

static mp_obj_t q15attn_version(void) {
    return MP_OBJ_NEW_SMALL_INT(Q15ATTN_VERSION);
}
static MP_DEFINE_CONST_FUN_OBJ_0(q15attn_version_obj, q15attn_version);

/* An int argument within low..high, else ValueError (OverflowError beyond int32) naming it and the range. */
static int32_t ranged_arg(mp_obj_t arg, qstr name, int32_t low, int32_t high) {
    const int32_t v = int32_arg(arg, name, low, high);
    if (v < low || v > high) {
        raise_range(&mp_type_ValueError, name, arg, low, high);
    }
    return v;
}

/* data[start:end]'s bounds from args (end -1: len(data)), each checked against the buffer's length. */
static void span_args(const mp_obj_t *args, const mp_buffer_info_t *data, int32_t *start, int32_t *end) {
    const int32_t len = data->len > INT32_MAX ? INT32_MAX : (int32_t)data->len;
    *start = ranged_arg(args[0], MP_QSTR_start, 0, len);
    *end = ranged_arg(args[1], MP_QSTR_end, -1, len);
    if (*end < 0) {
        *end = len;
    }
    if (*end < *start) {
        raise_range(&mp_type_ValueError, MP_QSTR_end, args[1], *start, len);
    }
}

static mp_obj_t q15attn_crc16(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_buffer_info_t data;
    mp_get_buffer_raise(args[0], &data, MP_BUFFER_READ);
    const int32_t crc = ranged_arg(args[1], MP_QSTR_crc, 0, 0xFFFF);
    int32_t start, end;
    span_args(args + 2, &data, &start, &end);
    return MP_OBJ_NEW_SMALL_INT(kbench_crc16((const uint8_t *)data.buf + start, end - start, (uint16_t)crc));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(q15attn_crc16_obj, 4, 4, q15attn_crc16);

static mp_obj_t q15attn_cobs_encode(size_t n_args, const mp_obj_t *args) {
    (void)n_args;
    mp_buffer_info_t out, data;
    mp_get_buffer_raise(args[0], &out, MP_BUFFER_WRITE);
    mp_get_buffer_raise(args[2], &data, MP_BUFFER_READ);
    int32_t start, end;
    span_args(args + 3, &data, &start, &end);
    const int32_t n = end - start;
    const int32_t room = out.len > INT32_MAX ? INT32_MAX : (int32_t)out.len;
    if (room < KBENCH_COBS_MAX(n)) {
        mp_obj_t items[3] = {mp_obj_new_int(room), mp_obj_new_int(KBENCH_COBS_MAX(n)), mp_obj_new_int(n)};
        raise_format(&mp_type_ValueError,
                     Q15ATTN_FORMAT("out holds %d bytes; allowed: at least %d for COBS of %d bytes"), 3, items);
    }
    const int32_t at = ranged_arg(args[1], MP_QSTR_at, 0, room - KBENCH_COBS_MAX(n));
    uint8_t *o = (uint8_t *)out.buf + at;
    const uint8_t *d = (const uint8_t *)data.buf + start;
    /* the same memory: only forwards, the output starting far enough before the input that it never overtakes it */
    if (o < d + n && d < o + KBENCH_COBS_MAX(n) && d - o < 1 + n / 254) {
        mp_obj_t items[1] = {args[1]};
        raise_format(&mp_type_ValueError,
                     Q15ATTN_FORMAT("at=%d overlaps the data; allowed: in place only at least 1 + n // 254 bytes before it"),
                     1, items);
    }
    return MP_OBJ_NEW_SMALL_INT(at + kbench_cobs_encode(o, d, n));
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(q15attn_cobs_encode_obj, 5, 5, q15attn_cobs_encode);

#if MICROPY_ENABLE_DYNRUNTIME

mp_obj_t mpy_init(mp_obj_fun_bc_t *self, size_t n_args, size_t n_kw, mp_obj_t *args) {
    MP_DYNRUNTIME_INIT_ENTRY
    mp_store_global(MP_QSTR_attention, MP_OBJ_FROM_PTR(&q15attn_attention_obj));
    mp_store_global(MP_QSTR_stream, MP_OBJ_FROM_PTR(&q15attn_stream_obj));
    mp_store_global(MP_QSTR_state_bytes, MP_OBJ_FROM_PTR(&q15attn_state_bytes_obj));
    mp_store_global(MP_QSTR_limits, MP_OBJ_FROM_PTR(&q15attn_limits_obj));
    mp_store_global(MP_QSTR_version, MP_OBJ_FROM_PTR(&q15attn_version_obj));
    mp_store_global(MP_QSTR_crc16, MP_OBJ_FROM_PTR(&q15attn_crc16_obj));
    mp_store_global(MP_QSTR_cobs_encode, MP_OBJ_FROM_PTR(&q15attn_cobs_encode_obj));
    MP_DYNRUNTIME_INIT_EXIT
}

#else

static const mp_rom_map_elem_t q15attn_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_q15attn) },
    { MP_ROM_QSTR(MP_QSTR_attention), MP_ROM_PTR(&q15attn_attention_obj) },
    { MP_ROM_QSTR(MP_QSTR_stream), MP_ROM_PTR(&q15attn_stream_obj) },
    { MP_ROM_QSTR(MP_QSTR_state_bytes), MP_ROM_PTR(&q15attn_state_bytes_obj) },
    { MP_ROM_QSTR(MP_QSTR_limits), MP_ROM_PTR(&q15attn_limits_obj) },
    { MP_ROM_QSTR(MP_QSTR_version), MP_ROM_PTR(&q15attn_version_obj) },
    { MP_ROM_QSTR(MP_QSTR_crc16), MP_ROM_PTR(&q15attn_crc16_obj) },
    { MP_ROM_QSTR(MP_QSTR_cobs_encode), MP_ROM_PTR(&q15attn_cobs_encode_obj) },
};
static MP_DEFINE_CONST_DICT(q15attn_module_globals, q15attn_module_globals_table);

const mp_obj_module_t q15attn_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&q15attn_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR_q15attn, q15attn_user_cmodule);

#endif
