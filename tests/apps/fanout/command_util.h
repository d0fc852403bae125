#pragma once
// A command that is not the fanout binary (torchrun, `ip netns exec ...`) run
// by a test: in a process group of its own so that everything it starts can be
// killed together, its stdout and stderr in one log file, bounded waits.

#include <sys/types.h>

#include <string>
#include <vector>

namespace fanout::test {

class Command {
 public:
  // argv[0] is a path. `env` entries "NAME=value" are set in the child, entries
  // without '=' unset there (as FanoutProcess's).
  Command(const std::vector<std::string>& argv, const std::vector<std::string>& env,
          const std::string& log);
  // SIGKILLs the whole group and reaps the command.
  ~Command();
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  // The exit code (128 + signal when killed), or -1 when `timeout_s` passed first.
  int wait(double timeout_s);
  std::string output() const;

 private:
  pid_t pid_ = -1;
  int rc_ = -1;
  std::string log_;
};

// `sh -c command` with its output discarded: its exit code (-1 if it did not exit normally).
int shell(const std::string& command);

}  // namespace fanout::test
