// q15attn's crc16 and cobs_encode for the twin's VM, at C speed (mcu/native/kbench_frame.c computes the same bytes):
// the device /dev/twinjs of mcu/sim/vm/twin.mjs.
// The stand-in writes a request of int32s (op, then addresses in the VM's memory and lengths, its arguments already
// checked) to /dev/twinjs; the device's write sees the VM's whole memory, computes in place and leaves the result
// in the request's first word. No call leaves Node.

const FRAMING_CRC16 = 1, FRAMING_COBS = 2;
const CRC_TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xFFFF : (crc << 1) & 0xFFFF;
  CRC_TABLE[i] = crc;
}

export function framing(buffer, offset, length) {
  const memory = new Uint8Array(buffer.buffer);
  const words = new Int32Array(buffer.buffer, buffer.byteOffset + offset, length >> 2);
  const op = words[0];
  if (op === FRAMING_CRC16) { // crc, address, n
    let crc = words[1];
    const at = words[2], end = at + words[3];
    for (let i = at; i < end; i++) crc = ((crc << 8) & 0xFFFF) ^ CRC_TABLE[((crc >> 8) ^ memory[i]) & 0xFF];
    words[0] = crc;
  } else if (op === FRAMING_COBS) { // out address, data address, n: the encoded length back
    const out = words[1], n = words[3];
    const data = memory.slice(words[2], words[2] + n); // copied first: in place is safe
    // a block ends at a zero (a code below 0xFF) or after 254 data bytes (0xFF); the next starts only when a byte
    // comes for it, as kbench_frame.c does
    let code = out, o = out + 1, run = 1;
    for (let i = 0; i < n; i++) {
      const byte = data[i];
      if (run === 0xFF) {
        memory[code] = run;
        code = o++;
        run = 1;
      }
      if (byte === 0) {
        memory[code] = run;
        code = o++;
        run = 1;
      } else {
        memory[o++] = byte;
        run += 1;
      }
    }
    memory[code] = run;
    words[0] = o - out;
  } else words[0] = -1;
  return length;
}
