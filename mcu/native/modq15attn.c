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
 *   attention(q, k, vt, o, seq, dim, causal, bc, score_mult, score_shift[, row0]) -> cycles or None
 *       q, k, vt and o are array('h') or bytearray (raw little-endian int16, 2-byte aligned: the frame server keeps
 *       the tensors it receives in bytearrays); o is written. Computes output rows row0 .. row0 + len(q) // dim - 1 (layouts
 *       in attention_q15.h). Returns the DWT cycle count of the compute on an ARMv7E-M core (Cortex-M4/M7), None on
 *       other architectures. A bad argument raises ValueError with the kernel's message, which names the value and
 *       the allowed range.
 *   limits() -> (SEQ_MAX, DIM_MAX, BC_MAX)
 *   version() -> Q15ATTN_VERSION
 *
 * Natmod rules hold here too: no initialised .data, no static BSS; buffers and the message live on the stack.
 */
#if MICROPY_ENABLE_DYNRUNTIME
#include "py/dynruntime.h"
#else
#include "py/runtime.h"
#endif

#include "attention_q15.h"

#define Q15ATTN_MESSAGE_SIZE 128

/* MicroPython's buffer typecode for bytearray and memoryviews of one (BYTEARRAY_TYPECODE in py/objarray.h). */
#define Q15ATTN_BYTEARRAY_TYPECODE 1

#if defined(__arm__) && defined(__ARM_ARCH_7EM__)
#define Q15ATTN_TIMED 1
#else
#define Q15ATTN_TIMED 0
#endif

/* An int argument as int32_t. Where mp_int_t is wider (64-bit hosts), a value beyond int32 raises ValueError with
 * the message given, as a 32-bit build's mp_obj_get_int raises OverflowError; the kernel then checks the range. */
static int32_t int32_arg(mp_obj_t arg, mp_rom_error_text_t outside) {
    mp_int_t v = mp_obj_get_int(arg);
#if INTPTR_MAX > INT32_MAX
    if (v > INT32_MAX || v < INT32_MIN) {
        mp_raise_ValueError(outside);
    }
#else
    (void)outside;
#endif
    return (int32_t)v;
}

/* The buffer behind arg (TypeError if it has none) and its description for q15attn_check_buffers. */
static void buffer_arg(mp_obj_t arg, mp_uint_t flags, mp_buffer_info_t *info, q15attn_buffer *buffer) {
    mp_get_buffer_raise(arg, info, flags);
    buffer->typecode = (int32_t)info->typecode;
    if (info->typecode == Q15ATTN_BYTEARRAY_TYPECODE) {
        /* a bytearray is raw int16 storage; the kernel reads it as int16, so it must be 2-byte aligned */
        if (((uintptr_t)info->buf & 1u) != 0) {
            mp_raise_ValueError(MP_ERROR_TEXT("a bytearray tensor must start on a 2-byte boundary"));
        }
        buffer->typecode = 'h';
    }
    buffer->nbytes = info->len > INT32_MAX ? INT32_MAX : (int32_t)info->len;
}

/* Raise ValueError with the kernel's one-line message for status. */
static void raise_status(int status, const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[4]) {
    char message[Q15ATTN_MESSAGE_SIZE];
    int32_t len = q15attn_describe(status, p, row0, bufs, message, (int32_t)sizeof(message));
    mp_raise_type_arg(&mp_type_ValueError, mp_obj_new_str(message, (size_t)len));
}

static mp_obj_t q15attn_attention(size_t n_args, const mp_obj_t *args) {
    enum { ARG_q, ARG_k, ARG_vt, ARG_o, ARG_seq, ARG_dim, ARG_causal, ARG_bc, ARG_mult, ARG_shift, ARG_row0 };
    mp_buffer_info_t info[4];
    q15attn_buffer bufs[4];
    buffer_arg(args[ARG_q], MP_BUFFER_READ, &info[0], &bufs[0]);
    buffer_arg(args[ARG_k], MP_BUFFER_READ, &info[1], &bufs[1]);
    buffer_arg(args[ARG_vt], MP_BUFFER_READ, &info[2], &bufs[2]);
    buffer_arg(args[ARG_o], MP_BUFFER_WRITE, &info[3], &bufs[3]);

    q15attn_params p;
    p.seq = int32_arg(args[ARG_seq], MP_ERROR_TEXT("seq is outside int32"));
    p.dim = int32_arg(args[ARG_dim], MP_ERROR_TEXT("dim is outside int32"));
    p.causal = int32_arg(args[ARG_causal], MP_ERROR_TEXT("causal is outside int32"));
    p.bc = int32_arg(args[ARG_bc], MP_ERROR_TEXT("bc is outside int32"));
    p.score_mult = int32_arg(args[ARG_mult], MP_ERROR_TEXT("score_mult is outside int32"));
    p.score_shift = int32_arg(args[ARG_shift], MP_ERROR_TEXT("score_shift is outside int32"));
    int32_t row0 = n_args > ARG_row0 ? int32_arg(args[ARG_row0], MP_ERROR_TEXT("row0 is outside int32")) : 0;

    int32_t nrows = 0;
    int status = q15attn_check_buffers(&p, row0, bufs, &nrows);
    if (status != Q15ATTN_OK) {
        raise_status(status, &p, row0, bufs);
    }

    const int16_t *q = info[0].buf;
    const int16_t *k = info[1].buf;
    const int16_t *vt = info[2].buf;
    int16_t *o = info[3].buf;
    #if Q15ATTN_TIMED
    uint32_t cycles = 0;
    status = q15attn_rows_timed(&p, row0, nrows, q, k, vt, o, &cycles);
    #else
    status = q15attn_rows(&p, row0, nrows, q, k, vt, o);
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
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(q15attn_attention_obj, 10, 11, q15attn_attention);

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

#if MICROPY_ENABLE_DYNRUNTIME

mp_obj_t mpy_init(mp_obj_fun_bc_t *self, size_t n_args, size_t n_kw, mp_obj_t *args) {
    MP_DYNRUNTIME_INIT_ENTRY
    mp_store_global(MP_QSTR_attention, MP_OBJ_FROM_PTR(&q15attn_attention_obj));
    mp_store_global(MP_QSTR_limits, MP_OBJ_FROM_PTR(&q15attn_limits_obj));
    mp_store_global(MP_QSTR_version, MP_OBJ_FROM_PTR(&q15attn_version_obj));
    MP_DYNRUNTIME_INIT_EXIT
}

#else

static const mp_rom_map_elem_t q15attn_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_q15attn) },
    { MP_ROM_QSTR(MP_QSTR_attention), MP_ROM_PTR(&q15attn_attention_obj) },
    { MP_ROM_QSTR(MP_QSTR_limits), MP_ROM_PTR(&q15attn_limits_obj) },
    { MP_ROM_QSTR(MP_QSTR_version), MP_ROM_PTR(&q15attn_version_obj) },
};
static MP_DEFINE_CONST_DICT(q15attn_module_globals, q15attn_module_globals_table);

const mp_obj_module_t q15attn_user_cmodule = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&q15attn_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR_q15attn, q15attn_user_cmodule);

#endif
