// The board twin's VM: MicroPython itself (the WebAssembly port, npm @micropython/micropython-webassembly-pyscript)
// under Node, with a GC heap of the board's size, its own REPL and the twin's root folder as its flash. Started by
// mcu/sim/vm_process.py, which owns the pty, the line faults and the Cortex-M4 emulator behind q15attn:
//
//   node twin.mjs <package dir> <root dir> <stand-ins dir> <heap bytes> <bridge fd> <attention fd> <mpy abi> <map fd>
//
// fd 0 and 1 are the board's serial line (pipes to the Python side), fd 2 diagnostics; the bridge fd carries the
// stand-in modules' calls (q15attn's kernel, the modelled peripherals: mcu/sim/vm/board/*.py) byte for byte; the
// attention fd (non-blocking) gets a byte each time the line carried Ctrl-C, so that code which computes without
// reading the line can be interrupted, as a UART interrupt would.
//
// What a board does and this port does not do itself, done here (docs/twin.md, "The VM"):
// - the heap: the port adds heap areas from the C allocator when its heap is full; that allocator is eaten at start
//   (halving block sizes, one 64 KB block given back for the JS glue), so the heap cannot grow: MemoryError is real.
//   The port collects garbage only when control returns to JS, never inside a call into the VM (it cannot scan its
//   own stack): between REPL commands, and between the frame server's reads (it is stepped from here).
// - soft reset (Ctrl-D at an empty raw REPL, or sys.exit): a fresh VM on the same flash, "MPY: soft reboot".
// - Ctrl-C while code runs: the interrupt character on the line schedules KeyboardInterrupt (the port never looks).
// - raw-paste (Ctrl-E A Ctrl-A): done here, then the command goes to the raw REPL (the port's own reads a stdin that
//   no JS callback feeds, and hangs).
// - the flash: the root folder through a file system of Node's fs calls, mounted at /flash (the port has MEMFS only).
import { closeSync, readSync, writeSync } from "fs";
import * as fs from "fs";
import { join } from "path";
import { pathToFileURL } from "url";
import { translateErrors } from "./errno.mjs";
import { framing } from "./framing.mjs";
import { hostFileSystem } from "./hostfs.mjs";

const [, , packageDir, rootDir, standinDir, heapArg, bridgeArg, attentionArg, mpyAbiArg = "7942", mapArg = "-1"] =
  process.argv;
const MAP_FD = parseInt(mapArg, 10); // the interrupt map goes out here at each boot (mcu/sim/vm_process.py)
const MPY_ABI = parseInt(mpyAbiArg, 10); // the sys.implementation._mpy the VM announces
const HEAP = parseInt(heapArg, 10);
// Heap given beyond HEAP for what the twin itself keeps in the VM (its boot code, the stand-ins of machine, pyb and
// the bridge, which on a board are in flash); a ballast then leaves board code exactly the free heap a plain VM of
// HEAP bytes has after boot.
const TWIN_HEAP = 32 * 1024;
const BRIDGE_FD = parseInt(bridgeArg, 10);
const ATTENTION_FD = parseInt(attentionArg, 10);
const KEPT_FOR_JS = 64 * 1024; // C heap left to the JS glue and the C library (runPython's code, opendir)
const FORCED_EXIT = 256; // pyexec's PYEXEC_FORCED_EXIT: Ctrl-D at an empty raw REPL line, or sys.exit()
const CTRL_C = 0x03;
const RAW_PASTE = [0x05, 0x41, 0x01];
const RAW_PASTE_WINDOW = 128;
const RAW_BANNER = "raw REPL; CTRL-B to exit\r\n>";
const STATIC_DATA_BYTES = 1 << 20; // the port's static data (its module tables among them) lies below this
const QSTR_NULL = 2; // MP_OBJ_NEW_QSTR(MP_QSTRnull): a key no import looks up
const ATTENTION_POLL_MS = 5;

const quietStderr = process.stderr.write.bind(process.stderr);
process.stderr.write = (chunk, ...rest) => /Cannot enlarge memory/.test(String(chunk)) || quietStderr(chunk, ...rest);

// -- the serial line ---------------------------------------------------------------------------------------------

let out = Buffer.alloc(1 << 16);
let outLength = 0;
let muted = false; // while a fresh VM boots: its banner is not the board's
let held = null; // the REPL's end of command while the frame server runs (an array of bytes), else null

let unsaid = []; // bytes the VM is about to print that the board would not
let binary = false; // the frame server holds the line: bytes go out as they are
let lastOut = 0;

function emit(bytes) {
  // what the VM prints: out at once while code runs (a board's UART sends as it prints), held while the frame server
  // runs (the REPL's end of command), dropped while a fresh VM boots
  if (muted) return;
  pollAttention();
  for (const byte of bytes) {
    if (unsaid.length && byte === unsaid[0]) { // the raw REPL's "OK", which raw-paste does not print
      unsaid = unsaid.slice(1);
      continue;
    }
    unsaid = [];
    if (held !== null) {
      held.push(byte);
      continue;
    }
    if (byte === 0x0A && lastOut !== 0x0D && !binary) put(0x0D); // the STM32 port's cooked output: \n as \r\n
    lastOut = byte;
    put(byte);
  }
  // what code prints goes out as it prints, as a board's UART sends it (code may compute for long after); the frame
  // server's replies go out when its step returns
  if (held === null && !binary) flush();
}

function put(byte) {
  if (outLength === out.length) {
    const bigger = Buffer.alloc(out.length * 2);
    out.copy(bigger);
    out = bigger;
  }
  out[outLength++] = byte;
}

function emitText(text) {
  emit(Buffer.from(text, "latin1"));
}

function pause() {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // 1 ms
}

function flush() {
  // everything printed so far, to the line (Node may have made the pipe non-blocking: EAGAIN waits, loses nothing)
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

function nextByte() {
  // the next byte of the line, blocking (what the VM printed goes out first); null once the line is gone
  while (inputAt >= inputLength) {
    if (ended) return null;
    flush();
    try {
      inputLength = readSync(0, input, 0, input.length, null);
      inputAt = 0;
      if (inputLength === 0) ended = true;
    } catch (error) {
      if (error.code === "EOF" || error.code === "EPIPE") ended = true;
      else if (error.code !== "EAGAIN" && error.code !== "EINTR") throw error;
    }
  }
  return input[inputAt++];
}

// -- Ctrl-C ------------------------------------------------------------------------------------------------------
// A board's UART interrupt decides at each byte's arrival: the interrupt character, while code runs with it set
// (pyexec sets it to Ctrl-C for a command; micropython.kbd_intr(-1) clears it), raises KeyboardInterrupt and is
// dropped; otherwise the byte is data. Here the Python side writes an attention byte for each Ctrl-C on the line
// before the byte itself, so the n-th attention byte stands for the n-th Ctrl-C: read (pollAttention) while code
// prints or the interrupt character is about to change, each gets its verdict then; a Ctrl-C the line delivers
// before its attention byte was read gets it on delivery.

let vm = null;
let announced = 0; // attention bytes read
let delivered = 0; // Ctrl-Cs read from the line
const verdicts = []; // for the Ctrl-Cs announced and not yet delivered: true if it interrupted the VM
let lastPoll = 0;
const attention = Buffer.alloc(256);

function executing() {
  return vm !== null && vm._module._mp_hal_get_interrupt_char() === CTRL_C;
}

let interrupts = 0; // Ctrl-Cs that interrupted the VM

function interrupt() {
  interrupts += 1;
  vm._module._mp_sched_keyboard_interrupt();
}

function absorbTaken() {
  // Ctrl-Cs whose attention byte the Python side took itself, having found the VM deaf to it (computing without
  // printing or reading, or in a kernel call): it wrote the pending KeyboardInterrupt into the VM's memory
  if (taken === 0) return;
  const count = vm._module.getValue(taken, "i32");
  for (; takenSeen < count; takenSeen++) {
    announced += 1;
    interrupts += 1;
    if (announced > delivered) verdicts.push(true);
  }
}

function pollAttention(now = false, idle = false) {
  // Ctrl-Cs the line carried since the last look, judged by the interrupt character as it is now (`idle`: no code
  // runs, and they are the REPL's)
  const time = performance.now();
  if (!now && time - lastPoll < ATTENTION_POLL_MS) return;
  lastPoll = time;
  absorbTaken();
  for (;;) {
    let n = 0;
    try {
      n = readSync(ATTENTION_FD, attention, 0, attention.length, null);
    } catch (error) {
      if (error.code !== "EAGAIN") throw error;
    }
    if (n <= 0) return;
    for (let i = 0; i < n; i++) {
      announced += 1;
      if (announced <= delivered) continue; // judged when the line delivered it
      const interrupts = !idle && executing();
      if (interrupts) interrupt();
      verdicts.push(interrupts);
    }
  }
}


function sleep(ms) {
  // time.sleep_ms on the board (mcu/sim/vm/board/_board_time.py): the port's own busy-waits without looking at the
  // line; here in 1 ms naps, each looking for a Ctrl-C, ended early by one (the VM raises it as the call returns)
  const end = performance.now() + ms;
  const before = interrupts;
  flush();
  while (performance.now() < end && interrupts === before) {
    pollAttention(true);
    pause();
  }
}

function lineByte(forCode) {
  // a byte for running code (`forCode`: its stdin) or for the REPL; a Ctrl-C that interrupts code is not delivered
  // (null for code: its read ends, and the KeyboardInterrupt is raised when it returns)
  for (;;) {
    const c = nextByte();
    if (c !== CTRL_C) return c;
    // its attention byte, written before it, is judged first; for code that has the interrupt character off (the
    // frame server's binary frames are full of 0x03) it is data whatever that byte says, and the byte is left to the
    // next look (it is counted as judged on delivery)
    if (!forCode || executing()) pollAttention(true, !forCode);
    delivered += 1;
    if (delivered <= announced) {
      if (verdicts.shift()) continue; // it interrupted the VM already
      return c;
    }
    if (!forCode || !executing()) return c;
    interrupt();
    return null;
  }
}

function lineRead(buffer, offset, length) {
  // the frame server's reads of the line (/dev/twinline, mcu/sim/vm/board/_twin_boot.py): sys.stdin.buffer's
  // readinto as the STM32 port does it (it waits for every byte asked for), in one call rather than one per byte;
  // a Ctrl-C that interrupts code ends the read there
  for (let i = 0; i < length; i++) {
    const c = lineByte(true);
    if (c === null) return i;
    buffer[offset + i] = c;
  }
  return length;
}

function stdin() {
  return lineByte(true);
}

// -- the bridge to the Python side (q15attn's kernel, the peripherals) --------------------------------------------

function bridge(read, buffer, offset, length) {
  const view = new Uint8Array(buffer.buffer, buffer.byteOffset + offset, length);
  let done = 0;
  while (done < length) {
    const n = read ? readSync(BRIDGE_FD, view, done, length - done, null)
      : writeSync(BRIDGE_FD, view, done, length - done);
    if (n === 0) throw new Error("the twin's bridge closed");
    done += n;
  }
  return length;
}

// -- the VM ------------------------------------------------------------------------------------------------------

translateErrors();
const { loadMicroPython } = await import(pathToFileURL(join(packageDir, "micropython.mjs")).href);
let serving = false;

function control(buffer, offset, length) {
  // /dev/twinctl, the boot code's calls to this side (mcu/sim/vm/board/_twin_boot.py): a letter each, a sleep's
  // milliseconds after its letter as 4 bytes little-endian; a read gives the interrupt character
  for (let i = offset; i < offset + length; i++) {
    const command = String.fromCharCode(buffer[i] & 0xFF);
    if (command === "B") binary = true; // from the frame server's HELLO on, the line carries frames: nothing cooked
    else if (command === "S") { // the frame server takes the line when the command returns
      serving = true;
      held = [];
    } else if (command === "I") pollAttention(true); // the interrupt character is about to change
    else if (command === "Z") {
      const ms = new Uint8Array(buffer.buffer, buffer.byteOffset + i + 1, 4); // the device's buffer is HEAP8
      sleep((ms[0] | (ms[1] << 8) | (ms[2] << 16) | (ms[3] << 24)) >>> 0);
      i += 4;
    }
  }
  return length;
}

function readOnlyOutsideTheFlash(FS) {
  // the VM's own folders (the port's MEMFS, in Node's memory) take nothing from board code: a board's files are in
  // /flash, and a file written elsewhere here would grow the twin without bound
  const folders = ["/"];
  for (let i = 0; i < folders.length; i++) {
    for (const name of FS.readdir(folders[i])) {
      const at = (folders[i] === "/" ? "" : folders[i]) + "/" + name;
      if (name === "." || name === ".." || at === "/flash" || at === "/proc" || at === "/dev") continue;
      const mode = FS.lstat(at).mode;
      if (FS.isDir(mode)) folders.push(at);
      else if (FS.isFile(mode)) FS.chmod(at, 0o444);
    }
  }
  for (const folder of folders) FS.chmod(folder, 0o555);
  FS.chmod("/dev", 0o555);
}

let taken = 0; // the VM's word where the Python side counts the Ctrl-Cs it judged (0: none yet)
let takenSeen = 0;

function staticWords(M) {
  const words = new Int32Array(STATIC_DATA_BYTES / 4);
  for (let i = 0; i < words.length; i++) words[i] = M.getValue(i * 4, "i32");
  return words;
}

function changedWords(M, before) {
  const changed = [];
  for (let i = 0; i < before.length; i++) {
    const now = M.getValue(i * 4, "i32");
    if (now !== before[i]) changed.push([i * 4, now]);
  }
  return changed;
}

function mapInterrupts(M, runPython) {
  // What a Ctrl-C writes in the VM (the words _mp_sched_keyboard_interrupt changes: the pending exception, the
  // scheduler's state) and where the interrupt character is (the word micropython.kbd_intr sets), found by
  // comparing the static data before and after, and a marker by which the Python side finds the VM's memory in
  // node's. Written to MAP_FD, a pipe board code has no way to; the Python side writes those words itself when a
  // Ctrl-C goes unread while code runs with the interrupt character set (mcu/sim/vm_process.py).
  const block = M._malloc(32);
  const marker = new Uint8Array(16);
  globalThis.crypto.getRandomValues(marker);
  for (let i = 0; i < 16; i++) M.setValue(block + i, marker[i], "i8");
  M.setValue(block + 16, 0, "i32");
  let before = staticWords(M);
  M._mp_sched_keyboard_interrupt();
  const writes = changedWords(M, before);
  for (const [at] of writes) M.setValue(at, before[at / 4], "i32");
  const character = [];
  for (const value of [5, 7, -1]) {
    before = staticWords(M);
    runPython(`import micropython\nmicropython.kbd_intr(${value})`);
    character.push(new Set(changedWords(M, before).filter(([, now]) => now === value).map(([at]) => at)));
  }
  // the same words for all three, and unchanged by other code (a stack slot that held the value is not)
  let found = [...character[0]].filter((at) => character[1].has(at) && character[2].has(at));
  runPython("import micropython\nmicropython.kbd_intr(9)");
  for (const code of ["x = [i * i for i in range(20)]", "import gc\ngc.collect()", "x = {'a': 1}\nx = str(x)"]) {
    runPython(code);
    found = found.filter((at) => M.getValue(at, "i32") === 9);
  }
  runPython("import micropython\nmicropython.kbd_intr(-1)");
  const [pendingAt, exception] = writes.find(([, value]) => value >= 1024 && value < STATIC_DATA_BYTES) ?? [];
  // not the port this was written for: a map of zeros
  const mapped = found.length === 1 && pendingAt && writes.length <= 2;
  const [schedAt, schedValue] = writes.find(([at]) => at !== pendingAt) ?? [0, 0];
  const record = Buffer.alloc(40); // mcu/sim/vm_process.py's MAP_RECORD
  const words = new Int32Array(marker.buffer);
  const ints = mapped ? [block, pendingAt, exception, schedAt, schedValue, found[0], words[0], words[1], words[2],
    block + 16] : [];
  ints.forEach((value, i) => record.writeInt32LE(value | 0, 4 * i));
  if (MAP_FD >= 0) writeSync(MAP_FD, record);
  taken = mapped ? block + 16 : 0;
  takenSeen = 0;
}

function cutFromTheHost(M, addresses) {
  // the port's js and jsffi modules reach Node's globalThis (process, and through it the host): board code must not.
  // Their entries in the builtin module table (a qstr key, then the module) get the key of no name (an import never
  // asks for it), and js's attribute delegation to globalThis (the module, then its function) is cut.
  for (let at = 0; at < STATIC_DATA_BYTES; at += 4) {
    const word = M.getValue(at, "i32") >>> 0;
    if (!addresses.includes(word)) continue;
    const before = M.getValue(at - 4, "i32") >>> 0;
    if ((before & 7) === 2) M.setValue(at - 4, QSTR_NULL, "i32");
    else M.setValue(at, 0, "i32");
  }
}

function capHeap(M) {
  // eat the C allocator so that the GC heap cannot grow beyond `heapsize`: the port adds a heap area of at least the
  // heap it has (py/gc.c, gc_try_add_heap), and what is left here, KEPT_FOR_JS in one block, is smaller than that
  const kept = M._malloc(KEPT_FOR_JS);
  for (let size = 1 << 30; size >= 16;) {
    if (!M._malloc(size)) size >>= 1;
  }
  if (kept) M._free(kept);
}

async function plainHeap() {
  // the free and allocated heap of the port's VM of HEAP bytes just after boot, collected: what board code has
  const plain = await loadMicroPython({ heapsize: HEAP, linebuffer: false, stdout: () => {}, stderr: () => {} });
  plain.runPython("import gc\ngc.collect()");
  plain.runPython("import gc\n_free = gc.mem_free() - (1 << 27)\n_alloc = gc.mem_alloc()");
  return [plain.globals.get("_free"), plain.globals.get("_alloc")];
}

const [boardFree, boardAlloc] = await plainHeap();

async function boot(raw, banner = false) {
  // a fresh VM on the flash: the board after reset, in the raw REPL when `raw`, in the friendly one with its banner
  // when `banner` (at power-on nobody listens yet: no banner, as a USB board's goes nowhere)
  muted = true;
  vm = null;
  const next = await loadMicroPython({ heapsize: HEAP + TWIN_HEAP, linebuffer: false, stdin, stdout: emit,
    stderr: emit });
  next.FS.mkdir("/flash");
  next.FS.mount(hostFileSystem(next.FS), { root: rootDir }, "/flash");
  next.FS.mkdir("/twin");
  next.FS.writeFile("/twin/_twin_config.py", `MPY_ABI = ${MPY_ABI}\n`);
  for (const name of fs.readdirSync(standinDir)) {
    if (name.endsWith(".py")) {
      next.FS.writeFile("/twin/" + name, fs.readFileSync(join(standinDir, name)));
    }
  }
  const device = next.FS.makedev(64, 0);
  next.FS.registerDevice(device, {
    open: () => {},
    close: () => {},
    read: (stream, buffer, offset, length) => bridge(true, buffer, offset, length),
    write: (stream, buffer, offset, length) => bridge(false, buffer, offset, length),
  });
  next.FS.mkdev("/dev/twin", device);
  const helpers = next.FS.makedev(64, 1);
  next.FS.registerDevice(helpers, {
    open: () => {},
    close: () => {},
    read: () => 0,
    write: (stream, buffer, offset, length) => framing(buffer, offset, length),
  });
  next.FS.mkdev("/dev/twinjs", helpers);
  const line = next.FS.makedev(64, 2);
  next.FS.registerDevice(line, {
    open: () => {},
    close: () => {},
    read: (stream, buffer, offset, length) => lineRead(buffer, offset, length),
    write: (stream, buffer, offset, length) => {
      emit(buffer.subarray(offset, offset + length));
      return length;
    },
  });
  next.FS.mkdev("/dev/twinline", line);
  const control_ = next.FS.makedev(64, 3);
  next.FS.registerDevice(control_, {
    open: () => {},
    close: () => {},
    read: (stream, buffer, offset, length) => { // the interrupt character as a byte (0xFF: none)
      if (length > 0) buffer[offset] = vm._module._mp_hal_get_interrupt_char() & 0xFF;
      return Math.min(length, 1);
    },
    write: (stream, buffer, offset, length) => control(buffer, offset, length),
  });
  next.FS.mkdev("/dev/twinctl", control_);
  readOnlyOutsideTheFlash(next.FS);
  capHeap(next._module);
  vm = next;
  // the boot code as a module of its own: board code's globals are a board's (only __name__)
  vm.runPython("import sys\nsys.path.insert(0, '/twin')\nimport _twin_boot");
  twin = vm.globals.get("_twin_boot"); // gone from sys.modules: board code cannot import it
  cutFromTheHost(vm._module, [...twin._kbench_js_modules()]);
  taken = 0;
  mapInterrupts(vm._module, (code) => twin._kbench_exec(code));
  twin._kbench_settle(boardFree, boardAlloc); // it ends with a collection, which runs as the call returns
  muted = false;
  twin._kbench_boot_files(raw); // boot.py, then main.py unless in the raw REPL, as the STM32 port runs them
  muted = raw || !banner; // the friendly REPL's banner and prompt, as a board prints them after its boot files
  vm.replInit();
  if (raw) vm.replProcessChar(0x01);
  muted = false;
}

let twin = null;

function serve() {
  // the frame server a REPL command started, one line read per call (a collection after each); then the REPL's end
  // of command
  const tail = held;
  held = null;
  serving = false;
  let failure = "";
  try {
    twin._kbench_begin(); // after the command's garbage is collected
    flush();
    while (twin._kbench_step()) flush(); // a reply goes out whole when the step that made it returns
  } catch (error) {
    failure = String(error.message || error);
  }
  pollAttention(true); // judged as the server left them
  twin._kbench_kbd_off(); // the REPL's between commands (pyexec's)
  binary = false;
  if (failure) emitText("\x04" + failure.replace(/\x04/g, "") + "\r\n\x04>");
  else emit(tail);
  flush();
}

let rawRepl = false; // the REPL the board is in: raw (Ctrl-A) or friendly (Ctrl-B); a soft reset keeps it

async function softReset() {
  emitText("MPY: soft reboot\r\n");
  await boot(rawRepl, true);
  if (rawRepl) emitText(RAW_BANNER);
}

function rawPaste() {
  // the host's command, taken with raw-paste's flow control, then run by the raw REPL as if typed
  emit([0x52, 0x01, RAW_PASTE_WINDOW & 0xFF, RAW_PASTE_WINDOW >> 8, 0x01]);
  const code = [];
  let credit = RAW_PASTE_WINDOW;
  for (;;) {
    const c = nextByte();
    if (c === null) return false;
    if (c === 0x04) break;
    if (c === CTRL_C) { // the host gave up: as the port, back at the raw REPL's prompt
      emitText("\r\n>");
      return true;
    }
    code.push(c);
    if (--credit === 0) {
      emit([0x01]);
      credit = RAW_PASTE_WINDOW;
    }
  }
  emit([0x04]);
  for (const c of code) vm.replProcessChar(c);
  unsaid = [0x4f, 0x4b]; // "OK"
  return vm.replProcessChar(0x04);
}

await boot(false);
flush();
let pending = [];
for (;;) {
  const c = pending.length ? pending.shift() : lineByte(false);
  if (c === null) break;
  let result = 0;
  if (c === RAW_PASTE[0] && pending.length === 0) {
    const next = [c];
    while (next.length < RAW_PASTE.length && next[next.length - 1] === RAW_PASTE[next.length - 1]) {
      const more = lineByte(false);
      if (more === null) break;
      next.push(more);
    }
    if (next.length === RAW_PASTE.length && next.every((byte, i) => byte === RAW_PASTE[i])) {
      result = rawPaste();
      if (result === false) break;
    } else {
      result = vm.replProcessChar(next[0]);
      pending = next.slice(1);
    }
  } else {
    pollAttention(true, true);
    result = vm.replProcessChar(c);
    if (c === 0x01 || c === 0x02) rawRepl = c === 0x01 || (rawRepl && c !== 0x02);
  }
  if (serving) serve();
  if (result === FORCED_EXIT) await softReset();
  flush();
}
flush();
closeSync(BRIDGE_FD);
process.exit(0);
