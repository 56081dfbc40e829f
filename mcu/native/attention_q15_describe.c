/*
 * The Q15 kernel's messages: q15attn_describe and q15attn_describe_stream, one line of text per status of
 * attention_q15.h (the bad value and its allowed range), built without libc so that the natmod links no C library. The kernel itself is attention_q15.c.
 */
#include "attention_q15.h"

typedef struct {
    char *buf;
    int32_t len, size;
} text;

static void put(text *t, const char *s) {
    for (; *s; s++) {
        if (t->len + 1 < t->size) {
            t->buf[t->len++] = *s;
        }
    }
}

static void put_int(text *t, int32_t value) {
    char digits[12];
    int32_t n = 0;
    uint32_t mag = value < 0 ? 0u - (uint32_t)value : (uint32_t)value;
    do {
        digits[n++] = (char)('0' + mag % 10u);
        mag /= 10u;
    } while (mag);
    if (value < 0) {
        put(t, "-");
    }
    while (n) {
        char one[2] = {digits[--n], 0};
        put(t, one);
    }
}

/* a + b - 1 (the last of b items from a) without int32 overflow: clamped to int32's range for printing. */
static int32_t last_of(int32_t a, int32_t b) {
    const int64_t last = (int64_t)a + b - 1;
    return last > INT32_MAX ? INT32_MAX : last < INT32_MIN ? INT32_MIN : (int32_t)last;
}

static void put_range(text *t, const char *name, int32_t value, int32_t low, int32_t high) {
    put(t, name);
    put(t, "=");
    put_int(t, value);
    put(t, " is out of range; allowed: ");
    put_int(t, low);
    put(t, "..");
    put_int(t, high);
}

int32_t q15attn_describe(int status, const q15attn_params *p, int32_t row0, const q15attn_buffer bufs[5],
    char *buf, int32_t size) {
    static const char *const names[5] = {"q", "k", "vt", "o", "oshift"};
    text t = {buf, 0, size};
    const int32_t len_q = bufs ? bufs[0].nbytes / 2 : 0;
    switch (status) {
        case Q15ATTN_OK:
            put(&t, "ok");
            break;
        case Q15ATTN_E_SEQ:
            put_range(&t, "seq", p->seq, 1, Q15ATTN_SEQ_MAX);
            break;
        case Q15ATTN_E_DIM:
            put_range(&t, "dim", p->dim, 1, Q15ATTN_DIM_MAX);
            break;
        case Q15ATTN_E_CAUSAL:
            put_range(&t, "causal", p->causal, 0, 1);
            break;
        case Q15ATTN_E_BC:
            put_range(&t, "bc", p->bc, 1, Q15ATTN_BC_MAX);
            break;
        case Q15ATTN_E_MULT:
            put_range(&t, "score_mult", p->score_mult, Q15ATTN_MULT_MIN, Q15ATTN_MULT_MAX);
            break;
        case Q15ATTN_E_SHIFT:
            put_range(&t, "score_shift", p->score_shift, Q15ATTN_SHIFT_MIN, Q15ATTN_SHIFT_MAX);
            break;
        case Q15ATTN_E_ROWS:
            put(&t, "rows ");
            put_int(&t, row0);
            put(&t, "..");
            put_int(&t, last_of(row0, p->dim > 0 ? len_q / p->dim : 0));
            put(&t, " are outside 0..");
            put_int(&t, p->seq - 1);
            put(&t, " (seq=");
            put_int(&t, p->seq);
            put(&t, ")");
            break;
        case Q15ATTN_E_TYPECODE:
            for (int i = 0; i < 5; i++) {
                if (bufs && bufs[i].typecode != (i < 4 ? 'h' : 'B')) {
                    char code[2] = {(char)bufs[i].typecode, 0};
                    put(&t, names[i]);
                    put(&t, " has typecode '");
                    put(&t, code);
                    put(&t, i < 4 ? "'; allowed: 'h' (array('h'), int16)"
                                  : "'; allowed: 'B' (bytearray or array('B'), uint8)");
                    break;
                }
            }
            break;
        case Q15ATTN_E_LEN_Q:
            put(&t, "len(q)=");
            put_int(&t, len_q);
            put(&t, " is not a whole, non-zero number of rows of dim=");
            put_int(&t, p->dim);
            break;
        case Q15ATTN_E_LEN_K:
        case Q15ATTN_E_LEN_VT:
            put(&t, status == Q15ATTN_E_LEN_K ? "len(k)=" : "len(vt)=");
            put_int(&t, bufs ? bufs[status == Q15ATTN_E_LEN_K ? 1 : 2].nbytes / 2 : 0);
            put(&t, " but seq*dim=");
            put_int(&t, p->seq * p->dim);
            break;
        case Q15ATTN_E_LEN_O:
            put(&t, "len(o)=");
            put_int(&t, bufs ? bufs[3].nbytes / 2 : 0);
            put(&t, " but len(q)=");
            put_int(&t, len_q);
            break;
        case Q15ATTN_E_LEN_OSHIFT: {
            const int32_t nrows = p->dim > 0 ? len_q / p->dim : 0, have = bufs ? bufs[4].nbytes : 0;
            if (have == 0) {
                put(&t, "oshift is missing (0 bytes)");
            } else {
                put(&t, "len(oshift)=");
                put_int(&t, have);
                put(&t, " is too small");
            }
            put(&t, "; allowed: at least ");
            put_int(&t, nrows);
            put(&t, " bytes (one shift per row, ");
            put_int(&t, nrows);
            put(&t, " rows)");
            break;
        }
        default:
            put(&t, "unknown status ");
            put_int(&t, status);
    }
    if (t.size > 0) {
        t.buf[t.len] = 0;
    }
    return t.len;
}

int32_t q15attn_describe_stream(int status, const q15attn_params *p, int32_t row0, int32_t key0,
    const q15attn_buffer bufs[6], char *buf, int32_t size) {
    text t = {buf, 0, size};
    const int32_t dim = p->dim > 0 ? p->dim : 1;
    const int32_t nrows = bufs[0].nbytes / 2 / dim, nkeys = bufs[1].nbytes / 2 / dim;
    const int32_t end = p->causal && nrows > 0 ? last_of(row0, nrows + 1) : p->seq;   /* the rows' key end */
    switch (status) {
        case Q15ATTN_E_TYPECODE:
            if (bufs[5].typecode != 'h') {
                put(&t, "state must be a bytearray");
                break;
            }
            return q15attn_describe(status, p, row0, bufs, buf, size);   /* q, k, vt, o, oshift as one pass's */
        case Q15ATTN_E_LEN_K:
            put(&t, "len(k)=");
            put_int(&t, bufs[1].nbytes / 2);
            put(&t, " is not a whole, non-zero number of keys of dim=");
            put_int(&t, p->dim);
            break;
        case Q15ATTN_E_LEN_VT:
            put(&t, "len(vt)=");
            put_int(&t, bufs[2].nbytes / 2);
            put(&t, " but len(k)=");
            put_int(&t, bufs[1].nbytes / 2);
            break;
        case Q15ATTN_E_LEN_STATE:
            put(&t, "len(state)=");
            put_int(&t, bufs[5].nbytes);
            put(&t, " but ");
            put_int(&t, nrows);
            put(&t, " rows of dim=");
            put_int(&t, p->dim);
            put(&t, " need ");
            put_int(&t, q15attn_state_bytes(p->dim, nrows));
            break;
        case Q15ATTN_E_KEYS:
            put(&t, "keys ");
            put_int(&t, key0);
            put(&t, "..");
            put_int(&t, last_of(key0, nkeys));
            put(&t, " are not a chunk of these rows' keys 0..");
            put_int(&t, last_of(end, 0));
            put(&t, "; allowed: key0 a multiple of bc=");
            put_int(&t, p->bc);
            put(&t, ", whole blocks of bc unless the chunk ends at key ");
            put_int(&t, last_of(end, 0));
            break;
        case Q15ATTN_E_STATE:
            put(&t, "the state does not hold rows ");
            put_int(&t, row0);
            put(&t, "..");
            put_int(&t, last_of(row0, nrows));
            put(&t, " with these parameters and keys 0..");
            put_int(&t, last_of(key0, 0));
            put(&t, "; allowed: key0=0 (start), or the key after the last chunk taken");
            break;
        default:
            return q15attn_describe(status, p, row0, bufs, buf, size);
    }
    if (t.size > 0) {
        t.buf[t.len] = 0;
    }
    return t.len;
}
