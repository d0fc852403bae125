#pragma once
// What a run keeps of its checkpoints: --keep-last N rotation of the step-N
// directories (final/ and best/ are never touched) and the name of the best/
// checkpoint that --save-best replaces. Deletion is crash-safe: a directory is
// first renamed to a temporary name (which readers ignore and the next run removes),
// then deleted, so a crash never leaves a half-deleted checkpoint that looks whole.

#include <cstdint>
#include <string>
#include <vector>

namespace fanout::train {

// The directory --save-best keeps in the run directory.
inline constexpr const char* kBestCheckpoint = "best";

// The complete step checkpoints in `out_dir` (step-N holding trainer_state.json),
// oldest first, as names ("step-000010"). Temporaries and incomplete ones are left out.
std::vector<std::string> checkpoint_steps_list(const std::string& out_dir);

// Removes the oldest complete step checkpoints of `out_dir` so that at most
// `keep_last` remain (0: keep all); call it only once the newest is in place.
// Returns the names removed; a directory that cannot be removed is left (best effort).
std::vector<std::string> checkpoint_rotate(const std::string& out_dir, int64_t keep_last);

}  // namespace fanout::train
