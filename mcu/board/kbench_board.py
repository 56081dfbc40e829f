# kbench_board: what the frame server (kbench_server.py) asks of the board itself, in MicroPython: the heap (its
# largest block, and the one block SETUP's tensors live in), the core clock, the internal sensors, the q15attn
# import and the USB VCP's flow control. Each answers something sensible where the port lacks the hardware (the
# tests under CPython, the twin). Deployed as kbench_board.mpy beside the server.

NO_TEMP = -(1 << 31)  # temp_milli_c when the board has no temperature sensor


def carve(rows, keys, dim, state):
    # Q, K, V^T, O, O's row shifts (a byte per row) and a streamed head's state (None if not streamed) as views of
    # one block of the heap, the state first (a bytearray's storage is 8-byte aligned, as the kernel wants the
    # state) and the shifts last (the int16 tensors stay 2-byte aligned); where no block is that large (a fragmented
    # heap), each in a block of its own. MemoryError if even those do not fit.
    sizes = (2 * rows * dim, 2 * keys * dim, 2 * keys * dim, 2 * rows * dim, rows)
    try:
        arena = memoryview(bytearray(state + sum(sizes)))
    except MemoryError:
        return [bytearray(n) for n in sizes] + [bytearray(state) if state else None]
    parts, at = [], state
    for n in sizes:
        parts.append(arena[at:at + n])
        at += n
    parts.append(arena[:state] if state else None)
    return parts


def largest_block(free):
    # The largest bytearray the heap can give now (to 16 bytes, a GC block), by trying: gc.mem_free() counts every
    # free block, but a tensor needs one contiguous run of them. Each try is dropped at once; a failed one makes
    # MicroPython collect first, so garbage does not hide room.
    low, high = 0, free + 1
    while high - low > 16:
        mid = (low + high) // 2
        try:
            block = bytearray(mid)
            del block
            low = mid
        except MemoryError:
            high = mid
    return low


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
