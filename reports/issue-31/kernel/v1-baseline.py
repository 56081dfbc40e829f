"""The v1 kernel's modelled cycles on mcu.sim.bench's head (seeded N(0,1), one head, d 64, Bc 64, not causal): its
ELF built from 7cba990 (v1-baseline.txt says how), called with v1's q15attn_rows_timed (no oshift) in this
checkout's emulator; its output checked against the v1 division (host/q15.py at g = 0 is v1's, docs/q15.md §6)."""
import sys
from pathlib import Path

import numpy as np

import mcu.sim.q15emu as e
from host.problem import AttentionProblem
from host.q15 import Q15Params, StreamState, quantize, score_scale, round_shift, bit_length

e.SRAM_SIZE = 512 << 10
e.built = lambda target, path: Path("/tmp/v1/mcu/native/build") / path.name
seq, dim = int(sys.argv[1]), 64
q, k, v = AttentionProblem(seq=seq, dim=dim, causal=False).inputs()
(qq, sq), (kq, sk), (vq, _) = quantize(q), quantize(k), quantize(v)
qh, kh, vh = qq[0, 0], kq[0, 0], vq[0, 0]
params = Q15Params(seq, dim, False, 64, *score_scale(sq, sk, dim))
emulator = e.Q15Emulator()
cpu = emulator.cpu
values = (seq, dim, 0, 64, params.score_mult, params.score_shift)
buffers = [("h", np.ascontiguousarray(x, "<i2").tobytes()) for x in (qh, kh, vh.T)] + [("h", bytes(qh.nbytes))]
(p_addr, d_addr, n_addr, _), (q_addr, k_addr, vt_addr, o_addr) = emulator._place(values, buffers)
for address, (_, data) in zip((q_addr, k_addr, vt_addr), buffers):
    cpu.write(address, data)
status, _ = cpu.call("q15attn_rows_timed", p_addr, 0, seq, q_addr, k_addr, vt_addr, o_addr, n_addr)
cycles = int.from_bytes(cpu.read(n_addr, 4), "little")
out = np.frombuffer(cpu.read(o_addr, qh.nbytes), "<i2").reshape(seq, dim)
state = StreamState.start(qh, 0, params)
state.absorb(kh, vh, 0)
s = np.maximum(bit_length(state.l) - 16, 0)  # v1's division: g = 0
acc, l = round_shift(state.acc, s), round_shift(state.l, s)
v1 = np.clip(np.sign(acc) * ((np.abs(acc) + (l >> 1)) // l), -32768, 32767)
assert status == 0 and np.array_equal(out, v1), "the v1 ELF's output is not v1's division"
print(f"v1 kernel (7cba990), seq {seq} dim {dim} Bc 64 not causal: {cycles:,} DWT cycles, "
      f"{cycles / (2 * seq * seq * dim):.4f} cycles/MAC, output = v1's division")
