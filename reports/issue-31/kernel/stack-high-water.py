"""The kernel's stack use on the twin's emulated Cortex-M4: the 8 KB below the stack top painted with 0xA5, one
q15attn_rows_timed call (mcu.sim.q15emu, this checkout's ELF), then the lowest byte no longer 0xA5. Counted from the
stack top, so the call's stacked arguments (beyond r0-r3) are included."""

import mcu.sim.q15emu as e
from host.problem import AttentionProblem
from host.q15 import BC, Q15Params, quantize, score_scale

emulator = e.Q15Emulator()
top = emulator.cpu.stack_top
for seq, dim, causal in ((128, 64, False), (128, 64, True), (97, 59, False), (64, 65, False), (32, 256, False)):
    q, k, v = AttentionProblem(seq=seq, dim=dim, causal=causal).inputs()
    (qq, sq), (kq, sk), (vq, _) = quantize(q), quantize(k), quantize(v)
    params = Q15Params(seq, dim, causal, BC, *score_scale(sq, sk, dim))
    emulator.cpu.write(top - e.STACK_BYTES, b"\xa5" * e.STACK_BYTES)
    emulator.run(params, qq[0, 0], kq[0, 0], vq[0, 0])
    painted = emulator.cpu.read(top - e.STACK_BYTES, e.STACK_BYTES)
    used = e.STACK_BYTES - next(i for i, byte in enumerate(painted) if byte != 0xA5)
    print(f"seq {seq:4d} dim {dim:3d} {'causal    ' if causal else 'not causal'} Bc {BC}: {used:5d} bytes of stack"
          f" ({'two-row path' if dim <= 64 else 'one-row path, its accumulators a VLA of dim int64'})")
