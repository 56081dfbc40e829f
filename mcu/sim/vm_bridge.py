"""The Python side of the twin VM's /dev/twin (mcu/sim/vm/board/_twin_bridge.py): what the WebAssembly port cannot
do itself. `q15attn`'s calls run the Cortex-M4 build of the kernel in the emulator (mcu/sim/q15module.py, with the
binding's argument checks and messages; cycles as the emulator counts them, advancing the modelled clock and
heating the modelled die), `crc16` and `cobs_encode` run there too, and `machine.freq()`, `machine.mem8/16/32` and
`pyb.ADCAll` reach the modelled peripherals (mcu/sim/peripherals.py). The VM also says here when its frame server
takes the line and leaves it (`serving`: the line faults of --faults apply then).

Wire (one request at a time): a header of 23 int32 (op, ten int arguments, the byte lengths of up to six
buffers and their addresses in the VM's memory), the buffers; the reply (status, value, n): status 0 with the
buffers the op fills, else n bytes of the message of the error ERRORS[status] (FAILED: any other error here, a
RuntimeError in the VM). A buffer of length 0 keeps its place
(an empty oshift is the kernel's to refuse, not a reason to read the state as oshift).
"""

from __future__ import annotations

import socket
import struct

from mcu.sim.peripherals import Peripherals

(HELLO, STATE_BYTES, ATTENTION, STREAM, CLOCK, TEMP_MILLI_C, VDDA_MILLI_V, CRC16, COBS, SERVING, MEM_READ,
 MEM_WRITE) = range(12)
#: The most buffers a call sends: q, k, vt, o, oshift and state (q15attn.stream).
BUFFERS = 6
HEADER = struct.Struct(f"<{11 + 2 * BUFFERS}i")
REPLY = struct.Struct("<iIi")
ERRORS = {ValueError: 1, TypeError: 2, OverflowError: 3}
#: The status of any other failure on this side (the VM raises RuntimeError): answered, so the VM never waits.
FAILED = 4
#: Heap a native q15attn.mpy's code takes on a board (a natmod's code is copied into the GC heap): mpy_ld's "text
#: size: 14328" for q15attn.mpy version 4 (ARCH armv7emsp, built against MicroPython v1.27.0: `make -C mcu/native mpy
#: MPY_DIR=<micropython checkout>`; version 3's was 13080), rounded up to the GC's 16-byte blocks.
NATMOD_BYTES = 14_336


class Bridge:
    """Serves one VM's /dev/twin on `line` until it closes; `calls` counts the kernel calls."""

    def __init__(self, line: socket.socket, hardware: Peripherals, natmod_bytes: int = NATMOD_BYTES):
        self.line = line
        self.hardware = hardware
        self.natmod_bytes = natmod_bytes
        self.calls = 0
        self.serving = False
        self._module = None

    def module(self):
        if self._module is None:
            from mcu.sim.q15module import make_module

            self._module = make_module(self.hardware.clock.hz, self.hardware.add_cycles)
        return self._module

    def receive(self, count: int) -> bytes | None:
        data = bytearray()
        while len(data) < count:
            piece = self.line.recv(count - len(data))
            if not piece:
                return None
            data += piece
        return bytes(data)

    def serve(self) -> None:
        while (header := self.receive(HEADER.size)) is not None:
            op, *values = HEADER.unpack(header)
            args, lengths, addresses = values[:10], values[10:10 + BUFFERS], values[10 + BUFFERS:]
            buffers = []
            for n in lengths:
                data = self.receive(n) if n > 0 else b""
                if data is None:
                    return
                buffers.append(bytearray(data))
            try:
                value, data = self.answer(op, args, buffers, [a & 0xFFFFFFFF for a in addresses[:len(buffers)]])
            except Exception as exc:  # noqa: BLE001 - every request gets its reply, or the VM waits for ever
                known = next((code for kind, code in ERRORS.items() if isinstance(exc, kind)), None)
                message = (str(exc) if known else f"kbench twin: the bridge failed: {type(exc).__name__}: {exc}")
                encoded = message.encode()
                self.line.sendall(REPLY.pack(known or FAILED, 0, len(encoded)) + encoded)
                continue
            self.line.sendall(REPLY.pack(0, value, 0) + data)

    def answer(self, op: int, args: list[int], buffers: list[bytearray],
               addresses: list[int] | None = None) -> tuple[int, bytes]:
        """(value, the bytes of the buffers the op fills) for one request; `addresses`: where the buffers lie in the
        VM's memory (a kernel's buffers that overlap there overlap in the emulator's memory too)."""
        if op == HELLO:  # q15attn's import: the emulator starts then, as the module loads on a board
            self.module()
            return self.natmod_bytes, b""
        if op == SERVING:
            self.serving = bool(args[0])
            return 0, b""
        if op == CLOCK:
            return self.hardware.clock.hz, b""
        if op == TEMP_MILLI_C:
            return int(self.hardware.adc.core_temp() * 1000), b""
        if op == VDDA_MILLI_V:
            return int(self.hardware.adc.vref() * 1000), b""
        if op == MEM_READ:
            return self.hardware.memory.read(args[0] & 0xFFFFFFFF, args[1]), b""
        if op == MEM_WRITE:
            self.hardware.memory.write(args[0] & 0xFFFFFFFF, args[1], args[2] & 0xFFFFFFFF)
            return 0, b""
        module = self.module()
        if op == STATE_BYTES:
            return module.state_bytes(args[0], args[1]), b""
        if op == ATTENTION:
            q, k, vt, o, oshift = (buffers + [bytearray()] * 5)[:5]
            self.calls += 1
            # the emulator's wall time is not the board's: the clock advances by the cycles the kernel reports
            cycles = self.hardware.clock.excluding(module.attention)(q, k, vt, o, oshift, *args[:7],
                                                                     at=addresses and addresses[:5])
            return cycles, bytes(o) + bytes(oshift)
        if op == STREAM:
            q, k, vt, o, oshift, state = (buffers + [bytearray()] * 6)[:6]
            self.calls += 1
            cycles = self.hardware.clock.excluding(module.stream)(q, k, vt, o, oshift, state, *args[:8],
                                                                  at=addresses)
            return cycles, bytes(o) + bytes(oshift) + bytes(state)
        if op == CRC16:
            data = buffers[0] if buffers else bytearray()
            return module.crc16(data, *args[:3]), b""
        if op == COBS:
            at, start, end, out_size = args[:4]
            data = buffers[0] if buffers else bytearray()
            out = bytearray(out_size)
            stop = module.cobs_encode(out, at, data, start, end)
            return stop - at, bytes(out[at:stop])
        raise ValueError(f"op={op} is not a twin bridge operation; allowed: 0..{MEM_WRITE}")
