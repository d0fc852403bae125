// The command line itself through the real binary (apps/fanout/cli_parse.h,
// cli_help.h): a flag given twice, an unknown flag (with the closest flag of that
// subcommand), an unexpected word and a flag without its value are one line and
// exit code 2, named for the (sub)command they were given to; flags that take a
// list or may repeat still do; --help shows clean type names and the defaults, and
// fits the terminal's width (COLUMNS), losing no word, or keeps one line per
// description when piped without COLUMNS.

#include <doctest/doctest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::test;

namespace {

// Every subcommand that has a --help.
const std::vector<std::vector<std::string>> kCommands = {{"train"},
                                                         {"eval"},
                                                         {"generate"},
                                                         {"bench"},
                                                         {"bench", "ops"},
                                                         {"launch"},
                                                         {"plot"},
                                                         {"report"},
                                                         {"prepare"},
                                                         {"walkthrough"},
                                                         {"devices"},
                                                         {"tokenizer"},
                                                         {"tokenizer", "train"},
                                                         {"tokenizer", "encode"}};

// A usage error: exit code 2, one line on stderr that is `line` exactly, no stdout.
void check_usage_error(const std::vector<std::string>& args, const std::string& line) {
  CliResult r = run_fanout(args);
  std::string shown;
  for (const std::string& a : args) shown += " " + a;
  INFO("fanout" << shown << "\nrc " << r.rc << "\nstderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.rc == 2);
  CHECK(r.err_lines() == 1);
  CHECK(r.err == "fanout: error: " + line + "\n");
  CHECK(r.out.empty());
}

}  // namespace

TEST_CASE("a flag given twice names both values and exits 2") {
  check_usage_error({"train", "--steps", "5", "--steps", "6"},
                    "--steps given twice (5 and 6); give it once");
  check_usage_error({"train", "--out", "a", "--out", "b", "--out", "c"},
                    "--out given 3 times (a, b and c); give it once");
  // Two spellings of one flag are one flag.
  check_usage_error({"train", "--val-batches", "1", "--eval-batches", "2"},
                    "--val-batches/--eval-batches given twice (1 and 2); give it once");
  check_usage_error({"eval", "--checkpoint", "a", "--checkpoint", "b", "--data", "d"},
                    "--checkpoint given twice (a and b); give it once");
  check_usage_error({"tokenizer", "train", "--data", "x", "--vocab-size", "300", "--vocab-size",
                     "400", "--out", "o"},
                    "--vocab-size given twice (300 and 400); give it once");
}

TEST_CASE("flags that take a list or may repeat still do") {
  TempDir dir("fanout-cli-parse");
  const std::string a = dir / "a.txt", b = dir / "b.txt";
  file_write(a, "the quick brown fox jumps over the lazy dog\n");
  file_write(b, "pack my box with five dozen liquor jugs\n");
  // --data FILE... given as one list and as two flags.
  for (const std::vector<std::string>& data :
       {std::vector<std::string>{"--data", a, b}, {"--data", a, "--data", b}}) {
    std::vector<std::string> args = {"tokenizer", "train", "--vocab-size",
                                     "262",       "--out", dir / "tok.json"};
    args.insert(args.end(), data.begin(), data.end());
    CliResult r = run_fanout(args);
    INFO("stderr: " << r.err);
    CHECK(r.rc == 0);
    std::filesystem::remove(dir / "tok.json");
  }
  // An on/off flag: the last one counts.
  CliResult r =
      run_fanout({"tokenizer", "encode", "--tokenizer", "byte", "--data", a, "--json", "--json"});
  INFO("stderr: " << r.err);
  CHECK(r.rc == 0);
  CHECK(last_json_line(r.out).is_object());
}

TEST_CASE("an unknown flag names the closest flag of its subcommand") {
  check_usage_error({"train", "--stepz", "5"},
                    "unknown flag --stepz for 'fanout train'; did you mean --steps?");
  check_usage_error({"train", "--stepz=5"},
                    "unknown flag --stepz for 'fanout train'; did you mean --steps?");
  check_usage_error({"train", "--batch_size", "4"},
                    "unknown flag --batch_size for 'fanout train'; did you mean --batch-size?");
  check_usage_error({"train", "--steps", "5", "--no-shufle"},
                    "unknown flag --no-shufle for 'fanout train'; did you mean --no-shuffle?");
  // Nested subcommands; the unknown flag comes before what is missing because of it.
  check_usage_error(
      {"tokenizer", "train", "--vocab", "300"},
      "unknown flag --vocab for 'fanout tokenizer train'; did you mean --vocab-size?");
  check_usage_error({"tokenizer", "train", "--vocb", "300"},
                    "unknown flag --vocb for 'fanout tokenizer train'; did you mean --vocab-size?");
  check_usage_error({"bench", "ops", "--repeat", "3"},
                    "unknown flag --repeat for 'fanout bench ops'; did you mean --repeats?");
  check_usage_error({"launch", "--nproc", "2", "--", "train"},
                    "unknown flag --nproc for 'fanout launch'; did you mean --nproc-per-node?");
  // Nothing close: where to look instead.
  check_usage_error({"devices", "--no-such-flag"},
                    "unknown flag --no-such-flag for 'fanout devices' (see fanout devices --help)");
  check_usage_error({"train", "-x"},
                    "unknown flag -x for 'fanout train' (see fanout train --help)");
  check_usage_error({"--stepz"}, "unknown flag --stepz for 'fanout' (see fanout --help)");
}

TEST_CASE("an unexpected word is named for the subcommand it was given to") {
  check_usage_error(
      {"train", "5"},
      "unexpected argument '5' for 'fanout train' (a flag takes one value; see fanout train "
      "--help)");
  check_usage_error(
      {"train", "--steps", "5", "6"},
      "unexpected argument '6' for 'fanout train' (a flag takes one value; see fanout train "
      "--help)");
  check_usage_error({"tokenizer", "trian"},
                    "unknown command 'trian' for 'fanout tokenizer'; did you mean 'train'?");
  check_usage_error({"bench", "opz"},
                    "unknown command 'opz' for 'fanout bench'; did you mean 'ops'?");
  check_usage_error({"trian"}, "unknown command 'trian'; did you mean 'train'?");
  check_usage_error({}, "no command given (see fanout --help)");
}

TEST_CASE("a flag without its value says what it takes") {
  check_usage_error({"train", "--steps"}, "--steps needs a value (INT) (see fanout train --help)");
  check_usage_error({"train", "--lr"}, "--lr needs a value (NUMBER) (see fanout train --help)");
  check_usage_error({"plot", "run", "--out"},
                    "--out needs a value (FILE.svg) (see fanout plot --help)");
}

TEST_CASE("help shows clean type names and the defaults in every subcommand") {
  // CLI11's converter type and validator description joined, or a flag's set value.
  const std::regex noise(R"((TEXT|INT|UINT|FLOAT|NUMBER):[A-Z{]|\{false\}|\.\.\. \.\.\.)");
  for (std::vector<std::string> args : kCommands) {
    std::string name = "fanout";
    for (const std::string& a : args) name += " " + a;
    CAPTURE(name);
    args.push_back("--help");
    CliResult r = run_fanout(args);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "Usage: " + name + " "));
    std::smatch m;
    CHECK_MESSAGE(!std::regex_search(r.out, m, noise), "found '", m.str(), "' in:\n", r.out);
  }
  const std::string train = run_fanout({"train", "--help"}).out;
  for (const char* shown :
       {"--steps INT=300 ", "--lr NUMBER=0.003 ", "--seed INT=1234 ", "--preset TEXT=tiny ",
        "--config TEXT ", "--device-memory SIZE ", "--shuffle,--no-shuffle ", "--json "}) {
    CHECK_MESSAGE(has(train, shown), shown);
  }
  const std::string tokenizer = run_fanout({"tokenizer", "train", "--help"}).out;
  CHECK(has(tokenizer, "--vocab-size INT=8192 "));
  CHECK(has(tokenizer, "--data TEXT ... REQUIRED "));
  const std::string launch = run_fanout({"launch", "--help"}).out;
  CHECK(has(launch, "--grace NUMBER=15 "));
  CHECK(has(launch, "--max-restarts,--max_restarts INT=0"));
  const std::string plot = run_fanout({"plot", "--help"}).out;
  CHECK(has(plot, "runs RUN... REQUIRED "));
  CHECK(has(plot, "--out FILE.svg REQUIRED "));
}

TEST_CASE("help fits the terminal's width in every subcommand and loses no word") {
  // Every description was one line: 190 columns for --device-memory.
  // The words of `text`, in order, whitespace of any kind between them.
  auto words = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  std::vector<std::vector<std::string>> commands = {{}};  // fanout --help itself
  commands.insert(commands.end(), kCommands.begin(), kCommands.end());
  for (std::vector<std::string> args : commands) {
    args.push_back("--help");
    CAPTURE(args.front());
    const CliResult narrow = run_fanout(args, "COLUMNS=80");
    const CliResult wide = run_fanout(args, "COLUMNS=1000");
    REQUIRE(narrow.rc == 0);
    REQUIRE(wide.rc == 0);
    std::istringstream in(narrow.out);
    for (std::string line; std::getline(in, line);) {
      CHECK_MESSAGE(line.size() <= 80, line);
    }
    CHECK(words(narrow.out) == words(wide.out));
  }
  // Continued lines start under the description column; a wide terminal keeps one line.
  const std::string train = run_fanout({"train", "--help"}, "COLUMNS=80").out;
  CHECK(has(train,
            "  --init TEXT                 Start from the weights of this checkpoint\n"
            "                              directory\n"));
  const std::string one_line =
      "  --init TEXT                 Start from the weights of this checkpoint directory\n";
  CHECK(has(run_fanout({"train", "--help"}, "COLUMNS=1000").out, one_line));
  // Piped to a program without COLUMNS: one line per description, for grep.
  CHECK(has(run_fanout({"train", "--help"}, "env -u COLUMNS").out, one_line));
}
