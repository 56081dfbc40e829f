# kbench_server: the board's frame server (docs/protocol.md), in MicroPython. The host starts it through the raw
# REPL with `import kbench_server; kbench_server.serve()`; it then owns the serial line: Ctrl-C is disabled
# (micropython.kbd_intr(-1)) and the USB VCP holds back what the board has no room for (RTS flow control) while it
# runs, it answers one reply frame per request frame, in the order the requests came, and it returns to the REPL on
# BYE or on a break piece (0x00 0x03 0x03 0x00). The host may have up to `window` LOAD requests in flight: the
# server keeps that many replies, so a resent LOAD is answered again, not redone. Tensors live in bytearrays sized by
# SETUP; a request that cannot fit is refused with E_MEMORY, never a MemoryError crash. A head whose K and V^T do not
# fit is streamed: SETUP asks for `keys` < seq, the server then holds one key chunk of K and V^T and the query rows'
# online-softmax state (q15attn.state_bytes), and STREAM runs one chunk into that state (the kernel refuses a chunk
# out of order or a state of other rows, so a resent or stale request can never mix heads). Every output row comes
# with its own shift (Q15 contract v2, docs/q15.md §6): the kernel writes one byte per row beside O, as the row is
# divided, and READ returns those bytes as tensor OSHIFT. A q15attn older than version MODULE_MIN computes the
# contract's previous version (no shifts): the server then refuses SETUP with E_MODULE, naming both versions, so
# no RUN or STREAM ever calls it. Query heads that share one K/V head (grouped-query attention) share its K and V^T on
# the board: SETUP's optional `heads` (protocol 6) gives each RUN or STREAM that many query heads' rows, Q and O as
# `heads` blocks of `nrows` rows (head-major), each with its own row shifts and, streamed, its own state; the kernel
# runs once per head on the same K and V^T and the reply's cycles are the sum. The same file runs under CPython in
# the tests and in the board twin.

import gc
import struct
import sys

import kbench_board as board
import kbench_framing as framing

try:
    import micropython
except ImportError:  # CPython tests
    micropython = None

SERVER_VERSION = "5"
PROTOCOL = 6  # mcu/messages.py keeps the history
MODULE_MIN = 4  # the q15attn version whose kernel computes the contract this server speaks (v2: row shifts)

# request types; a reply has the request's type | REPLY
HELLO, SETUP, LOAD, RUN, READ, BYE, STREAM = 1, 2, 3, 4, 5, 6, 7
REPLY = 0x80

# status codes (first payload byte of every reply)
OK, E_TYPE, E_PAYLOAD, E_STATE, E_MEMORY, E_MODULE, E_KERNEL, E_INTERNAL = 0, 1, 2, 3, 4, 5, 6, 7

# tensors addressed by LOAD and READ
TENSOR_Q, TENSOR_K, TENSOR_VT, TENSOR_O, TENSOR_OSHIFT = 0, 1, 2, 3, 4  # OSHIFT: one u8 per output row
STATE_SLOT = 5  # where a streamed head's state is kept among the tensors; not addressable by LOAD or READ

MAX_DATA = 1024  # tensor bytes per LOAD or READ frame
FRAME_LIMIT = 2 * (MAX_DATA + 64)  # longest (decoded) frame the server buffers; anything longer is dropped
RESERVE = 8 * 1024  # heap kept free for frames, replies and the interpreter while tensors are resident
REPEAT_MAX = 255
# LOAD requests a host may have in flight, and so the LOAD replies the server keeps to answer a resent one from. Each
# kept reply is a 12-byte frame plus its objects, about 64 bytes of heap, so 8 cost about 0.5 KB of the reserve. The
# frames in flight are not on the heap: they wait in the USB VCP's 1 KB receive buffer and, once that is full, on the
# host (RTS flow control); the server reads one frame at a time. Without flow control (no USB VCP, or the REPL also
# on a UART) a full receive buffer loses bytes, so the server announces a window of 1 there.
WINDOW = 8
NO_TEMP = board.NO_TEMP
NO_CYCLES = 0xFFFFFFFF  # a cycle count when the kernel is not timed (not a Cortex-M4)
MAX_REPLY = MAX_DATA + 64  # the longest reply payload (READ's, RUN's cycles, HELLO's texts); messages are cut to fit
LOADABLE = (TENSOR_Q, TENSOR_K, TENSOR_VT)
READABLE = (TENSOR_Q, TENSOR_K, TENSOR_VT, TENSOR_O, TENSOR_OSHIFT)
LOAD_HEAD = framing.HEADER_SIZE + 5  # the data's index in a LOAD frame (after tensor:u8, offset:u32)
MEMORY_TEXT = b"out of memory while answering"

SETUP_FMT = "<HHBBHBHH"  # seq, dim, causal, bc, score_mult, score_shift, rows, keys (seq: resident; less: streamed)
SETUP_HEADS_FMT = "<B"  # after SETUP_FMT, optional (protocol 6): query heads per RUN/STREAM on these K, V^T (absent: 1)
HEADS_MAX = 255
LOAD_FMT = "<BI"  # tensor, byte offset; the data follows
RUN_FMT = "<HHB"  # row0, nrows, repeat
STREAM_FMT = "<HHHH"  # row0, nrows, key0, nkeys: the chunk of keys key0 .. key0+nkeys-1 now in K and V^T
READ_FMT = "<BIH"  # tensor, byte offset, byte count
HELLO_REPLY_FMT = "<BBHIIIIHB"  # status, protocol, mpy_abi, clock_hz, heap_free, heap_total, reserve, max_data, module;
#                                 then three short texts and window:u8 (after them, so that a host of protocol 1
#                                 still reads this protocol's number and refuses it cleanly)
RUN_REPLY_FMT = "<BiI"  # status, temp_milli_c, vdda_milli_v; then one u32 cycle count per repeat
SETUP_REPLY_FMT = "<BII"  # status, bytes needed, bytes free


def tensor_bytes(seq, dim, rows, keys, state_bytes=0, heads=1):
    # what SETUP allocates: K and V^T for `keys` keys (all seq of them, or a streamed chunk), Q and O for `rows`
    # query rows of each of `heads` query heads, int16 each, O's row shifts (a byte per row); and a streamed head's
    # state (`state_bytes` per query head)
    return 2 * dim * (2 * keys + 2 * heads * rows) + heads * rows + heads * state_bytes


class Refused(Exception):
    # a request the server answers with a status other than OK: args = (status, message)
    pass


class Server:
    def __init__(self, rx, tx, kernel=None, kernel_error="", window=WINDOW):
        self.tx = tx
        self.kernel = kernel
        framing.use_native(kernel)  # C CRC and COBS where q15attn (3) has them
        self.kernel_error = kernel_error  # why q15attn could not be imported, for E_MODULE
        self.module = module_version(kernel)  # q15attn's version(), 0 without it; below MODULE_MIN it is refused
        self.window = window  # LOAD requests the host may have in flight (HELLO says so)
        # Every frame buffer is allocated here, once: the request frame is decoded in place in the decoder's; a
        # reply is built in place in `out` (LOAD's in `out_load`), and written from there.
        self.decoder = framing.Decoder(FRAME_LIMIT, framing.READ_BLOCK)
        self.rx = framing.Reader(rx, self.decoder)
        self.out = framing.Encoder(MAX_REPLY)
        self.out_load = framing.Encoder(MAX_REPLY)  # a LOAD's reply: `out` keeps the last other reply meanwhile
        # a full LOAD's payload and data, as views made once: the steady state allocates nothing
        self.full_load = memoryview(self.decoder.buffer)[framing.HEADER_SIZE:LOAD_HEAD + MAX_DATA]
        self.load_data = memoryview(self.decoder.buffer)[LOAD_HEAD:LOAD_HEAD + MAX_DATA]
        self.load_sent = memoryview(self.out_load.buffer)[:self.out_load.seal(LOAD | REPLY, 0, 1)]  # its reply
        # an E_MEMORY refusal's frame, as a view made now: refuse_for_memory sends it without allocating
        self.memory_sent = memoryview(self.out.buffer)[:self.out.seal(HELLO | REPLY, 0,
                                                                       self.refusal(E_MEMORY, MEMORY_TEXT))]
        # The last replies: a retried request is answered again, not redone. The host sends anything but LOAD only
        # when every earlier request was answered, and the line keeps order, so a request other than LOAD forgets
        # the LOADs answered; their seqs are kept, up to the window (a LOAD's OK reply differs only in its seq).
        # `out` holds the last reply to anything else (or a LOAD refused): its type and seq in `last`.
        self.loads = [-1] * window
        self.loads_at = 0
        self.last_kind = self.last_seq = -1
        self.problem = None  # (seq, dim, causal, bc, score_mult, score_shift, rows, keys)
        self.heads = 1  # query heads per RUN or STREAM on the K and V^T (SETUP's heads)
        self.tensors = [None] * (STATE_SLOT + 1)
        self.running = True
        self.handlers = {HELLO: self.hello, SETUP: self.setup, LOAD: self.load, RUN: self.run, READ: self.read,
                         BYE: self.bye, STREAM: self.stream}

    # -- the loop ---------------------------------------------------------------------------------------------

    def serve(self):
        self.announce()
        while self.step():
            pass

    def announce(self):
        # the host waits for this HELLO reply (seq 0) to know the server runs
        self.out.seal(HELLO | REPLY, 0, self.hello(b""))
        self.send(self.out)

    def step(self):
        # What one read of the line brings: the frames it completes are answered. False once the server should end
        # (BYE, a break piece, or the stream ended), its tensors freed by then. serve() calls it in a loop; a port
        # whose GC runs only between calls into the VM (the WebAssembly one) calls it from outside, once per read.
        if not self.running:
            return False
        n = self.rx.read()
        if not n:  # the stream ended (tests; a board's stdin never does)
            self.running = False
        else:
            i, decoder = 0, self.decoder
            while i < n and self.running:
                i = decoder.push(self.rx.buffer, i, n)
                if decoder.ready:
                    try:
                        size = decoder.size
                        payload = self.full_load if size == len(self.full_load) else \
                            memoryview(decoder.buffer)[framing.HEADER_SIZE:framing.HEADER_SIZE + size]
                        self.send(self.respond(decoder.kind, decoder.seq, payload))
                    except MemoryError:  # a view or a write the heap had no room for: answered, never dropped
                        self.refuse_for_memory(decoder.kind, decoder.seq)
            if decoder.interrupted:
                self.running = False
        if not self.running:
            self.free()
        return self.running

    @property
    def replies(self):
        # (type, seq) of the LOAD replies kept, oldest first: for the tests
        kept = self.loads[self.loads_at:] + self.loads[:self.loads_at]
        return [(LOAD, seq) for seq in kept if seq >= 0]

    def send(self, out):
        # out's frame, from its pad byte (noise before it costs nothing) to its delimiter
        if out is self.out_load:
            self.tx.write(self.load_sent)
        else:
            self.tx.write(memoryview(out.buffer)[:out.length])

    def answer(self, kind, seq, payload):
        # the encoded reply to one request (without its pad), as new bytes: for the tests; step() uses respond()
        out = self.respond(kind, seq, payload)
        return bytes(out.buffer[1:out.length])

    def respond(self, kind, seq, payload):
        # The Encoder holding the reply to one request.
        # A handler writes its reply's payload at out.payload and returns its length; 0: OK and nothing more.
        if kind == LOAD and seq in self.loads:
            return self.load_reply(seq)
        if kind == self.last_kind and seq == self.last_seq:
            return self.out
        handler = self.handlers.get(kind)
        out = self.out
        try:
            if handler is None:
                raise Refused(E_TYPE, "unknown message type %d" % kind)
            m = handler(payload)
        except Refused as exc:
            m = self.refusal(exc.args[0], exc.args[1].encode())
        except MemoryError:
            m = self.refusal(E_MEMORY, MEMORY_TEXT)
        except Exception as exc:  # noqa: BLE001 - the server must answer, whatever went wrong
            m = self.refusal(E_INTERNAL, ("%s: %s" % (type(exc).__name__, exc)).encode())
        if kind == LOAD and m == 0:
            self.loads[self.loads_at] = seq
            self.loads_at = (self.loads_at + 1) % len(self.loads)
            return self.load_reply(seq)
        if kind != LOAD:
            for i in range(len(self.loads)):
                self.loads[i] = -1
        if m == 0:
            out.buffer[out.payload] = OK
            m = 1
        out.seal((kind | REPLY) & 0xFF, seq, m)
        self.last_kind, self.last_seq = kind, seq
        return out

    def load_reply(self, seq):
        out = self.out_load
        out.buffer[out.payload] = OK
        out.seal(LOAD | REPLY, seq, 1)
        return out

    def refuse_for_memory(self, kind, seq):
        # E_MEMORY for a request whose reply could not be made or sent, built in `out` without allocating, so the
        # host shrinks its plan or chunk instead of resending for ever; should even that write fail, the host's
        # resend finds the heap as it is then
        out = self.out
        out.seal((kind | REPLY) & 0xFF, seq, self.refusal(E_MEMORY, MEMORY_TEXT))
        self.last_kind, self.last_seq = kind, seq
        try:
            self.tx.write(self.memory_sent)  # every E_MEMORY refusal frame has this length (COBS of under 254 bytes)
        except MemoryError:
            pass

    def refusal(self, status, message):
        # a refusal's payload in `out`: the status, then the message (cut to fit)
        out = self.out
        m = min(len(message), out.max_payload - 1)
        out.buffer[out.payload] = status
        out.buffer[out.payload + 1:out.payload + 1 + m] = message if m == len(message) else message[:m]
        return 1 + m

    # -- requests ---------------------------------------------------------------------------------------------

    def hello(self, payload):
        gc.collect()
        free = gc.mem_free()
        total = free + gc.mem_alloc()
        impl = sys.implementation
        module = self.module
        texts = (getattr(impl, "_machine", sys.platform), sys.version, SERVER_VERSION)
        largest = board.largest_block(free)
        body = (struct.pack(HELLO_REPLY_FMT, OK, PROTOCOL, getattr(impl, "_mpy", 0) & 0xFFFF, board.clock_hz(), free,
                            total, RESERVE, MAX_DATA, module) + b"".join(short_text(t) for t in texts)
                + bytes((self.window,)) + struct.pack("<I", largest))
        self.out.buffer[self.out.payload:self.out.payload + len(body)] = body
        return len(body)

    def setup(self, payload):
        n, base = len(payload), struct.calcsize(SETUP_FMT)
        if n not in (base, base + struct.calcsize(SETUP_HEADS_FMT)):
            raise Refused(E_PAYLOAD, "SETUP payload of %d bytes; expected %d, or %d with heads"
                          % (n, base, base + struct.calcsize(SETUP_HEADS_FMT)))
        seq, dim, causal, bc, mult, shift, rows, keys = struct.unpack_from(SETUP_FMT, payload)
        heads = payload[base] if n > base else 1
        if not (1 <= seq and 1 <= dim and 1 <= rows <= seq and 1 <= keys <= seq):
            raise Refused(E_PAYLOAD, "seq=%d dim=%d rows=%d keys=%d; allowed: seq, dim >= 1 and 1 <= rows, keys <= seq"
                          % (seq, dim, rows, keys))
        if not 1 <= heads <= HEADS_MAX:
            raise Refused(E_PAYLOAD, "heads=%d; allowed: 1..%d query heads on one K/V head" % (heads, HEADS_MAX))
        self.free()
        if 0 < self.module < MODULE_MIN:
            raise Refused(E_MODULE, self.too_old())
        state = 0
        if keys < seq and (bc < 1 or keys % bc):
            raise Refused(E_PAYLOAD, "keys=%d with bc=%d; allowed: a streamed head's key chunk is a multiple of bc"
                          % (keys, bc))
        if keys < seq:
            if self.kernel is None or not hasattr(self.kernel, "stream"):
                raise Refused(E_MODULE, "a streamed head (keys=%d < seq=%d) needs q15attn %d or later, with "
                              "stream(); re-deploy with python -m mcu.deploy" % (keys, seq, MODULE_MIN))
            try:
                state = self.kernel.state_bytes(dim, rows)
            except ValueError as exc:
                raise Refused(E_KERNEL, str(exc))
        need = tensor_bytes(seq, dim, rows, keys, state, heads)
        free = gc.mem_free()
        if need + RESERVE > free:
            raise Refused(E_MEMORY, "tensors need %d bytes + %d reserve; the heap has %d free"
                          % (need, RESERVE, free))
        try:
            self.tensors = board.carve(heads * rows, keys, dim, heads * state)  # Q, K, V^T, O, OSHIFT, state
        except MemoryError:
            self.free()
            raise Refused(E_MEMORY, "tensors need %d bytes; allocation failed with %d free, the largest block %d"
                          % (need, free, board.largest_block(free)))
        self.problem = (seq, dim, causal, bc, mult, shift, rows, keys)
        self.heads = heads
        struct.pack_into(SETUP_REPLY_FMT, self.out.buffer, self.out.payload, OK, need, gc.mem_free())
        return struct.calcsize(SETUP_REPLY_FMT)

    def load(self, payload):
        n = len(payload)
        # the fields read by index and the data copied from the frame buffer: nothing allocated for a full LOAD
        head = struct.calcsize(LOAD_FMT)
        if n < head:
            raise Refused(E_PAYLOAD, "LOAD payload of %d bytes; expected at least %d" % (n, head))
        buf, at = payload, 0
        offset = buf[at + 1] | buf[at + 2] << 8 | buf[at + 3] << 16 | buf[at + 4] << 24
        count = n - head
        target = self.tensor(buf[at], offset, count, LOADABLE)
        target[offset:offset + count] = self.load_data if payload is self.full_load else memoryview(payload)[head:]
        return 0

    def read(self, payload):
        n = len(payload)
        # the data copied from the tensor into the reply frame: no copy of its own
        if n != struct.calcsize(READ_FMT):
            raise Refused(E_PAYLOAD, "READ payload of %d bytes; expected %d" % (n, struct.calcsize(READ_FMT)))
        buf, at = payload, 0
        offset = buf[at + 1] | buf[at + 2] << 8 | buf[at + 3] << 16 | buf[at + 4] << 24
        count = buf[at + 5] | buf[at + 6] << 8
        if count > MAX_DATA:
            raise Refused(E_PAYLOAD, "READ of %d bytes; allowed: 0..%d" % (count, MAX_DATA))
        source = self.tensor(buf[at], offset, count, READABLE)
        out, p = self.out.buffer, self.out.payload
        out[p] = OK
        out[p + 1:p + 1 + count] = memoryview(source)[offset:offset + count]
        return 1 + count

    def run(self, payload):
        n = len(payload)
        if n != struct.calcsize(RUN_FMT):
            raise Refused(E_PAYLOAD, "RUN payload of %d bytes; expected %d" % (n, struct.calcsize(RUN_FMT)))
        row0, nrows, repeat = struct.unpack_from(RUN_FMT, payload)
        seq, dim, causal, bc, mult, shift, rows, keys = self.ready("RUN", False)
        if not 1 <= nrows <= rows or not 1 <= repeat <= REPEAT_MAX:
            raise Refused(E_PAYLOAD, "nrows=%d repeat=%d; allowed: nrows 1..%d, repeat 1..%d"
                          % (nrows, repeat, rows, REPEAT_MAX))
        k, vt = self.tensors[TENSOR_K], self.tensors[TENSOR_VT]
        views = [self.rows_of(h, nrows, dim) for h in range(self.heads)]  # (q, o, oshift) of each query head
        out, p = self.out.buffer, self.out.payload + struct.calcsize(RUN_REPLY_FMT)
        for r in range(repeat):
            total = 0
            for q, o, oshift in views:
                try:
                    took = self.kernel.attention(q, k, vt, o, oshift, seq, dim, causal, bc, mult, shift, row0)
                except ValueError as exc:
                    raise Refused(E_KERNEL, str(exc))
                total = None if took is None or total is None else total + took
            struct.pack_into("<I", out, p + 4 * r, NO_CYCLES if total is None else total & 0xFFFFFFFF)
        return self.ran(repeat)

    def stream(self, payload):
        n = len(payload)
        if n != struct.calcsize(STREAM_FMT):
            raise Refused(E_PAYLOAD, "STREAM payload of %d bytes; expected %d" % (n, struct.calcsize(STREAM_FMT)))
        row0, nrows, key0, nkeys = struct.unpack_from(STREAM_FMT, payload)
        seq, dim, causal, bc, mult, shift, rows, keys = self.ready("STREAM", True)
        if not 1 <= nrows <= rows or not 1 <= nkeys <= keys:
            raise Refused(E_PAYLOAD,
                          "nrows=%d nkeys=%d; allowed: nrows 1..%d, nkeys 1..%d" % (nrows, nkeys, rows, keys))
        k = memoryview(self.tensors[TENSOR_K])[:2 * nkeys * dim]
        vt = memoryview(self.tensors[TENSOR_VT])[:2 * nkeys * dim]
        size = self.kernel.state_bytes(dim, nrows)  # a multiple of 8: each head's state stays 8-byte aligned
        states = memoryview(self.tensors[STATE_SLOT])
        total = 0
        for h in range(self.heads):
            q, o, oshift = self.rows_of(h, nrows, dim)  # oshift: written by the chunk that divides
            try:
                took = self.kernel.stream(q, k, vt, o, oshift, states[h * size:(h + 1) * size], seq, dim, causal, bc,
                                          mult, shift, row0, key0)
            except ValueError as exc:
                raise Refused(E_KERNEL, str(exc))
            total = None if took is None or total is None else total + took
        struct.pack_into("<I", self.out.buffer, self.out.payload + struct.calcsize(RUN_REPLY_FMT),
                         NO_CYCLES if total is None else total & 0xFFFFFFFF)
        return self.ran(1)

    def bye(self, payload):
        self.running = False
        return 0

    # -- helpers ---------------------------------------------------------------------------------------------

    def ready(self, request, streamed):
        # the problem, once SETUP made one of the kind `request` runs on and q15attn is there
        if self.problem is None:
            raise Refused(E_STATE, "%s before SETUP" % request)
        if self.kernel is None:
            raise Refused(E_MODULE, "q15attn is not on the board (deploy q15attn.mpy or bake it into the firmware)"
                          + (": " + self.kernel_error if self.kernel_error else ""))
        seq, keys = self.problem[0], self.problem[7]
        if (keys < seq) != streamed:
            raise Refused(E_STATE, "%s on a head set up with keys=%d of seq=%d; allowed: %s" % (
                request, keys, seq, "RUN (every key resident)" if keys == seq else "STREAM (key chunks)"))
        return self.problem

    def rows_of(self, h, nrows, dim):
        # query head h's (q, o, oshift) of a RUN or STREAM of `nrows` rows: Q and O hold `heads` blocks of `nrows`
        # rows, head after head, and OSHIFT `heads` blocks of `nrows` bytes
        span = 2 * nrows * dim
        return (memoryview(self.tensors[TENSOR_Q])[h * span:(h + 1) * span],
                memoryview(self.tensors[TENSOR_O])[h * span:(h + 1) * span],
                memoryview(self.tensors[TENSOR_OSHIFT])[h * nrows:(h + 1) * nrows])

    def too_old(self):
        # the refusal of a q15attn whose kernel computes an older contract
        return ("q15attn is version %d; this server (%s) needs version %d or later (Q15 contract v2: output row "
                "shifts): re-deploy with python -m mcu.deploy" % (self.module, SERVER_VERSION, MODULE_MIN))

    def ran(self, calls):
        # the reply to RUN or STREAM: the sensors, then each call's cycles (written after them by the caller)
        temp, vdda = board.diagnostics()
        struct.pack_into(RUN_REPLY_FMT, self.out.buffer, self.out.payload, OK, temp, vdda)
        return struct.calcsize(RUN_REPLY_FMT) + 4 * calls

    def tensor(self, which, offset, count, allowed):
        if which not in allowed:
            raise Refused(E_PAYLOAD, "tensor %d; allowed: %s" % (which, allowed))
        if self.problem is None:
            raise Refused(E_STATE, "no tensors before SETUP")
        target = self.tensors[which]
        if count > MAX_DATA or offset + count > len(target):
            raise Refused(E_PAYLOAD, "bytes %d..%d of tensor %d; allowed: 0..%d, at most %d at once"
                          % (offset, offset + count, which, len(target), MAX_DATA))
        return target

    def free(self):
        self.tensors = [None] * (STATE_SLOT + 1)
        self.problem = None
        self.heads = 1
        gc.collect()


def module_version(kernel):
    # q15attn's version(): 0 without the module, 1 for one without version() (the first had none)
    if kernel is None:
        return 0
    try:
        return kernel.version()
    except Exception:  # noqa: BLE001 - a module without version() still counts as present
        return 1


def short_text(text):
    data = text.encode()[:255]
    return bytes((len(data),)) + data


active = None  # the running server, kept reachable from the module so gc.mem_free sees its tensors


def serve(rx=None, tx=None, kernel=None):
    server = begin(rx, tx, kernel)
    try:
        server.announce()
        while server.step():
            pass
    finally:
        end()


def begin(rx=None, tx=None, kernel=None):
    # the server serve() runs, with the line made its own (no Ctrl-C, flow control on); a caller that drives
    # Server.step() itself calls announce(), then step() until it is False, then end()
    global active
    found, why = (kernel, "") if kernel is not None else board.load_kernel()
    window = WINDOW if board.hold_back(True) else 1
    active = Server(rx or sys.stdin.buffer, tx or sys.stdout.buffer, found, why, window)
    if micropython is not None:
        micropython.kbd_intr(-1)
    return active


def end():
    # the line back to the REPL
    global active
    if micropython is not None:
        micropython.kbd_intr(3)
    board.hold_back(False)
    active = None
