"""q15attn's refusals as modq15attn.c makes them, one line each (the exception's type and message), for the twin's
stand-in (tests/sim/test_sim_robust.py, in the VM) and the binding itself (tests/mcu/test_q15_kernel.py, a natmod
under MicroPython's unix port where a MicroPython tree is given): HEAD's names (a 17 x 8 head) are in scope."""

#: a head with data in it (17 x 8), its reference call's cycles, values and shifts, and the same call again into fresh
#: outputs (the shifts preset to 0xEE): after a refused or failed call the bridge must give the reference's figures
HEAD = ("import q15attn, array\nseq, dim = 17, 8\n"
        "q = array.array('h', [(i * 37 + 11) % 2001 - 1000 for i in range(136)])\n"
        "k = array.array('h', [(i * 53 + 7) % 2001 - 1000 for i in range(136)])\n"
        "vt = array.array('h', [(i * 29 + 3) % 2001 - 1000 for i in range(136)])\n"
        "o = array.array('h', bytes(272))\ng = bytearray(17)\nst = bytearray(q15attn.state_bytes(8, 17))\n"
        "ref = q15attn.attention(q, k, vt, o, g, 17, 8, 0, 4, 16714, 43)\nref_o, ref_g = bytes(o), bytes(g)\n"
        "print(ref > 0, 0xEE not in ref_g)")
AGAIN = ("o2 = array.array('h', bytes(272))\ng2 = bytearray(b'\\xee' * 17)\n"
         "c = q15attn.attention(q, k, vt, o2, g2, 17, 8, 0, 4, 16714, 43)\n"
         "print(c == ref, bytes(o2) == ref_o, bytes(g2) == ref_g)")


#: output buffers that are read-only: the binding refuses them before anything runs
READ_ONLY = [
    ("q15attn.attention(q, k, vt, o, memoryview(b'\\x09' * 17), 17, 8, 0, 4, 16714, 43)",
     b"TypeError: oshift is memoryview; allowed: a writable bytearray or array('B'), a byte per row"),
    ("q15attn.attention(q, k, vt, memoryview(bytes(272)), g, 17, 8, 0, 4, 16714, 43)",
     b"TypeError: o is memoryview; allowed: a writable array('h') or bytearray"),
    ("q15attn.stream(q, k, vt, o, memoryview(b'\\x09' * 17), st, 17, 8, 0, 4, 16714, 43, 0, 0)",
     b"TypeError: oshift is memoryview; allowed: a writable bytearray or array('B'), a byte per row"),
    ("q15attn.stream(q, k, vt, o, g, memoryview(bytes(len(st))), 17, 8, 0, 4, 16714, 43, 0, 0)",
     b"TypeError: state is memoryview; allowed: a bytearray of state_bytes(dim, rows)"),
]

#: the binding's order (modq15attn.c): the buffers q, k, vt, o, oshift (state) as buffers, each raw int16 bytearray
#: on a 2-byte boundary; the ints, each as int32 (OverflowError naming it and its range), row0 and key0 within
#: 0..32767; then the kernel: the typecodes in the same order, the ranges, the lengths
ORDER = [
    ("attention(q, k, vt, o, g, 17, 8, 0, 4, 16714, 43, 2**40)",
     b"OverflowError: row0=1099511627776 is out of range; allowed: 0..32767"),
    ("attention(q, k, vt, o, g, 17, 8, 0, 4, 16714, 43, 40000)",
     b"ValueError: row0=40000 is out of range; allowed: 0..32767"),
    ("attention(q, k, vt, o, g, 2**31, 8, 0, 4, 16714, 43)",
     b"OverflowError: seq=2147483648 is out of range; allowed: 1..32768"),
    ("attention(q, k, vt, o, g, 17, 8, 0, 4, -2**31 - 1, 43)",
     b"OverflowError: score_mult=-2147483649 is out of range; allowed: 16384..32767"),
    ("attention(q, k, vt, array.array('i', bytes(544)), g, 17, 8, 0, 4, 16714, 43)",
     b"ValueError: o has typecode 'i'; allowed: 'h' (array('h'), int16)"),
    ("attention(q, k, vt, o, memoryview(array.array('h', bytes(34))), 17, 8, 0, 4, 16714, 43)",
     b"ValueError: oshift has typecode 'h'; allowed: 'B' (bytearray or array('B'), uint8)"),
    ("attention(memoryview(array.array('f', bytes(544))), k, vt, o, g, 17, 8, 0, 4, 16714, 43)",
     b"ValueError: q has typecode 'f'; allowed: 'h' (array('h'), int16)"),
    ("attention(q, memoryview(array.array('H', bytes(272))), vt, o, g, 17, 8, 0, 4, 16714, 43)",
     b"ValueError: k has typecode 'H'; allowed: 'h' (array('h'), int16)"),
    ("attention(None, k, vt, o, g, 2**40, 8, 0, 4, 16714, 43)",
     b"TypeError: q is NoneType; allowed: array('h') or bytearray"),
    ("attention(q, k, vt, bytes(272), None, 17, 8, 0, 4, 16714, 43)",
     b"TypeError: o is bytes; allowed: a writable array('h') or bytearray"),
    ("attention(q, k, vt, o, None, 17.0, 8, 0, 4, 16714, 43)",
     b"TypeError: oshift is NoneType; allowed: a writable bytearray or array('B'), a byte per row"),
    ("attention(array.array('f', bytes(544)), k, vt, o, g, 2**40, 8, 0, 4, 16714, 43)",
     b"OverflowError: seq=1099511627776 is out of range; allowed: 1..32768"),
    ("attention(array.array('f', bytes(544)), k, vt, o, g, 0, 8, 0, 4, 16714, 43)",
     b"ValueError: q has typecode 'f'; allowed: 'h' (array('h'), int16)"),
    ("attention(q, array.array('i', bytes(544)), vt, array.array('b', bytes(136)), g, 17, 8, 0, 4, 16714, 43)",
     b"ValueError: k has typecode 'i'; allowed: 'h' (array('h'), int16)"),
    ("attention(q, k, vt, o, g, 0, 8, 0, 4, 16714, 43)", b"ValueError: seq=0 is out of range; allowed: 1..32768"),
    ("attention(memoryview(bytearray(273))[1:], k, vt, o, g, 2**40, 8, 0, 4, 16714, 43)",
     b"ValueError: q starts at an odd address; allowed: a 2-byte boundary (a bytearray, or a memoryview of one at an "
     b"even offset)"),
    ("stream(q, k, vt, o, g, array.array('i', bytes(len(st))), 17, 8, 0, 4, 16714, 43, 0, 0)",
     b"ValueError: state has typecode 'i'; allowed: a bytearray of state_bytes(dim, rows)"),
    ("stream(q, k, vt, o, g, memoryview(bytearray(len(st) + 4))[4:], 17.5, 8, 0, 4, 16714, 43, 0, 0)",
     b"ValueError: state starts at an address = 4 mod 8; allowed: 0 mod 8 (a whole bytearray, or a memoryview of one "
     b"at a multiple of 8)"),
    ("stream(q, k, vt, o, g, st, 17, 8, 0, 4, 16714, 43, 0, 2**32)",
     b"OverflowError: key0=4294967296 is out of range; allowed: 0..32767"),
    ("stream(q, k, vt, o, memoryview(array.array('h', bytes(34))), st, 17, 8, 0, 4, 16714, 43, 0, 0)",
     b"ValueError: oshift has typecode 'h'; allowed: 'B' (bytearray or array('B'), uint8)"),
    ("state_bytes(2**40, 1)", b"OverflowError: dim=1099511627776 is out of range; allowed: 1..256"),
    ("state_bytes(8, 0)", b"ValueError: rows=0 is out of range; allowed: 1..32768"),
    ("crc16(g, 2**40, 0, -1)", b"OverflowError: crc=1099511627776 is out of range; allowed: 0..65535"),
]


#: the binding's one line for a caller of q15attn 3 (modq15attn.c shift_arg), % the int in oshift's place
OLD_CALLER = (b"TypeError: oshift=%s is an int: the caller predates q15attn 4 (contract v2 takes an oshift buffer "
              b"after o); allowed: a writable bytearray or array('B'), a byte per row; re-deploy the board code with "
              b"python -m mcu.deploy")


