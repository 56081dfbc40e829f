/* The twin's cycle model in Unicorn's block hook, in C (mcu/sim/q15emu.py, class CortexM4).
 *
 * The model charges each basic block its instructions' cycles (costed once, in Python, with capstone) and a
 * pipeline refill when a block does not start where the last one ended. Called back into Python, that is a
 * ctypes round trip per block, about half of an emulated kernel call's wall time; here a block the model has
 * costed is a table look-up. A block not costed yet (or outside the table) is costed by `miss`, the Python side,
 * which fills in its cycles and instructions and returns 1; blocks inside the table are then never asked for again.
 * A `miss` that fails (an exception in Python: ctypes then returns 0) leaves the block uncosted and uncached, and
 * the Python side stops the emulation and raises its exception once the call returns.
 *
 * Built by `make -C mcu/native twin` (build/libkbench_blockcount.so); the emulator uses the Python hook when it
 * cannot be built, with the same counts (tests/sim/test_sim_emulator.py compares them).
 */
#include <stdint.h>

typedef int32_t (*kb_miss_fn)(uint64_t address, uint32_t size, uint32_t *cycles, uint32_t *instructions);

typedef struct {
    uint64_t base;              /* first address of the table (the kernel image's) */
    uint64_t slots;             /* halfword slots in the table: addresses base .. base + 2 * slots */
    uint32_t *cycles;           /* per slot: a block's cycles + 1 once costed, 0 before */
    uint32_t *instructions;     /* per slot: the block's instruction count */
    kb_miss_fn miss;            /* costs a block the table does not hold */
    uint32_t refill;            /* cycles charged when a block does not follow the last one */
    uint32_t has_previous;      /* 0 until the first block of a call */
    uint64_t previous_end;      /* where the last block ended */
    uint64_t cycles_total;      /* the call's modelled cycles, up to the end of the running block */
    uint64_t instructions_total;
    uint64_t blocks;
    uint64_t current;           /* the running block's address */
    uint64_t current_start;     /* cycles before the running block */
} kb_counter;

void kb_on_block(void *uc, uint64_t address, uint32_t size, void *user_data) {
    kb_counter *counter = (kb_counter *)user_data;
    uint32_t cycles = 0, instructions = 0;
    uint64_t slot = (address - counter->base) >> 1;
    (void)uc;
    if (address >= counter->base && slot < counter->slots && counter->cycles[slot] != 0) {
        cycles = counter->cycles[slot] - 1;
        instructions = counter->instructions[slot];
    } else {
        if (counter->miss(address, size, &cycles, &instructions) != 1)
            return; /* failed: nothing cached; the emulation is being stopped */
        if (address >= counter->base && slot < counter->slots) {
            counter->cycles[slot] = cycles + 1;
            counter->instructions[slot] = instructions;
        }
    }
    if (counter->has_previous && address != counter->previous_end)
        counter->cycles_total += counter->refill;
    counter->current_start = counter->cycles_total;
    counter->cycles_total += cycles;
    counter->instructions_total += instructions;
    counter->blocks += 1;
    counter->current = address;
    counter->previous_end = address + size;
    counter->has_previous = 1;
}
