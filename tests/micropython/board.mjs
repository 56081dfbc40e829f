// A MicroPython board in the MicroPython WebAssembly port (npm @micropython/micropython-webassembly-pyscript), for
// tests of the board code against a real VM and a real heap of the board's size (tests/helpers/wasm_board.py):
//   node board.mjs <package dir> <files dir> [heap bytes (102400)] [q15 fd (3)]
// fd 0 and 1 are the board's serial line (a pty's master side: the host's link code opens the slave end), the q15 fd
// the q15attn bridge (tests/micropython/q15attn.py's device /dev/q15, passed through byte for byte), fd 2 diagnostics.
//
// - The heap: the port's GC heap is `heapsize`, but the build adds heap areas from the C allocator when it is full
//   (MICROPY_GC_SPLIT_HEAP_AUTO). After loading, the C allocator is eaten in halving block sizes and one 64 KB block
//   is given back for the JS glue: any growth needs at least the current heap, fails, and the VM raises a real
//   MemoryError. Emscripten says "Cannot enlarge memory" on stderr each time growth fails: those lines are dropped.
// - The line: bytes from fd 0 go to the REPL (replProcessChar, as a board's UART interrupt feeds it) and to
//   sys.stdin (a blocking read, which first writes out what the VM printed); what the VM prints goes to fd 1.
// - The frame server: this port collects garbage only when control returns to JS, never inside a call into the VM.
//   The boot code below makes kbench_server.serve() start the server (begin, announce) and return; once the REPL
//   command has returned, this loop calls Server.step() one line read at a time, with a collection after each, then
//   kbench_server.end(), and only then lets the REPL's end of command (\x04 \x04 >) out, as a board's serve() would.
import { closeSync, readdirSync, readFileSync, readSync, writeSync } from "fs";
import { join } from "path";
import { pathToFileURL } from "url";

const [, , packageDir, filesDir, heapArg = "102400", q15Arg = "3"] = process.argv;
const HEAP = parseInt(heapArg, 10);
const Q15_FD = parseInt(q15Arg, 10);
const KEPT_FOR_JS = 64 * 1024; // C heap left to the JS glue (runPython's code buffer, proxies)

const quietStderr = process.stderr.write.bind(process.stderr);
process.stderr.write = (chunk, ...rest) => /Cannot enlarge memory/.test(String(chunk)) || quietStderr(chunk, ...rest);

// -- the serial line ---------------------------------------------------------------------------------------------

let out = Buffer.alloc(1 << 16);
let outLength = 0;
let held = null; // the REPL's end of command while the frame server runs (an array of bytes), else null

function emit(bytes) {
  for (const byte of bytes) {
    if (held !== null) {
      held.push(byte);
      continue;
    }
    if (outLength === out.length) {
      const bigger = Buffer.alloc(out.length * 2);
      out.copy(bigger);
      out = bigger;
    }
    out[outLength++] = byte;
  }
}

function pause() {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // 1 ms, for a descriptor that said EAGAIN
}

function flush() {
  let done = 0;
  while (done < outLength) {
    try {
      done += writeSync(1, out, done, outLength - done);
    } catch (error) {
      if (error.code !== "EAGAIN") throw error;
      pause();
    }
  }
  outLength = 0;
}

const input = Buffer.alloc(4096);
let inputAt = 0;
let inputLength = 0;
let ended = false;

const parent = process.ppid;

function orphaned() {
  // the harness that started this board has died (it holds the pty's slave end and the q15 bridge's other end)
  return process.ppid !== parent;
}

function readByte() {
  // the next byte of the line, blocking (what the VM printed goes out first); null once the line is gone
  while (inputAt >= inputLength) {
    if (ended || orphaned()) return null;
    flush();
    try {
      inputLength = readSync(0, input, 0, input.length, null);
      inputAt = 0;
      if (inputLength === 0) ended = true;
    } catch (error) {
      if (error.code === "EAGAIN") pause();
      else if (error.code === "EIO") ended = true; // no process holds the pty's slave end any more
      else throw error;
    }
  }
  return input[inputAt++];
}

// -- the q15attn bridge (/dev/q15) -------------------------------------------------------------------------------

function bridge(read, buffer, offset, length) {
  const view = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
  let done = 0;
  while (done < length) {
    const n = read ? readSync(Q15_FD, view, done, length - done, null) : writeSync(Q15_FD, view, done, length - done);
    if (n === 0) throw new Error("the q15attn bridge closed");
    done += n;
  }
  return length;
}

// -- the VM ------------------------------------------------------------------------------------------------------

const { loadMicroPython } = await import(pathToFileURL(join(packageDir, "micropython.mjs")).href);
const mp = await loadMicroPython({
  heapsize: HEAP, linebuffer: false, stdin: readByte, stdout: emit, stderr: emit, // one line, as a board's UART
});

const M = mp._module;
let kept = 0;
for (let size = 1 << 30; size >= 256;) {
  const block = M._malloc(size);
  if (!block) size >>= 1;
  else if (size === KEPT_FOR_JS && !kept) kept = block;
}
if (kept) M._free(kept);

for (const name of readdirSync(filesDir)) mp.FS.writeFile("/" + name, readFileSync(join(filesDir, name)));
const device = mp.FS.makedev(64, 0);
mp.FS.registerDevice(device, {
  open: () => {},
  close: () => {},
  read: (stream, buffer, offset, length) => bridge(true, buffer, offset, length),
  write: (stream, buffer, offset, length) => bridge(false, buffer, offset, length),
});
mp.FS.mkdev("/dev/q15", device);

let serving = false;
globalThis.kbenchServing = () => {
  serving = true;
  held = [];
};

mp.runPython(`
import builtins as _builtins
import gc as _gc
import sys as _sys
import js as _js

_sys.path.append("/")
_SPLIT = 1 << 27  # this port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure


class _BoardGc:
    # gc as a board has it: mem_free without the port's split-heap allowance (the heap cannot grow: capped)
    collect = staticmethod(_gc.collect)
    mem_alloc = staticmethod(_gc.mem_alloc)
    enable = staticmethod(_gc.enable)
    disable = staticmethod(_gc.disable)
    isenabled = staticmethod(_gc.isenabled)
    threshold = staticmethod(_gc.threshold)

    @staticmethod
    def mem_free():
        return _gc.mem_free() - _SPLIT


_board_gc = _BoardGc()
_import = _builtins.__import__
_serving = [None]


def _stepped_serve(module, rx=None, tx=None, kernel=None):
    try:
        _import("kbench_prelude").run()  # a test's set-up of the heap (WasmBoard(prelude=...)), just before the server
    except ImportError:
        pass
    server = module.begin(rx, tx, kernel)
    _serving[0] = module
    server.announce()
    _js.kbenchServing()


def _kbench_import(name, *rest):
    if name == "gc":
        return _board_gc
    module = _import(name, *rest)
    if name == "kbench_server" and hasattr(module, "begin") and not hasattr(module, "_stepped"):
        module._stepped = True
        module.serve = lambda rx=None, tx=None, kernel=None: _stepped_serve(module, rx, tx, kernel)
    return module


_builtins.__import__ = _kbench_import


def _kbench_step():
    module = _serving[0]
    try:
        going = module.active.step()
    except BaseException:
        module.end()
        _serving[0] = None
        raise
    finally:
        _gc.collect()  # runs once this call has returned to JS
    if not going:
        module.end()
        _serving[0] = None
    return 1 if going else 0
`);
const step = mp.globals.get("_kbench_step");

function serve() {
  // the frame server a REPL command started, one line read per call; then the REPL's end of command
  const tail = held;
  held = null;
  serving = false;
  let failure = "";
  try {
    while (step() && !orphaned()) {}
  } catch (error) {
    failure = String(error.message || error);
  }
  if (failure) emit(Buffer.from("\x04" + failure.replace(/\x04/g, "") + "\r\n\x04>", "latin1"));
  else emit(tail);
  flush();
}

// Raw-paste (Ctrl-E A Ctrl-A in the raw REPL) is refused as a board without it refuses it (R \x00): this port's
// raw-paste reads stdin in a loop of its own that no JS callback feeds; mpremote then writes the command plainly.
const RAW_PASTE = [0x05, 0x41, 0x01];

mp.replInit();
for (;;) {
  const c = readByte();
  if (c === null) break;
  if (c === RAW_PASTE[0]) {
    const next = [c];
    while (next.length < RAW_PASTE.length && next[next.length - 1] === RAW_PASTE[next.length - 1]) {
      const more = readByte();
      if (more === null) break;
      next.push(more);
    }
    if (next.every((byte, i) => byte === RAW_PASTE[i]) && next.length === RAW_PASTE.length) emit([0x52, 0x00]);
    else for (const byte of next) mp.replProcessChar(byte);
  } else mp.replProcessChar(c);
  if (serving) serve();
}
flush();
closeSync(Q15_FD);
process.exit(0);
