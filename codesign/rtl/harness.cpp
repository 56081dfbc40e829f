// The testbench of codesign/rtl/compiled.py: runs heads through the head engine (codesign/rtl/head.py) compiled by
// Verilator from Amaranth's Verilog, exactly as codesign/rtl/sim.py's Python testbench does: load Q, K, V into the
// engine's memories, hold start for one clock, clock until done (or the head's hang limit), read O, the row shifts
// and the stage counters.
//
// Built with -DDIM_MAX=… (the engine's dim_max: a memory's address is row * DIM_MAX + column). Argument 1: the input
// file, argument 2: the output file, both little-endian.
//   input:  int32 head count; per head int32 seq, dim, causal, mult, shift, limit, then seq*dim int16 each of q, k, v
//   output: per head int32 status (0 done, 1 hang, 2 fault), ticks (clocks after the start clock, through the one in
//           which done was seen), array, softmax, divider and total cycles, then seq*dim int16 of O, seq uint8 shifts
#include <cstdint>
#include <cstdio>
#include <vector>

#include "Vhead.h"
#include "Vhead___024root.h"
#include "verilated.h"

namespace {

bool read_all(FILE *in, void *data, size_t bytes) { return fread(data, 1, bytes, in) == bytes; }

void tick(Vhead *top) {
    top->clk = 1;
    top->eval();
    top->clk = 0;
    top->eval();
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (!in || !out) {
        fprintf(stderr, "harness: cannot open %s or %s\n", argv[1], argv[2]);
        return 2;
    }
    VerilatedContext context;
    Vhead *top = new Vhead{&context};
    Vhead___024root *root = top->rootp;
    top->rst = 0;
    top->start = 0;
    top->clk = 0;
    top->eval();
    int32_t heads = 0;
    if (!read_all(in, &heads, sizeof heads)) return 3;
    for (int32_t h = 0; h < heads; ++h) {
        int32_t p[6];  // seq, dim, causal, mult, shift, limit
        if (!read_all(in, p, sizeof p)) return 3;
        const int32_t seq = p[0], dim = p[1];
        std::vector<int16_t> tensor(static_cast<size_t>(seq) * dim);
        for (auto *mem : {&root->head__DOT__q_mem, &root->head__DOT__k_mem, &root->head__DOT__v_mem}) {
            if (!read_all(in, tensor.data(), tensor.size() * sizeof(int16_t))) return 3;
            for (int32_t row = 0; row < seq; ++row)
                for (int32_t col = 0; col < dim; ++col)
                    (*mem)[row * DIM_MAX + col] = static_cast<uint16_t>(tensor[row * dim + col]);
        }
        top->seq = seq;
        top->dim = dim;
        top->causal = p[2];
        top->mult = p[3];
        top->shift = p[4];
        top->start = 1;
        top->eval();
        tick(top);
        top->start = 0;
        top->eval();
        int32_t ticks = 0, status = 1;
        while (ticks < p[5]) {
            tick(top);
            ++ticks;
            if (top->done) {
                status = top->fault ? 2 : 0;
                break;
            }
        }
        int32_t record[6] = {status, ticks, static_cast<int32_t>(top->array_cycles),
                             static_cast<int32_t>(top->softmax_cycles), static_cast<int32_t>(top->divider_cycles),
                             static_cast<int32_t>(top->cycles)};
        fwrite(record, sizeof record, 1, out);
        for (int32_t row = 0; row < seq; ++row)
            for (int32_t col = 0; col < dim; ++col)
                tensor[row * dim + col] = static_cast<int16_t>(root->head__DOT__o_mem[row * DIM_MAX + col]);
        fwrite(tensor.data(), sizeof(int16_t), tensor.size(), out);
        std::vector<uint8_t> shifts(seq);
        for (int32_t row = 0; row < seq; ++row) shifts[row] = static_cast<uint8_t>(root->head__DOT__shift_mem[row]);
        fwrite(shifts.data(), 1, shifts.size(), out);
        if (status != 0) break;
    }
    top->final();
    delete top;
    fclose(in);
    return fclose(out) == 0 ? 0 : 4;
}
