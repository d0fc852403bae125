// `fanout bench`: the DataParallel modes on one model and global batch, each timed
// step by step: one table (tokens/s from the median step and its spread, speed-up
// over one device, step-time breakdown, bytes moved), a line when the spreads are
// too wide to rank the modes, then each device's peak bytes per kind (params,
// grads, ...), optionally as JSON. It fits the terminal's width (--wide: the full
// table). A mode that fails is a row saying why, the others still run, and the
// exit code says one failed. The ddp row and the PyTorch peers (--peers) live in
// apps/bench/bench_ddp.h and bench_peers.h. `fanout bench ops`: GFLOP/s of
// the CPU matmul and attention kernels at a preset's shapes.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.h"
#include "apps/bench/bench_ddp.h"
#include "apps/bench/bench_peers.h"
#include "apps/bench/bench_profile.h"
#include "apps/bench/bench_report.h"
#include "apps/bench/bench_table.h"
#include "apps/data/terminal_text.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/presentation/bench_svg.h"
#include "apps/presentation/text_format.h"
#include "apps/presentation/text_table.h"
#include "apps/train/ddp_env.h"
#include "apps/train/device_memory.h"
#include "apps/train/memory_check.h"
#include "apps/train/train_options.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"
#include "engine/core/trace.h"
#include "models/llama_config.h"
#include "ops/cpu/matmul.h"

namespace fanout::app {

namespace {
struct BenchArgs {
  std::string preset = "tiny", config_file, devices = "cpu:0,cpu:1", modes = "all", json, trace,
              svg;
  int64_t batch_size = 16, seq_len = 128;
  // At least `steps` timed steps and `min_seconds` of them per mode (BenchSetup).
  int steps = bench::BenchSetup{}.steps, warmup = 1;
  double min_seconds = bench::BenchSetup{}.min_seconds;
  bool peers = false, mfu = false, kernels = false, wide = false;
  double bucket_mb = 25.0;
  // fp32, bf16 or both (every mode in each); the dtype gradient sums travel in.
  std::string precision = "both", grad_comm = "fp32";
  std::string attention = "auto";  // the attention kernel on CUDA devices (train's --attention)
  std::string gemm_algo = "heuristic";  // train's --gemm-algo
  std::string projections = "auto";     // train's --projections
  std::string graphs = "auto";          // train's --graphs
  // ops
  std::string op_device = "cpu:0", op_dtype = "both";
  int repeats = 5;
  std::string device_memory;  // "": no cap
  // train's --recompute and --offload optimizer, for every row.
  bool recompute = false;
  std::string offload;
};

models::LlamaConfig config_of(const BenchArgs& a) {
  return a.config_file.empty() ? models::llama_preset(a.preset)
                               : models::llama_config_load(a.config_file);
}

// Runs one row; whatever it throws becomes the row's reason, and the bench goes on.
template <typename F>
presentation::BenchResult run_row(const std::string& mode, const std::string& precision, F f) {
  presentation::BenchResult r;
  try {
    return f();
  } catch (const std::bad_alloc&) {
    r.failed = "out of memory (a size asked for more than the machine has)";
  } catch (const std::exception& e) {
    r.failed = e.what();
  }
  r.mode = mode, r.precision = precision;
  return r;
}

// A double as text that reads back as the same value (std::to_string prints
// 0.000000 for a 1e-7 bucket).
std::string exact_str(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// --graphs auto, on or off, refused otherwise.
std::string graphs_flag(const std::string& graphs) {
  FANOUT_CHECK(graphs == "auto" || graphs == "on" || graphs == "off",
               "--graphs must be auto, on or off, got '", graphs, "'");
  return graphs;
}

// What every rank of the ddp row gets besides its device and --json.
std::vector<std::string> worker_flags(const BenchArgs& a, const std::string& precision) {
  std::vector<std::string> flags = {"--batch-size",  std::to_string(a.batch_size),
                                    "--seq-len",     std::to_string(a.seq_len),
                                    "--steps",       std::to_string(a.steps),
                                    "--warmup",      std::to_string(a.warmup),
                                    "--min-seconds", exact_str(a.min_seconds),
                                    "--bucket-mb",   exact_str(a.bucket_mb),
                                    "--precision",   precision,
                                    "--grad-comm",   a.grad_comm,
                                    "--attention",   a.attention,
                                    "--projections", a.projections,
                                    "--graphs",      a.graphs};
  // timed applies to the bf16 rows (train refuses it alone with fp32)
  flags.insert(flags.end(), {"--gemm-algo", precision == "bf16" ? a.gemm_algo : "heuristic"});
  if (a.config_file.empty()) {
    flags.insert(flags.end(), {"--preset", a.preset});
  } else {
    flags.insert(flags.end(), {"--config", a.config_file});
  }
  if (!a.device_memory.empty()) flags.insert(flags.end(), {"--device-memory", a.device_memory});
  if (a.recompute) flags.push_back("--recompute");
  if (!a.offload.empty()) flags.insert(flags.end(), {"--offload", a.offload});
  return flags;
}

std::string self_binary() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  FANOUT_CHECK(n > 0, "cannot find the fanout binary");
  return std::string(self, static_cast<size_t>(n));
}

// One rank of the ddp row: entry LOCAL_RANK of the listed devices (ddp_device).
int run_bench_worker(const BenchArgs& a) {
  bench::BenchSetup setup;
  setup.config = config_of(a);
  setup.ddp = train::ddp_env_from_environment();
  Device d = train::ddp_device(setup.ddp, devices_parse(a.devices));
  setup.devices = {d};
  if (!a.device_memory.empty()) {
    train::apply_device_memory(train::parse_byte_size(a.device_memory, "--device-memory"), {d});
  }
  setup.batch_size = a.batch_size, setup.seq_len = a.seq_len;
  setup.steps = a.steps, setup.warmup = a.warmup, setup.bucket_mb = a.bucket_mb;
  setup.min_seconds = a.min_seconds;
  setup.working = a.precision == "bf16" ? DType::bf16 : DType::f32;
  setup.grad_comm = a.grad_comm == "bf16" ? DType::bf16 : DType::f32;
  setup.recompute = a.recompute, setup.offload = a.offload == "optimizer";
  setup.graphs = graphs_flag(a.graphs);
  train::attention_apply(a.attention, setup.working, setup.devices);
  train::gemm_algo_apply(a.gemm_algo, setup.working == DType::bf16, setup.devices);
  train::projections_apply(a.projections, setup.devices);
  // As `train --strategy ddp` connects under fanout launch, with its default timeout;
  // silently: the launcher line would land inside the bench's table.
  train::DdpGroup group = train::ddp_connect(setup.ddp, d, train::TrainOptions{}.timeout, false);
  setup.group = group.group.get();
  presentation::BenchResult r = bench::bench_mode(setup, bench::bench_modes_parse("ddp")[0]);
  file_write_atomic(a.json + ".rank" + std::to_string(setup.ddp.rank),
                    bench::bench_result_json(r).dump() + "\n", "--json");
  return 0;
}

// The precisions `--precision` asks for, in table order.
std::vector<std::string> precisions_of(const BenchArgs& a) {
  if (a.precision == "both") return {"fp32", "bf16"};
  return {a.precision};
}

std::vector<bench::PeerRow> run_peers(const BenchArgs& a, const std::vector<Device>& devices) {
  bench::PeerRequest q;
  q.python = bench::bench_peers_python();
  const char* env_dir = std::getenv("FANOUT_REFERENCE_DIR");
  q.script =
      std::string(env_dir ? env_dir : FANOUT_SOURCE_DIR "/tests/reference") + "/peer_bench.py";
  q.config = a.config_file.empty() ? a.preset : a.config_file;
  q.batch_size = a.batch_size, q.seq_len = a.seq_len, q.steps = a.steps, q.warmup = a.warmup;
  q.precisions = precisions_of(a);
  return bench::bench_peers_run(q, devices);
}

// Before any work: every result path must be a regular file or a new path (a
// FIFO would block, a device or symlink would be replaced), and no two the same.
void check_outputs(const BenchArgs& a) {
  const std::pair<const char*, const std::string*> outputs[] = {
      {"--json", &a.json}, {"--svg", &a.svg}, {"--trace", &a.trace}};
  for (size_t i = 0; i < std::size(outputs); ++i) {
    const auto& [flag, path] = outputs[i];
    if (path->empty()) continue;
    file_check_output(*path, flag);
    for (size_t k = 0; k < i; ++k) {
      FANOUT_CHECK(*outputs[k].second != *path, outputs[k].first, " and ", flag,
                   " name the same file ", *path, "; give each its own");
    }
  }
}

// The setup every row shares and the modes, from the flags, each checked before
// anything runs.
bench::BenchSetup setup_of(BenchArgs& a, std::vector<parallel::Mode>& modes) {
  bench::BenchSetup setup;
  check_outputs(a);
  FANOUT_CHECK(a.precision == "fp32" || a.precision == "bf16" || a.precision == "both",
               "--precision must be fp32, bf16 or both, got '", a.precision, "'");
  FANOUT_CHECK(a.grad_comm == "fp32" || a.grad_comm == "bf16",
               "--grad-comm must be fp32 or bf16, got '", a.grad_comm, "'");
  setup.config = config_of(a);
  setup.devices = devices_parse(a.devices);
  devices_check_available(setup.devices);
  for (const Device& d : setup.devices)
    FANOUT_CHECK(!d.is_bare(), "--devices needs indices, e.g. cpu:0,cpu:1");
  if (!a.device_memory.empty()) {
    train::apply_device_memory(train::parse_byte_size(a.device_memory, "--device-memory"),
                               setup.devices);
  }
  // "both" includes fp32, where cuDNN's attention has no path: cudnn needs bf16 alone.
  train::attention_apply(a.attention, a.precision == "bf16" ? DType::bf16 : DType::f32,
                         setup.devices);
  train::gemm_algo_apply(a.gemm_algo, a.precision != "fp32", setup.devices);
  train::projections_apply(a.projections, setup.devices);
  setup.graphs = graphs_flag(a.graphs);
  setup.grad_comm = a.grad_comm == "bf16" ? DType::bf16 : DType::f32;
  setup.batch_size = a.batch_size, setup.seq_len = a.seq_len;
  setup.steps = a.steps, setup.warmup = a.warmup, setup.bucket_mb = a.bucket_mb;
  setup.min_seconds = a.min_seconds;
  FANOUT_CHECK(a.offload.empty() || a.offload == "optimizer",
               "--offload must be optimizer (fp32 master weights and AdamW state in host "
               "memory), got '",
               a.offload, "'");
  setup.recompute = a.recompute, setup.offload = a.offload == "optimizer";
  FANOUT_CHECK(a.bucket_mb > 0, "--bucket-mb must be positive, got ", a.bucket_mb);
  FANOUT_CHECK(a.seq_len <= setup.config.max_position_embeddings, "--seq-len ", a.seq_len,
               " exceeds max_position_embeddings ", setup.config.max_position_embeddings);
  modes = bench::bench_modes_parse(a.modes);
  // Before anything runs: the one-device baseline (the whole batch on devices[0]).
  train::memory_check_fits(setup.config, {setup.devices[0]},
                           {a.batch_size, a.batch_size, a.seq_len, false, true});

  return setup;
}

using Say = std::function<void(const std::string&)>;

int run_bench(const BenchArgs& given) {
  BenchArgs a = given;
  std::vector<parallel::Mode> modes;
  bench::BenchSetup setup = setup_of(a, modes);
  const int64_t share =
      train::memory_largest_share(a.batch_size, static_cast<int64_t>(setup.devices.size()));

  // Fitted to the terminal (--wide: one full line per mode); prose wraps under an indent.
  const size_t width = a.wide ? 0 : data::terminal_columns();
  auto say = [&](const std::string& text) {
    std::fputs(presentation::text_wrap(text, width, "  ").c_str(), stdout);
  };
  say(presentation::strf(
      "fanout bench: %lld parameters, global batch %lld x %lld, devices %s; each mode "
      "timed step by step after %d warm-up, at least %d steps and %g s",
      static_cast<long long>(setup.config.num_parameters()), static_cast<long long>(a.batch_size),
      static_cast<long long>(a.seq_len), devices_str(setup.devices).c_str(), a.warmup, a.steps,
      a.min_seconds));
  std::string flags;
  for (const parallel::Mode& m : modes)
    flags += (flags.empty() ? "" : "; ") + m.name + " = " + parallel::mode_flags(m);
  say("modes as fanout train flags: " + flags);
  const std::vector<std::string> precisions = precisions_of(a);
  const std::string base_label = "1 device (" + setup.devices[0].str() + ")";
  // Every row's label before any runs, so that the rows line up as they print.
  std::vector<std::string> labels = {base_label, "PyTorch peer"};
  for (const std::string& precision : precisions) {
    for (const parallel::Mode& m : modes) {
      labels.push_back((m.processes ? bench::bench_ddp_label(setup.devices) : m.name) +
                       (precision == "bf16" ? " bf16" : ""));
    }
  }
  const bench::BenchTable table = bench::bench_table(labels, width);
  std::fputs(bench::bench_table_head(table).c_str(), stdout);
  std::fflush(stdout);
  // One device, whole batch, fp32: the baseline every speed-up is measured against.
  bench::BenchSetup one = setup;
  one.devices = {setup.devices[0]};
  presentation::BenchResult base = run_row(base_label, "fp32", [&] {
    presentation::BenchResult r = bench::bench_mode(one, bench::bench_modes_parse("dp")[0]);
    r.mode = base_label;
    return r;
  });
  std::fputs(bench::bench_table_row(table, base, base.tokens_per_s).c_str(), stdout);
  std::vector<presentation::BenchResult> results;
  const std::string fanout = self_binary();
  for (const std::string& precision : precisions) {
    bench::BenchSetup ps = setup;
    ps.working = precision == "bf16" ? DType::bf16 : DType::f32;
    for (size_t i = 0; i < modes.size(); ++i) {
      const parallel::Mode& m = modes[i];
      bool last = precision == precisions.back() && i + 1 == modes.size();
      if (!a.trace.empty() && last) Trace::global().set_enabled(true);
      const std::string label = m.processes ? bench::bench_ddp_label(setup.devices) : m.name;
      results.push_back(run_row(label, precision, [&] {
        if (m.processes)
          return bench::bench_ddp_run(fanout, setup.devices, worker_flags(a, precision));
        if (m.loss_on == parallel::LossOn::output) {  // the batch's logits on one device
          train::memory_check_fits(setup.config, setup.devices,
                                   {a.batch_size, share, a.seq_len, true, true});
        }
        return bench::bench_mode(ps, m);
      }));
      std::fputs(bench::bench_table_row(table, results.back(), base.tokens_per_s).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  std::vector<bench::PeerRow> peers;
  if (a.peers) peers = run_peers(a, setup.devices);
  for (const auto& p : peers)
    std::fputs(bench::bench_table_peer(table, p, base.tokens_per_s).c_str(), stdout);
  // What ran, for the summaries, the memory table and the picture.
  std::vector<presentation::BenchResult> ran;
  for (const auto& r : results)
    if (r.failed.empty()) ran.push_back(r);
  std::vector<presentation::BenchResult> ranked = {base};
  ranked.insert(ranked.end(), results.begin(), results.end());
  std::fputs(bench::bench_phase_table(table, ranked).c_str(), stdout);
  if (width > 0) std::printf("\n");
  std::fputs(bench::bench_ranking_line(ranked, width).c_str(), stdout);
  for (const std::string& line : bench::bench_best_lines(precisions, ran, peers)) say(line);
  const nlohmann::json mfu =
      a.mfu ? bench::bench_mfu_report(setup, ran, precisions, width) : nlohmann::json::array();
  const nlohmann::json kernels =
      a.kernels ? bench::bench_kernels_report(setup, precisions, width) : nlohmann::json::array();
  std::vector<presentation::BenchResult> memory_rows;
  if (base.failed.empty()) memory_rows.push_back(base);
  memory_rows.insert(memory_rows.end(), ran.begin(), ran.end());
  std::printf("\n");
  say("peak bytes per device in the timed steps, by kind (each kind's own peak; total: all kinds "
      "at once)");
  std::fputs(bench::bench_memory_table(memory_rows, width).c_str(), stdout);
  for (const std::string& line : bench::bench_bubble_lines(ran)) say(line);
  if (!a.trace.empty()) {
    Trace::global().set_enabled(false);
    Trace::global().write(a.trace);
    say("trace of " + modes.back().name + " written to " + a.trace + " (open in ui.perfetto.dev)");
  }
  // Speed-ups over the baseline; none where it failed.
  const double base_tps = base.failed.empty() ? base.tokens_per_s : 0;
  if (!a.svg.empty()) {
    file_write_atomic(a.svg, bench::bench_svg_page(setup, memory_rows, peers, base_tps), "--svg");
    say("picture written to " + a.svg);
  }
  if (!a.json.empty()) {
    const nlohmann::json doc =
        bench::bench_json_document(setup, base, results, ran, peers, base_tps,
                                   a.mfu ? &mfu : nullptr, a.kernels ? &kernels : nullptr);
    file_write_atomic(a.json, doc.dump(2) + "\n", "--json");
    say("figures written to " + a.json);
  }
  // A failed fanout row fails the bench, after every other row ran and was written.
  const std::string failed = bench::bench_failures(base, results);
  if (failed.empty()) return 0;
  std::fflush(stdout);
  std::fprintf(stderr, "fanout: error: %s; each row above says why\n", failed.c_str());
  return 1;
}

int run_bench_ops(const BenchArgs& a) {
  FANOUT_CHECK(a.op_dtype == "f32" || a.op_dtype == "bf16" || a.op_dtype == "both",
               "--dtype must be f32, bf16 or both, got '", a.op_dtype, "'");
  Device device = device_parse(a.op_device);
  devices_check_available({device});
  if (!a.device_memory.empty()) {
    train::apply_device_memory(train::parse_byte_size(a.device_memory, "--device-memory"),
                               {device});
  }
  FANOUT_CHECK(device.is_cpu(), "fanout bench ops measures the CPU kernels: use --device cpu:N");
  models::LlamaConfig config = config_of(a);
  FANOUT_CHECK(a.seq_len <= config.max_position_embeddings, "--seq-len ", a.seq_len,
               " exceeds max_position_embeddings ", config.max_position_embeddings);
  train::memory_check_fits(config, {device}, {a.batch_size, a.batch_size, a.seq_len, false, false});
  std::vector<DType> dtypes;
  if (a.op_dtype != "bf16") dtypes.push_back(DType::f32);
  if (a.op_dtype != "f32") dtypes.push_back(DType::bf16);
  const size_t width = a.wide ? 0 : data::terminal_columns();
  std::printf("%s", presentation::text_wrap(
                        detail::str_cat(
                            "fanout bench ops: ", a.config_file.empty() ? a.preset : a.config_file,
                            ", batch ", a.batch_size, " x ", a.seq_len, ", ", a.repeats,
                            " repeats, single-threaded GEMMs"),
                        width, "  ")
                        .c_str());
  for (DType dt : dtypes) {
    std::printf("%s", presentation::text_wrap(detail::str_cat("matmul ", dtype_name(dt), ": ",
                                                              ops::cpu::matmul_engine(dt)),
                                              width, "  ")
                          .c_str());
  }
  // One table for every dtype, fitted to the terminal (--wide: one line per op).
  presentation::TextTable table;
  table.columns = {{"op", 0, true}, {"shape", 0, true}, {"GFLOP"}, {"ms"}, {"GFLOP/s"}};
  auto fixed = [](double v, const char* format) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  for (DType dt : dtypes) {
    for (const auto& r : bench::bench_ops(config, device, a.batch_size, a.seq_len, a.repeats, dt)) {
      table.rows.push_back({{r.op, r.shape, fixed(r.gflop, "%.3f"), fixed(r.seconds * 1e3, "%.2f"),
                             fixed(r.gflops(), "%.2f")},
                            ""});
    }
  }
  std::printf("%s", presentation::text_table_render(table, width).c_str());
  return 0;
}
}  // namespace

Command add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Compare the data-parallel modes (or time the ops)");
  auto a = std::make_shared<BenchArgs>();
  // Every number is range-checked text (cli_flags.h): '', 'inf', '1e3' for a count
  // and values past the bounds are usage errors naming the flag.
  constexpr int64_t kMaxCount = train::kMaxCount;
  constexpr int kMaxSteps = static_cast<int>(kMaxCount);
  auto common = [a](CLI::App* c) {
    c->add_option("--preset", a->preset, "tiny, small or seed")->capture_default_str();
    c->add_option("--config", a->config_file, "An HF Llama config.json instead of a preset");
    add_number(c, "--batch-size", a->batch_size, "Global rows per step", int64_t{1}, kMaxCount);
    add_number(c, "--seq-len", a->seq_len, "Tokens per row", int64_t{1}, kMaxCount);
    c->add_option("--device-memory", a->device_memory, train::kDeviceMemoryHelp)
        ->type_name("SIZE")
        ->check(CLI::Validator(
            [](std::string& text) { return train::byte_size_problem(text, "--device-memory"); },
            ""));
  };
  auto timing = [a](CLI::App* c) {
    add_number(c, "--steps", a->steps,
               "Timed steps per mode, at least (each timed alone: the table shows their median "
               "and spread)",
               1, kMaxSteps);
    add_number(c, "--min-seconds", a->min_seconds,
               "Time each mode for at least this long too (more steps if need be), so that a "
               "moment's load on the machine does not decide the ranking",
               0.0, 86400.0);
    add_number(c, "--warmup", a->warmup, "Untimed steps first", 0, kMaxSteps);
    // 0 passes the range check and is refused with a message of its own (> 0).
    add_number(c, "--bucket-mb", a->bucket_mb, "Gradient bucket size for dp-overlap and ddp", 0.0,
               train::kMaxBucketMb);
    c->add_option("--grad-comm", a->grad_comm,
                  "fp32 or bf16: the dtype gradient sums travel in (bf16: half the bytes)")
        ->capture_default_str();
    c->add_option("--attention", a->attention,
                  "The attention kernel on CUDA devices: auto, exact or cudnn (bf16 only)")
        ->capture_default_str();
    c->add_option("--gemm-algo", a->gemm_algo,
                  "heuristic or timed, as train's: how cuBLASLt's algorithm is chosen for each "
                  "bf16 GEMM shape on CUDA devices")
        ->capture_default_str();
    c->add_option("--projections", a->projections,
                  "auto, separate or fused (q/k/v as one GEMM, gate/up as one), as train's "
                  "(auto: fused on CUDA devices)")
        ->capture_default_str();
    c->add_option("--graphs", a->graphs,
                  "auto, on or off, as train's: on runs every row as fanout train --graphs on "
                  "(each device's forward and backward recorded once and replayed; rows it does "
                  "not work with fail with the reason); auto, the rows that can record, on CUDA "
                  "devices")
        ->capture_default_str();
    c->add_flag("--recompute", a->recompute,
                "Every row as fanout train --recompute (each layer's forward again in backward)");
    c->add_option("--offload", a->offload,
                  "optimizer: every row as fanout train --offload optimizer (the memory table's "
                  "host column holds its master weights and AdamW state; rows it does not work "
                  "with fail with the reason)")
        ->check(not_empty());
  };
  common(cmd);
  cmd->add_option("--devices", a->devices, "Devices")->capture_default_str();
  cmd->add_option(
         "--modes", a->modes,
         "Comma-separated: " + parallel::mode_names() +
             " (each what fanout train runs with those flags: dp = --strategy dp, "
             "dp-output = --strategy dp --loss-on output, dp-overlap = --strategy dp "
             "--overlap, ddp = --strategy ddp under fanout launch, pp-1f1b = --pp N --pp-schedule "
             "1f1b (N: the devices), pp-gpipe and pp-zb1 the same with their schedule, tp = "
             "--tp T (T: the most devices that divide the heads, key-value heads and MLP units; "
             "the rest data-parallel replicas), pp-tp = --pp 2 --tp T), "
             "or all; dp-replicas is another name for dp")
      ->capture_default_str();
  timing(cmd);
  cmd->add_option("--json", a->json, "Also write the figures to this file");
  cmd->add_option("--precision", a->precision,
                  "fp32, bf16 (mixed precision) or both: every mode in each")
      ->capture_default_str();
  cmd->add_flag(
      "--peers", a->peers,
      "Also run PyTorch on the same config and batch (tests/reference/peer_bench.py): eager "
      "and torch.compile on the first device, DDP with one process per device and, on GPUs, "
      "nn.DataParallel, in each --precision (bf16: under torch.autocast); a peer that cannot "
      "run on these devices or this PyTorch is skipped with the reason");
  cmd->add_flag("--mfu", a->mfu,
                "Also measure the first device's GEMM peak (a square GEMM in each --precision) "
                "and print each precision's best row as model FLOPs utilisation (6N plus "
                "attention FLOPs per token over that peak)");
  cmd->add_flag("--kernels", a->kernels,
                "Also profile one step on the first device in each --precision and print its "
                "time by kernel class (GEMM, attention, loss, element-wise, optimizer, and the "
                "rest: copies, communication and launch gaps)");
  cmd->add_option("--svg", a->svg, "Draw throughput and the step-time breakdown as an SVG");
  cmd->add_option("--trace", a->trace, "Write a Chrome/Perfetto trace of the last mode's steps");
  cmd->add_flag("--wide", a->wide,
                "One line per mode with every figure, however wide (by default the output "
                "fits the terminal, 80 columns when it is not one)");
  auto* ops = cmd->add_subcommand("ops", "GFLOP/s of the CPU matmul and attention kernels");
  common(ops);
  ops->add_option("--device", a->op_device, "A CPU device")->capture_default_str();
  add_number(ops, "--repeats", a->repeats, "Timed repetitions", 1, kMaxSteps);
  ops->add_option("--dtype", a->op_dtype,
                  "f32, bf16 or both: the inputs' dtype (bf16: f32 gradients and logits)")
      ->capture_default_str();
  ops->add_flag("--wide", a->wide,
                "One line per op, however wide (by default the table fits the terminal, 80 "
                "columns when it is not one)");
  // One rank of the ddp row, started by `fanout launch` from `fanout bench`.
  auto* worker = app.add_subcommand("bench-worker", "")->group("");
  common(worker);
  worker->add_option("--devices", a->devices);
  timing(worker);
  worker->add_option("--json", a->json)->required();
  worker->add_option("--precision", a->precision);
  return [cmd, ops, worker, a]() -> int {
    if (worker->parsed()) return run_bench_worker(*a);
    if (!cmd->parsed()) return -1;
    if (ops->parsed()) {
      // `fanout bench --json x ops` would otherwise accept flags that ops never reads.
      for (const char* flag :
           {"--devices",   "--modes",     "--steps",     "--min-seconds", "--warmup",
            "--bucket-mb", "--json",      "--peers",     "--svg",         "--trace",
            "--precision", "--grad-comm", "--mfu",       "--kernels",     "--wide",
            "--recompute", "--offload",   "--attention", "--projections", "--graphs",
            "--gemm-algo"}) {
        FANOUT_CHECK(cmd->count(flag) == 0, flag, " does not apply to fanout bench ops");
      }
      return run_bench_ops(*a);
    }
    // An empty file name given on purpose is refused, not read as "no file".
    for (const char* flag : {"--json", "--svg", "--trace"}) {
      if (cmd->count(flag) > 0) file_check_output(cmd->get_option(flag)->as<std::string>(), flag);
    }
    return run_bench(*a);
  };
}

}  // namespace fanout::app
