// Error numbers for the twin's VM (mcu/sim/vm/twin.mjs): the errors the port's C library gets from Emscripten's system
// calls, numbered as Linux (and so MicroPython's errno module and messages) number them. translateErrors() wraps
// each system-call import of every wasm instantiated after it; each returns the translated number.

// Emscripten's errno numbers -> Linux's, which MicroPython's errno module and messages use
const LINUX_ERRNO = { 63: 1, 44: 2, 29: 5, 60: 6, 8: 9, 6: 11, 48: 12, 2: 13, 10: 16, 20: 17, 75: 18, 54: 20, 31: 21,
  28: 22, 33: 24, 51: 28, 69: 30, 37: 36, 55: 39, 32: 40 };

export function translateErrors() {
  const instantiate = WebAssembly.instantiate;
  WebAssembly.instantiate = (binary, imports) => {
    const linux = (code) => LINUX_ERRNO[code] ?? code;
    const translated = new Set(); // Emscripten gives env and wasi_snapshot_preview1 the same object: once each
    for (const space of Object.values(imports)) {
      if (translated.has(space)) continue;
      translated.add(space);
      for (const [name, call] of Object.entries(space)) {
        if (typeof call !== "function") continue;
        if (name.startsWith("__syscall_")) space[name] = (...args) => {
          const result = call(...args);
          return result < 0 ? -linux(-result) : result;
        };
        else if (name.startsWith("fd_")) space[name] = (...args) => linux(call(...args)); // WASI: the errno itself
      }
    }
    return instantiate(binary, imports);
  };
}
