#pragma once
// Files a process may hold open (RLIMIT_NOFILE, sockets included). A job that
// needs many of them (a rank of a large ddp world holds a socket per peer, rank 0
// one more per rank for the rendezvous) makes sure of them before it opens any:
// the soft limit is raised as far as the hard limit allows, and a need past that
// is refused in one line, instead of a socket() failing halfway through the
// connections with "Too many open files".

#include <cstdint>
#include <string_view>

namespace fanout {

// Makes at least `need` descriptors available to this process, raising the soft
// RLIMIT_NOFILE up to the hard one when it is lower. Throws fanout::Error
// "<what> needs about <need> open files, and this process may open at most <hard>
// ..." when the hard limit is lower. Returns the soft limit in force after.
int64_t open_files_ensure(int64_t need, std::string_view what);

}  // namespace fanout
