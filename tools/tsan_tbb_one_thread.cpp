// Compiled into every executable of a ThreadSanitizer build (FANOUT_SANITIZE
// =thread, see CMakeLists.txt): oneTBB runs its tasks on the thread that starts
// them, without worker threads. Debian's libtbb.so.12 is not instrumented, so
// TSan cannot see the happens-before edges of a spawn, a steal or a wait, and
// every tbb::parallel_for whose tasks ran on a worker thread was reported as
// dozens of races on correctly synchronised data (tools/tsan_tbb_demo.cpp shows
// it on a ten-line program; docs/sanitizers.md has the numbers). fanout's own
// threads (device workers, streams) are untouched and fully checked.

#include <tbb/global_control.h>

namespace {
const tbb::global_control tsan_one_tbb_thread(tbb::global_control::max_allowed_parallelism, 1);
}  // namespace
