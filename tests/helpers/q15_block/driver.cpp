// One launch of kernels/q15.cu's q15_attention on the host (tests/helpers/q15_block.py): the kernel's own source with
// its inline-PTX MMAs and its extern shared array swapped for cuda_host.h's, every block of the grid in turn, the
// dynamic shared memory and the global buffers of exactly the launcher's sizes, each ending at an inaccessible page
// (an access past the end faults). Built with -DQ15_EMU_SOURCE="the rewritten kernel" and
// -DQ15_EMU_INSTANCES. argv: D WARPS grid nq n group d causal mult rshift smem bh bkv; stdin: Q, K, V
// int16; stdout: O int16, then the row shifts uint8 (poisoned with 255 before the launch).
#include <sys/mman.h>

#include Q15_EMU_SOURCE

static void *guarded(size_t bytes) {
    const size_t page = 4096, span = (bytes + page - 1) / page * page + page;
    char *p = (char *)mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + span - page, page, PROT_NONE)) abort();
    return p + span - page - bytes;
}

struct Args {
    const short *q, *k, *v;
    short *o;
    unsigned char *shift;
    int nq, n, group, d, causal, mult, rshift;
};
static Args args;

template <int D, int WARPS>
static void thread_main() {
    q15_attention<D, WARPS>(args.q, args.k, args.v, args.o, args.shift, args.nq, args.n, args.group, args.d,
                            args.causal, args.mult, args.rshift);
    emu_fibers[emu_current].done = true;
}

template <int D, int WARPS>
static void launch(int grid, size_t smem) {
    const int threads = 32 * WARPS;
    emu_smem = (unsigned char *)guarded(smem);
    for (int block = 0; block < grid; ++block) {
        memset(emu_smem, 0xA5, smem);  // what a previous block left
        emu_fibers.assign(threads, EmuFiber());
        emu_barriers.assign(1 + WARPS, EmuBarrier());
        emu_barriers[0].size = threads;
        for (int w = 0; w < WARPS; ++w) emu_barriers[1 + w].size = 32;
        for (int i = 0; i < threads; ++i) {
            EmuFiber &f = emu_fibers[i];
            f.stack.resize(1 << 18);
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.data();
            f.ctx.uc_stack.ss_size = f.stack.size();
            f.ctx.uc_link = &emu_scheduler;
            makecontext(&f.ctx, thread_main<D, WARPS>, 0);
        }
        for (int alive = threads; alive;) {
            const long before = emu_events;
            alive = 0;
            for (int i = 0; i < threads; ++i) {
                if (emu_fibers[i].done) continue;
                emu_current = i;
                threadIdx = {(unsigned)i, 0, 0};
                blockIdx = {(unsigned)block, 0, 0};
                swapcontext(&emu_scheduler, &emu_fibers[i].ctx);
                if (!emu_fibers[i].done) alive++;
                else if (!emu_fibers[i].counted) emu_fibers[i].counted = true, emu_events++;
            }
            if (alive && emu_events == before) {
                fprintf(stderr, "deadlock: block %d, %d threads wait at a barrier the others never reach\n", block,
                        alive);
                return exit(5);
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 14) return 2;
    const int D = atoi(argv[1]), warps = atoi(argv[2]), grid = atoi(argv[3]);
    args.nq = atoi(argv[4]), args.n = atoi(argv[5]), args.group = atoi(argv[6]), args.d = atoi(argv[7]);
    args.causal = atoi(argv[8]), args.mult = atoi(argv[9]), args.rshift = atoi(argv[10]);
    const size_t smem = strtoull(argv[11], nullptr, 10), bh = strtoull(argv[12], nullptr, 10),
                 bkv = strtoull(argv[13], nullptr, 10);
    const size_t nq = bh * args.nq * args.d, nkv = bkv * args.n * args.d;
    short *q = (short *)guarded(2 * nq), *k = (short *)guarded(2 * nkv), *v = (short *)guarded(2 * nkv);
    short *o = (short *)guarded(2 * nq);
    unsigned char *shift = (unsigned char *)guarded(bh * args.nq);
    if (fread(q, 2, nq, stdin) != nq || fread(k, 2, nkv, stdin) != nkv || fread(v, 2, nkv, stdin) != nkv) return 3;
    memset(o, 0, 2 * nq);
    memset(shift, 255, bh * args.nq);
    args.q = q, args.k = k, args.v = v, args.o = o, args.shift = shift;
#define Q15_EMU_CASE(DD, WW) if (D == DD && warps == WW) launch<DD, WW>(grid, smem); else
    Q15_EMU_INSTANCES return 4;  // Q15_EMU_CASE(D, WARPS) of each kernels/q15_launch.py instance
    fwrite(o, 2, nq, stdout);
    fwrite(shift, 1, bh * args.nq, stdout);
    return 0;
}
