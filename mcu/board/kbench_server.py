# kbench_server: the board's frame server (docs/protocol.md), in MicroPython. The host starts it through the raw
# REPL with `import kbench_server; kbench_server.serve()`; it then owns the serial line: Ctrl-C is disabled
# (micropython.kbd_intr(-1)) and the USB VCP holds back what the board has no room for (RTS flow control) while it
# runs, it answers one reply frame per request frame, in the order the requests came, and it returns to the REPL on
# BYE or on a break piece (0x00 0x03 0x03 0x00). The host may have up to `window` LOAD requests in flight: the
# server keeps that many replies, so a resent LOAD is answered again, not redone. Tensors live in bytearrays sized by
# SETUP; a request that cannot fit is refused with E_MEMORY, never a MemoryError crash. A head whose K and V^T do not
# fit is streamed: SETUP asks for `keys` < seq, the server then holds one key chunk of K and V^T and the query rows'
# online-softmax state (q15attn.state_bytes), and STREAM runs one chunk into that state (the kernel refuses a chunk
# out of order or a state of other rows, so a resent or stale request can never mix heads). The same file runs under
# CPython in the tests and in the board twin.

import gc
import struct
import sys

import kbench_framing as framing

try:
    import micropython
except ImportError:  # CPython tests
    micropython = None

SERVER_VERSION = "3"
PROTOCOL = 3  # mcu/messages.py keeps the history

# request types; a reply has the request's type | REPLY
HELLO, SETUP, LOAD, RUN, READ, BYE, STREAM = 1, 2, 3, 4, 5, 6, 7
REPLY = 0x80

# status codes (first payload byte of every reply)
OK, E_TYPE, E_PAYLOAD, E_STATE, E_MEMORY, E_MODULE, E_KERNEL, E_INTERNAL = 0, 1, 2, 3, 4, 5, 6, 7

# tensors addressed by LOAD and READ
TENSOR_Q, TENSOR_K, TENSOR_VT, TENSOR_O = 0, 1, 2, 3
STATE_SLOT = 4  # where a streamed head's state is kept among the tensors; not addressable by LOAD or READ

MAX_DATA = 1024  # tensor bytes per LOAD or READ frame
FRAME_LIMIT = 2 * (MAX_DATA + 64)  # longest encoded frame the server buffers; anything longer is dropped
RESERVE = 8 * 1024  # heap kept free for frames, replies and the interpreter while tensors are resident
REPEAT_MAX = 255
# LOAD requests a host may have in flight, and so the LOAD replies the server keeps to answer a resent one from. Each
# kept reply is a 12-byte frame plus its objects, about 64 bytes of heap, so 8 cost about 0.5 KB of the reserve. The
# frames in flight are not on the heap: they wait in the USB VCP's 1 KB receive buffer and, once that is full, on the
# host (RTS flow control); the server reads one frame at a time. Without flow control (no USB VCP, or the REPL also
# on a UART) a full receive buffer loses bytes, so the server announces a window of 1 there.
WINDOW = 8
NO_TEMP = -(1 << 31)  # temp_milli_c when the board has no temperature sensor
NO_CYCLES = 0xFFFFFFFF  # a cycle count when the kernel is not timed (not a Cortex-M4)

SETUP_FMT = "<HHBBHBHH"  # seq, dim, causal, bc, score_mult, score_shift, rows, keys (seq: resident; less: streamed)
LOAD_FMT = "<BI"  # tensor, byte offset; the data follows
RUN_FMT = "<HHB"  # row0, nrows, repeat
STREAM_FMT = "<HHHH"  # row0, nrows, key0, nkeys: the chunk of keys key0 .. key0+nkeys-1 now in K and V^T
READ_FMT = "<BIH"  # tensor, byte offset, byte count
HELLO_REPLY_FMT = "<BBHIIIIHB"  # status, protocol, mpy_abi, clock_hz, heap_free, heap_total, reserve, max_data, module;
#                                 then three short texts and window:u8 (after them, so that a host of protocol 1
#                                 still reads this protocol's number and refuses it cleanly)
RUN_REPLY_FMT = "<BiI"  # status, temp_milli_c, vdda_milli_v; then one u32 cycle count per repeat
SETUP_REPLY_FMT = "<BII"  # status, bytes needed, bytes free


def tensor_bytes(seq, dim, rows, keys, state_bytes=0):
    # what SETUP allocates: K and V^T for `keys` keys (all seq of them, or a streamed chunk), Q and O for `rows`
    # query rows, int16 each; and a streamed head's state
    return 2 * dim * (2 * keys + 2 * rows) + state_bytes


class Refused(Exception):
    # a request the server answers with a status other than OK: args = (status, message)
    pass


class BlockReader:
    # Reads the line a COBS block at a time rather than a byte at a time: after a block's code byte the next
    # code-1 bytes hold no delimiter, so they can be read in one call, and so can the byte after them, which every
    # frame has (the next block's code byte, or the delimiter): one read per block. Not after a block of one or two
    # data bytes: a break piece (00 03 03 00) is one, and nothing need follow it. A zero found inside a block
    # (corruption) resynchronises the count at the byte after it.

    def __init__(self, stream):
        self.stream = stream
        self.need = 0  # data bytes left in the current block; 0: the next byte is a code byte or a delimiter

    def read(self):
        data = self.stream.read(self.need + 1 if self.need > 2 else self.need or 1)
        i, n = 0, len(data)
        while i < n:
            if self.need == 0:
                code = data[i]
                i += 1
                self.need = code - 1 if code else 0
            else:
                step = min(self.need, n - i)
                zero = data.find(b"\x00", i, i + step)
                if zero >= 0:
                    i, self.need = zero + 1, 0
                else:
                    i += step
                    self.need -= step
        return data


class Server:
    def __init__(self, rx, tx, kernel=None, kernel_error="", window=WINDOW):
        self.rx = BlockReader(rx)
        self.tx = tx
        self.kernel = kernel
        self.kernel_error = kernel_error  # why q15attn could not be imported, for E_MODULE
        self.window = window  # LOAD requests the host may have in flight (HELLO says so)
        self.decoder = framing.Decoder(FRAME_LIMIT)
        # (type, seq, encoded reply) of the last replies: a retried request is answered again, not redone. The host
        # sends anything but LOAD only when every earlier request was answered, and the line keeps order, so a
        # request other than LOAD empties the cache; LOAD replies accumulate, the oldest dropped past the window.
        self.replies = []
        self.problem = None  # (seq, dim, causal, bc, score_mult, score_shift, rows, keys)
        self.tensors = [None, None, None, None, None]
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
        self.tx.write(b"\x00" + framing.encode(HELLO | REPLY, 0, self.hello(b"")))

    def step(self):
        # What one read of the line brings: the frames it completes are answered. False once the server should end
        # (BYE, a break piece, or the stream ended), its tensors freed by then. serve() calls it in a loop; a port
        # whose GC runs only between calls into the VM (the WebAssembly one) calls it from outside, once per read.
        if not self.running:
            return False
        data = self.rx.read()
        if not data:  # the stream ended (tests; a board's stdin never does)
            self.running = False
        else:
            try:
                for kind, seq, payload in self.decoder.feed(data):
                    self.tx.write(b"\x00" + self.answer(kind, seq, payload))  # pad: noise before it costs nothing
                    if not self.running:
                        break
            except MemoryError:  # no room even for the frame: drop it, the host retries
                self.decoder = framing.Decoder(FRAME_LIMIT)
                self.replies = []
                gc.collect()
            if self.decoder.interrupted:
                self.running = False
        if not self.running:
            self.free()
        return self.running

    def answer(self, kind, seq, payload):
        for cached in self.replies:
            if cached[0] == kind and cached[1] == seq:
                return cached[2]
        handler = self.handlers.get(kind)
        try:
            if handler is None:
                raise Refused(E_TYPE, "unknown message type %d" % kind)
            body = handler(payload)
        except Refused as exc:
            body = bytes((exc.args[0],)) + exc.args[1].encode()
        except MemoryError:
            body = bytes((E_MEMORY,)) + b"out of memory while answering"
        except Exception as exc:  # noqa: BLE001 - the server must answer, whatever went wrong
            body = bytes((E_INTERNAL,)) + ("%s: %s" % (type(exc).__name__, exc)).encode()
        reply = framing.encode((kind | REPLY) & 0xFF, seq, body)
        if kind == LOAD:
            self.replies.append((kind, seq, reply))
            if len(self.replies) > self.window:
                self.replies.pop(0)
        else:
            self.replies = [(kind, seq, reply)]
        return reply

    # -- requests ---------------------------------------------------------------------------------------------

    def hello(self, payload):
        gc.collect()
        free = gc.mem_free()
        total = free + gc.mem_alloc()
        impl = sys.implementation
        module = 0
        if self.kernel is not None:
            try:
                module = self.kernel.version()
            except Exception:  # noqa: BLE001 - a module without version() still counts as present
                module = 1
        head = struct.pack(HELLO_REPLY_FMT, OK, PROTOCOL, getattr(impl, "_mpy", 0) & 0xFFFF, clock_hz(), free, total,
                           RESERVE, MAX_DATA, module)
        texts = (getattr(impl, "_machine", sys.platform), sys.version, SERVER_VERSION)
        return head + b"".join(short_text(t) for t in texts) + bytes((self.window,))

    def setup(self, payload):
        if len(payload) != struct.calcsize(SETUP_FMT):
            raise Refused(E_PAYLOAD, "SETUP payload of %d bytes; expected %d" % (len(payload),
                                                                                 struct.calcsize(SETUP_FMT)))
        seq, dim, causal, bc, mult, shift, rows, keys = struct.unpack(SETUP_FMT, payload)
        if not (1 <= seq and 1 <= dim and 1 <= rows <= seq and 1 <= keys <= seq):
            raise Refused(E_PAYLOAD, "seq=%d dim=%d rows=%d keys=%d; allowed: seq, dim >= 1 and 1 <= rows, keys <= seq"
                          % (seq, dim, rows, keys))
        self.replies = []  # the cached replies (up to a READ's worth) are not needed to answer a SETUP
        self.free()
        state = 0
        if keys < seq and (bc < 1 or keys % bc):
            raise Refused(E_PAYLOAD, "keys=%d with bc=%d; allowed: a streamed head's key chunk is a multiple of bc"
                          % (keys, bc))
        if keys < seq:
            if self.kernel is None or not hasattr(self.kernel, "stream"):
                raise Refused(E_MODULE, "a streamed head (keys=%d < seq=%d) needs q15attn version 2 with stream(); "
                              "redeploy q15attn.mpy" % (keys, seq))
            try:
                state = self.kernel.state_bytes(dim, rows)
            except ValueError as exc:
                raise Refused(E_KERNEL, str(exc))
        need = tensor_bytes(seq, dim, rows, keys, state)
        free = gc.mem_free()
        if need + RESERVE > free:
            raise Refused(E_MEMORY, "tensors need %d bytes + %d reserve; the heap has %d free"
                          % (need, RESERVE, free))
        try:
            self.tensors = [bytearray(2 * rows * dim), bytearray(2 * keys * dim), bytearray(2 * keys * dim),
                            bytearray(2 * rows * dim), bytearray(state) if state else None]
        except MemoryError:
            self.free()
            raise Refused(E_MEMORY, "tensors need %d bytes; allocation failed with %d free" % (need, free))
        self.problem = (seq, dim, causal, bc, mult, shift, rows, keys)
        return struct.pack(SETUP_REPLY_FMT, OK, need, gc.mem_free())

    def load(self, payload):
        head = struct.calcsize(LOAD_FMT)
        if len(payload) < head:
            raise Refused(E_PAYLOAD, "LOAD payload of %d bytes; expected at least %d" % (len(payload), head))
        tensor, offset = struct.unpack(LOAD_FMT, payload[:head])
        data = memoryview(payload)[head:]
        target = self.tensor(tensor, offset, len(data), (TENSOR_Q, TENSOR_K, TENSOR_VT))
        memoryview(target)[offset:offset + len(data)] = data
        return bytes((OK,))

    def read(self, payload):
        if len(payload) != struct.calcsize(READ_FMT):
            raise Refused(E_PAYLOAD, "READ payload of %d bytes; expected %d" % (len(payload),
                                                                                struct.calcsize(READ_FMT)))
        tensor, offset, count = struct.unpack(READ_FMT, payload)
        if count > MAX_DATA:
            raise Refused(E_PAYLOAD, "READ of %d bytes; allowed: 0..%d" % (count, MAX_DATA))
        source = self.tensor(tensor, offset, count, (TENSOR_Q, TENSOR_K, TENSOR_VT, TENSOR_O))
        return bytes((OK,)) + bytes(memoryview(source)[offset:offset + count])

    def run(self, payload):
        if len(payload) != struct.calcsize(RUN_FMT):
            raise Refused(E_PAYLOAD, "RUN payload of %d bytes; expected %d" % (len(payload),
                                                                               struct.calcsize(RUN_FMT)))
        row0, nrows, repeat = struct.unpack(RUN_FMT, payload)
        seq, dim, causal, bc, mult, shift, rows, keys = self.ready("RUN", False)
        if not 1 <= nrows <= rows or not 1 <= repeat <= REPEAT_MAX:
            raise Refused(E_PAYLOAD, "nrows=%d repeat=%d; allowed: nrows 1..%d, repeat 1..%d"
                          % (nrows, repeat, rows, REPEAT_MAX))
        q = memoryview(self.tensors[TENSOR_Q])[:2 * nrows * dim]
        o = memoryview(self.tensors[TENSOR_O])[:2 * nrows * dim]
        k, vt = self.tensors[TENSOR_K], self.tensors[TENSOR_VT]
        cycles = []
        for _ in range(repeat):
            try:
                took = self.kernel.attention(q, k, vt, o, seq, dim, causal, bc, mult, shift, row0)
            except ValueError as exc:
                raise Refused(E_KERNEL, str(exc))
            cycles.append(NO_CYCLES if took is None else took & 0xFFFFFFFF)
        return self.ran(cycles)

    def stream(self, payload):
        if len(payload) != struct.calcsize(STREAM_FMT):
            raise Refused(E_PAYLOAD, "STREAM payload of %d bytes; expected %d" % (len(payload),
                                                                                  struct.calcsize(STREAM_FMT)))
        row0, nrows, key0, nkeys = struct.unpack(STREAM_FMT, payload)
        seq, dim, causal, bc, mult, shift, rows, keys = self.ready("STREAM", True)
        if not 1 <= nrows <= rows or not 1 <= nkeys <= keys:
            raise Refused(E_PAYLOAD,
                          "nrows=%d nkeys=%d; allowed: nrows 1..%d, nkeys 1..%d" % (nrows, nkeys, rows, keys))
        q = memoryview(self.tensors[TENSOR_Q])[:2 * nrows * dim]
        o = memoryview(self.tensors[TENSOR_O])[:2 * nrows * dim]
        k = memoryview(self.tensors[TENSOR_K])[:2 * nkeys * dim]
        vt = memoryview(self.tensors[TENSOR_VT])[:2 * nkeys * dim]
        state = memoryview(self.tensors[STATE_SLOT])[:self.kernel.state_bytes(dim, nrows)]
        try:
            took = self.kernel.stream(q, k, vt, o, state, seq, dim, causal, bc, mult, shift, row0, key0)
        except ValueError as exc:
            raise Refused(E_KERNEL, str(exc))
        return self.ran([NO_CYCLES if took is None else took & 0xFFFFFFFF])

    def bye(self, payload):
        self.running = False
        return bytes((OK,))

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

    def ran(self, cycles):
        # the reply to RUN or STREAM: the sensors, then each call's cycles
        temp, vdda = diagnostics()
        return struct.pack(RUN_REPLY_FMT, OK, temp, vdda) + struct.pack("<%dI" % len(cycles), *cycles)

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
        self.tensors = [None, None, None, None, None]
        self.problem = None
        gc.collect()


def short_text(text):
    data = text.encode()[:255]
    return bytes((len(data),)) + data


def clock_hz():
    try:
        import machine
        return machine.freq()[0] if isinstance(machine.freq(), tuple) else machine.freq()
    except (ImportError, AttributeError):
        return 0


def diagnostics():
    # (temp_milli_c, vdda_milli_v) from the internal ADC channels; (NO_TEMP, 0) where they cannot be read: a
    # finished RUN is never lost to its diagnostics
    try:
        import pyb
        adc = pyb.ADCAll(12, 0x70000)
        return int(adc.read_core_temp() * 1000), int(adc.read_vref() * 1000)
    except Exception:  # noqa: BLE001 - no pyb, no ADCAll, or an ADC error
        return NO_TEMP, 0


def load_kernel():
    # (module, "") or (None, why): an incompatible q15attn.mpy raises ValueError, not ImportError
    try:
        import q15attn
        return q15attn, ""
    except Exception as exc:  # noqa: BLE001 - whatever stops the import, the server still starts and says why
        return None, "%s: %s" % (type(exc).__name__, exc)


def hold_back(on):
    # RTS flow control on the USB VCP (pyb.USB_VCP.init(flow=...)): with it on, a full receive buffer makes the USB
    # host wait; off (the REPL's default), bytes that do not fit are dropped. True when it is on and the host can
    # only be on that VCP (no REPL on a UART beside it, pyb.repl_uart() None); False where it cannot be said.
    try:
        import pyb
        pyb.USB_VCP().init(flow=pyb.USB_VCP.RTS if on else 0)
        return on and pyb.repl_uart() is None
    except Exception:  # noqa: BLE001 - no pyb, no USB VCP, or firmware without flow control: stop-and-wait
        return False


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
    found, why = (kernel, "") if kernel is not None else load_kernel()
    window = WINDOW if hold_back(True) else 1
    active = Server(rx or sys.stdin.buffer, tx or sys.stdout.buffer, found, why, window)
    if micropython is not None:
        micropython.kbd_intr(-1)
    return active


def end():
    # the line back to the REPL
    global active
    if micropython is not None:
        micropython.kbd_intr(3)
    hold_back(False)
    active = None
