// One rank of `megamoe bench --ranks R` (docs/multi_gpu.md): NCCL communicator from a unique id
// relayed by the parent, the `nccl` symmetric buffer, weights and inputs from the shared seed,
// then per preset and token count: pre-dispatch, the MoE call (its entry barrier orders the ranks),
// optional bitwise comparison against R virtual ranks on rank 0's GPU, graph-replay timing.
#include "multi_gpu_rank.hpp"

#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "accuracy.hpp"
#include "megamoe/buffer.hpp"
#include "megamoe/error.hpp"
#include "megamoe/formats.hpp"
#include "megamoe/heuristics.hpp"
#include "megamoe/nvfp4_mega_moe.hpp"
#include "megamoe/presets.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/device_select.hpp"
#include "runtime/ep_nvfp4_ranks.hpp"
#include "runtime/nccl_library.hpp"
#include "runtime/nvfp4_mega_moe_kernels.hpp"

namespace megamoe::tool {
namespace {

using runtime::RankChannel;

ncclComm_t init_nccl(RankChannel& ch) {
  const nccl::Library& n = nccl::library();
  ncclUniqueId id{};
  std::string mine;
  if (ch.rank() == 0) {
    MEGAMOE_NCCL(n.ncclGetUniqueId(&id));
    mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  const std::string got = ch.broadcast(mine, 0);
  if (got.size() != sizeof(id)) {
    throw Error("rank " + std::to_string(ch.rank()) + ": the NCCL unique id arrived with " +
                std::to_string(got.size()) + " bytes, not " + std::to_string(sizeof(id)));
  }
  std::memcpy(&id, got.data(), sizeof(id));
  ncclComm_t comm = nullptr;
  MEGAMOE_NCCL(n.ncclCommInitRank(&comm, ch.size(), id, ch.rank()));
  return comm;
}

reference::RoutingOptions routing_of(const std::string& name) {
  reference::RoutingOptions r;
  if (name == "zipf") r.skew = reference::RoutingSkew::zipf;
  if (name == "zipf-by-id") r.skew = reference::RoutingSkew::zipf_by_id;
  if (name == "masked20") r.masked_fraction = 0.2;
  return r;
}

// The "status" field of a rank's sync region: {timed_out, rank, phase, spare}
// (kernels/megamoe/comm/rank_barrier.cuh).
struct KernelStatus {
  std::uint32_t timed_out = 0, rank = 0, phase = 0, spare = 0;
};

KernelStatus read_status(const SymmBuffer& b, int rank) {
  std::size_t offset = b.plan.region("sync").offset;
  bool found = false;
  for (const BufferRegion& f : b.plan.sync_fields) {
    if (f.name == "status") {
      offset += f.offset;
      found = true;
    }
  }
  if (!found) throw Unsupported("the buffer plan has no sync field 'status'");
  KernelStatus s;
  const auto p = reinterpret_cast<CUdeviceptr>(static_cast<char*>(b.memory->base(rank)) + offset);
  MEGAMOE_CU(cuda::driver().cuMemcpyDtoH(&s, p, sizeof(s)));
  return s;
}

std::string barrier_phase_name(std::uint32_t phase) {
  switch (phase) {
    case 1:
      return "1 (after FC1: rank-local grid barrier, fc2_pool complete)";
    case 2:
      return "2 (after FC2: cross-rank barrier, every rank's combine writes)";
    case 4:
      return "4 (entry: cross-rank, every rank's pre-dispatch published)";
    default:
      return std::to_string(phase) + " (unknown)";
  }
}

// The items joined by `sep`.
std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : sep) + item;
  return s;
}

// "128" for a uniform row, "0/37" for a ragged one.
std::string row_label(const std::vector<std::int64_t>& row) {
  const bool uniform =
      std::all_of(row.begin(), row.end(), [&](std::int64_t t) { return t == row.front(); });
  if (uniform) return std::to_string(row.front());
  std::vector<std::string> counts;
  for (const std::int64_t t : row) counts.push_back(std::to_string(t));
  return join(counts, "/");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string bytes_of(const std::vector<std::uint16_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 2);
}

std::vector<std::uint16_t> words_of(const std::string& s) {
  std::vector<std::uint16_t> v(s.size() / 2);
  std::memcpy(v.data(), s.data(), v.size() * 2);
  return v;
}

// Milliseconds per MoE call: a graph of `iters` calls, launched `reps` times, each launch after
// a host barrier so every rank's replay starts together.
double time_moe_ms(runtime::EpNvfp4Ranks& ranks, bool share_largest, const runtime::Stream& stream,
                   int iters, int reps, RankChannel& ch) {
  const cuda::Driver& d = cuda::driver();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  MEGAMOE_CU(d.cuStreamBeginCapture(stream.get(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < iters; ++i) ranks.moe(stream.get(), share_largest);
  MEGAMOE_CU(d.cuStreamEndCapture(stream.get(), &graph));
  MEGAMOE_CU(d.cuGraphInstantiateWithFlags(&exec, graph, 0));
  d.cuGraphDestroy(graph);
  runtime::Event start, stop;
  std::vector<double> ms;
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    ch.barrier();
    start.record(stream.get());
    MEGAMOE_CU(d.cuGraphLaunch(exec, stream.get()));
    stop.record(stream.get());
    stop.synchronize();
    if (r >= 0) ms.push_back(static_cast<double>(stop.elapsed_ms_since(start)) / iters);
  }
  d.cuGraphExecDestroy(exec);
  return median(ms);
}

struct Table {
  std::string md, csv;
  void row(const std::string& md_line, const std::string& csv_line) {
    md += md_line;
    csv += csv_line;
    std::printf("%s", md_line.c_str());
    std::fflush(stdout);
  }
};

std::vector<double> values_of(const std::vector<std::uint16_t>& bf16_bits) {
  std::vector<double> v(bf16_bits.size());
  std::transform(bf16_bits.begin(), bf16_bits.end(), v.begin(),
                 [](std::uint16_t x) { return formats::bf16_to_float(x); });
  return v;
}

// The comparison of every rank's NCCL output with the virtual run, on rank 0: "" when every
// rank's output is bitwise equal, or -- where `bitwise` is false (some rank ran another tile than
// the virtual run; the pipelined and wide kernels sum K in different orders) -- when every rank's
// output is within the oracle gates of the virtual one (cosine >= 0.99999, relative L2 <= 1e-3;
// `worst` gets the largest relative L2). Else one line per rank that fails.
std::string compare_with_virtual(const std::vector<std::string>& gathered,
                                 runtime::EpNvfp4Ranks& virt, const MoEConfig& c,
                                 const std::string& tokens, bool bitwise, bool& all_equal,
                                 double& worst) {
  std::string problems;
  all_equal = true;
  worst = 0.0;
  for (int r = 0; r < c.num_ranks; ++r) {
    const std::vector<std::uint16_t> multi = words_of(gathered[static_cast<std::size_t>(r)]);
    const std::vector<std::uint16_t> local = virt.output(r);
    const std::int64_t j = runtime::first_difference(multi, local);
    if (j < 0) continue;
    all_equal = false;
    char line[320];
    if (!bitwise && multi.size() == local.size()) {
      const Accuracy near = compare(values_of(multi), values_of(local));
      worst = std::max(worst, near.rel_l2);
      if (near.non_finite == 0 && near.cosine >= 0.99999 && near.rel_l2 <= 1e-3) continue;
      std::snprintf(line, sizeof(line),
                    "rank %d T=%s: cosine %.8f, relative L2 %.3e against the virtual run (gates "
                    "0.99999, 1e-3)\n",
                    r, tokens.c_str(), near.cosine, near.rel_l2);
      problems += line;
      continue;
    }
    const std::int64_t h = c.shape.hidden;
    std::snprintf(
        line, sizeof(line),
        "rank %d T=%s: first difference at token %lld column %lld: nccl 0x%04x, "
        "virtual 0x%04x\n",
        r, tokens.c_str(), static_cast<long long>(j / h), static_cast<long long>(j % h),
        j < static_cast<std::int64_t>(multi.size()) ? multi[static_cast<std::size_t>(j)] : 0u,
        j < static_cast<std::int64_t>(local.size()) ? local[static_cast<std::size_t>(j)] : 0u);
    problems += line;
  }
  return problems;
}

// Rank R-1 pre-dispatches but never calls the layer; the others must stop at the kernel's entry
// barrier (phase 4) with a fault naming rank and phase. Exits the process (the waiting ranks'
// contexts are dead).
[[noreturn]] void timeout_test(runtime::EpNvfp4Ranks& ranks, const SymmBuffer& buffer,
                               const runtime::Stream& stream, std::int64_t tokens,
                               std::int64_t peer_timeout_ms, RankChannel& ch) {
  const int me = ch.rank(), last = ch.size() - 1;
  ch.phase("timeout-test: pre-dispatch");
  ranks.set_tokens(tokens);
  ranks.pre_dispatch(stream.get());
  stream.synchronize();
  ch.barrier();
  std::string mine;
  if (me == last) {
    ch.phase("timeout-test: skipping the MoE call");
    mine = "skipped";
  } else {
    ch.phase("timeout-test: moe");
    try {
      ranks.moe(stream.get());
      stream.synchronize();
      mine = "completed";
    } catch (const CudaError& e) {
      mine = std::string("fault: ") + e.what();
    }
  }
  const std::vector<std::string> all = ch.all_gather(mine);
  // The rank that skipped still has a working context: it reads every rank's status word
  // through its peer mapping (a trapped process cannot read its own device memory any more).
  std::string statuses;
  if (me == last) {
    for (int p = 0; p < ch.size(); ++p) {
      const KernelStatus s = read_status(buffer, p);
      statuses.append(reinterpret_cast<const char*>(&s), sizeof(s));
    }
  }
  statuses = ch.broadcast(statuses, last);
  bool ok = true;
  std::string verdict;
  if (me != last) {
    KernelStatus s;
    std::memcpy(&s, statuses.data() + static_cast<std::size_t>(me) * sizeof(s), sizeof(s));
    std::string missing;
    for (int q = 0; q < ch.size(); ++q) {
      if (all[static_cast<std::size_t>(q)] == "skipped") {
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      }
    }
    const DeviceFault fault("nvfp4_mega_moe: cross-rank timeout on rank " + std::to_string(me) +
                            ": the kernel stopped waiting in phase " + barrier_phase_name(s.phase) +
                            " after " + std::to_string(peer_timeout_ms) +
                            " ms (status word: timed_out=" + std::to_string(s.timed_out) +
                            ", rank=" + std::to_string(s.rank) +
                            "); rank(s) that did not arrive: " +
                            (missing.empty() ? "none" : missing) + " (" + mine + ")");
    const bool named = s.timed_out == 1 && s.rank == static_cast<std::uint32_t>(me) &&
                       s.phase == 4 && missing == std::to_string(last) &&
                       mine.starts_with("fault: ");
    ok = named;
    verdict = std::string(named ? "PASS" : "FAIL") + " rank " + std::to_string(me) +
              ": DeviceFault: " + fault.what();
    std::printf("%s\n", verdict.c_str());
    std::fflush(stdout);
    ch.report(verdict);
  } else {
    ch.report("skipped the MoE call");
  }
  // No teardown: contexts that trapped cannot free anything, and NCCL's destroy would wait on
  // them.
  std::fflush(stdout);
  std::_Exit(ok ? 0 : 1);
}

// Bytes of one result row in a combine slot: bf16, or e4m3 codes and an f32 scale per 128.
std::int64_t combine_row_bytes(std::int64_t hidden, bool fp8_combine) {
  return fp8_combine ? hidden + 4 * (hidden / 128) : 2 * hidden;
}

}  // namespace

double nvlink_payload_bytes(std::int64_t hidden, std::int64_t remote_in, bool fp8_combine) {
  const double per_route =
      static_cast<double>(hidden / 2 + hidden / 16 + 8 + combine_row_bytes(hidden, fp8_combine));
  return per_route * static_cast<double>(remote_in);
}

double nvlink_kernel_bytes_model(std::int64_t hidden, std::int64_t inter, int top_k, int ranks,
                                 std::int64_t tokens, int ctas, std::int64_t remote_in,
                                 bool fp8_combine, bool wide_kernel) {
  const double rows = static_cast<double>(remote_in);
  const double reads_per_row = wide_kernel ? 1.0 : static_cast<double>(inter / 32);
  const double fc1_reads = rows * reads_per_row * static_cast<double>(hidden / 2 + hidden / 16);
  const double route_meta = rows * 8.0;
  const double combine = rows * static_cast<double>(combine_row_bytes(hidden, fp8_combine));
  const double phase0 =
      static_cast<double>(ctas) * (ranks - 1) * static_cast<double>(tokens) * top_k * 4.0;
  return fc1_reads + route_meta + combine + phase0;
}

int run_bench_rank(const MultiGpuBenchOptions& o, RankChannel& ch) {
  const int me = ch.rank(), R = ch.size();
  ch.phase("cuda-init");
  // MEGAMOE_DEVICE already made GPU `rank` the default; selecting it again makes a mismatch
  // (a caller overriding MEGAMOE_DEVICE) impossible to miss.
  cuda::select_device(me);
  const runtime::DeviceProperties props = runtime::device_properties(me);
  ch.phase("nccl-init");
  const ncclComm_t comm = init_nccl(ch);
  // Uniform rows, then each ragged one twice: every rank's BLOCK_M from its own count, then
  // from the row's largest (max_tokens_across_ranks). The plan holds the largest count of any.
  std::vector<std::pair<std::vector<std::int64_t>, bool>> rows;
  for (const std::int64_t t : o.tokens)
    rows.emplace_back(std::vector(static_cast<std::size_t>(R), t), false);
  for (const std::vector<std::int64_t>& row : o.rank_tokens) {
    rows.emplace_back(row, false);
    if (*std::max_element(row.begin(), row.end()) > 0) rows.emplace_back(row, true);
  }
  std::int64_t t_max = 1;
  for (const auto& row : rows) {
    t_max = std::max(t_max, *std::max_element(row.first.begin(), row.first.end()));
  }
  bool all_ok = true;
  Table table;
  if (me == 0) {
    char head[512];
    std::snprintf(head, sizeof(head),
                  "# megamoe bench --ranks %d: NVFP4 MegaMoE, one process per GPU (nccl provider)"
                  "\n\n%s, driver %d, NCCL %d, seed %llu, routing %s, %s combine slots, %d calls "
                  "per graph, median of %d\n\n",
                  R, props.name.c_str(), props.driver_version, nccl::library().version,
                  static_cast<unsigned long long>(o.seed), o.routing.c_str(),
                  o.fp8_combine ? "fp8" : "bf16", o.iters, o.reps);
    table.row(head, "");
    table.row(
        "| preset | R | T/rank | BLOCK_M | us/call (slowest rank) | remote routes in (max rank) | "
        "payload MB/rank | payload GB/s | kernel MB/rank (model) | kernel GB/s (model) | "
        "virtual check |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        "preset,ranks,tokens,block_m,us,remote_in_max,payload_bytes,payload_gbs,"
        "kernel_bytes_model,kernel_gbs_model,check,rank_block_m,rank_passes,rank_us\n");
  }

  for (const std::string& preset_name : o.presets) {
    MoEConfig c;
    c.shape = find_preset(preset_name).shape;
    c.num_ranks = R;
    c.max_tokens_per_rank = t_max;
    c.fp8_combine = o.fp8_combine;
    ch.phase(preset_name + ": buffer");
    const SymmBuffer buffer = get_symm_buffer_for_mega_moe(c, "nccl", comm);
    ch.phase(preset_name + ": weights");
    const runtime::EpNvfp4Setup setup{c, o.seed, routing_of(o.routing)};
    runtime::EpNvfp4Ranks ranks(setup, buffer);
    runtime::Stream stream;
    if (o.timeout_test) {
      timeout_test(ranks, buffer, stream, o.tokens.empty() ? 1 : o.tokens.front(),
                   o.peer_timeout_ms, ch);
    }

    std::unique_ptr<SymmBuffer> virtual_buffer;
    std::unique_ptr<runtime::EpNvfp4Ranks> virtual_ranks;
    for (const auto& [row, share] : rows) {
      const std::int64_t T_row =
          std::max<std::int64_t>(*std::max_element(row.begin(), row.end()), 1);
      // This rank's count sets its BLOCK_M table, as in the library (at least 1), unless the row
      // passes its largest as max_tokens_across_ranks; the row's largest sets the virtual run's.
      const std::int64_t T =
          share ? T_row : std::max<std::int64_t>(row[static_cast<std::size_t>(me)], 1);
      const std::string label =
          row_label(row) + (share ? " (max " + std::to_string(T_row) + ")" : "");
      const std::string where = preset_name + " T=" + label;
      ch.phase(where + ": pre-dispatch");
      ranks.set_rank_tokens(row);
      ranks.pre_dispatch(stream.get());
      stream.synchronize();
      // No host barrier here: the kernel's own entry barrier (separate processes) must make
      // every rank's pre-dispatch visible before phase 0 reads it -- this run tests it.
      ch.phase(where + ": moe");
      ranks.moe(stream.get(), share);
      stream.synchronize();
      const std::vector<std::uint16_t> out = ranks.output(me);
      std::string check = "-";
      std::string problems;
      if (const std::int64_t unwritten = runtime::count_poison(out); unwritten != 0) {
        problems += "rank " + std::to_string(me) + " " + where + ": " + std::to_string(unwritten) +
                    " output elements never written\n";
      }
      // Tile choice on the device: this rank's verdict, from every rank's routes to every
      // expert, against the host's computation of the same rule.
      const int table_bm = get_block_m_for_mega_moe(c, T);
      int ran_bm = table_bm;
      const std::vector<std::int64_t> all = ranks.expert_route_counts();
      const std::int64_t el = c.experts_per_rank();
      const std::vector<std::int64_t> own(all.begin() + me * el, all.begin() + (me + 1) * el);
      // The rank's weight passes with the table's tile and with 32 (what the rule weighs).
      std::int64_t passes_table = 0, passes_32 = 0;
      for (const std::int64_t n : own) {
        passes_table += (n + table_bm - 1) / table_bm;
        passes_32 += (n + 31) / 32;
      }
      if (const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(c, T)) {
        ran_bm = nvfp4_tile_choice_of_last_call(buffer, me);
        const int want = tile_choice_for_route_counts(all, table_bm, *alt,
                                                      tile_choice_min_gain_passes(c, table_bm));
        if (ran_bm != want) {
          problems += "rank " + std::to_string(me) + " " + where + ": the device chose BLOCK_M " +
                      std::to_string(ran_bm) + ", the rule on every expert's routes gives " +
                      std::to_string(want) + "\n";
        }
      }
      const std::vector<std::string> ran = ch.gather(std::to_string(ran_bm), 0);
      const std::vector<std::string> tables = ch.gather(std::to_string(table_bm), 0);
      const std::vector<std::string> passes =
          ch.gather(std::to_string(passes_table) + ":" + std::to_string(passes_32), 0);
      if (o.check_virtual) {
        ch.phase(where + ": virtual check");
        const std::vector<std::string> gathered = ch.gather(bytes_of(out), 0);
        if (me == 0) {
          if (!virtual_ranks) {
            virtual_buffer = std::make_unique<SymmBuffer>(get_symm_buffer_for_mega_moe(c));
            virtual_ranks = std::make_unique<runtime::EpNvfp4Ranks>(setup, *virtual_buffer);
          }
          virtual_ranks->set_rank_tokens(row);
          virtual_ranks->pre_dispatch(stream.get());
          virtual_ranks->moe(stream.get(), share);
          stream.synchronize();
          // Bitwise where every rank ran the tile the virtual run ran (its table from the row's
          // largest count, then its verdict).
          int virtual_bm = get_block_m_for_mega_moe(c, T_row);
          if (get_device_choice_block_m_for_mega_moe(c, T_row)) {
            virtual_bm = nvfp4_tile_choice_of_last_call(*virtual_buffer, 0);
          }
          bool same_tiles = true;
          for (const std::string& r : ran) same_tiles &= std::stoi(r) == virtual_bm;
          bool equal = true;
          double worst = 0.0;
          const std::string diff =
              compare_with_virtual(gathered, *virtual_ranks, c, label, same_tiles, equal, worst);
          problems += diff;
          char near[96];
          std::snprintf(near, sizeof(near), "within the gates (virtual ran %d, relL2 %.1e)",
                        virtual_bm, worst);
          check = !diff.empty() ? "DIFFERS" : equal ? "bitwise equal" : near;
        }
      }
      ch.phase(where + ": timing");
      const double ms = time_moe_ms(ranks, share, stream, o.iters, o.reps, ch);
      // Back-to-back calls on unchanged inputs must reproduce the first output exactly.
      if (runtime::first_difference(ranks.output(me), out) >= 0) {
        problems += "rank " + std::to_string(me) + " " + where +
                    ": the output changed across repeated calls\n";
      }
      const runtime::EpRouteCounts rc = ranks.route_counts();
      char stats[128];
      std::snprintf(stats, sizeof(stats), "%.6f", ms);
      const std::vector<std::string> times = ch.gather(stats, 0);
      const std::vector<std::string> problem_lists = ch.gather(problems, 0);
      if (!problems.empty()) all_ok = false;
      if (me != 0) continue;
      double slowest = 0;
      for (const std::string& t : times) slowest = std::max(slowest, std::atof(t.c_str()));
      std::string all_problems;
      for (const std::string& p : problem_lists) all_problems += p;
      if (!all_problems.empty()) {
        std::fprintf(stderr, "%s", all_problems.c_str());
        all_ok = false;
        if (check != "DIFFERS") check = "FAILED";
      }
      const std::int64_t rin = *std::max_element(rc.remote_in.begin(), rc.remote_in.end());
      const double payload = nvlink_payload_bytes(c.shape.hidden, rin, c.fp8_combine);
      // The wide kernel's reads where every rank ran it, else the pipelined kernel's re-reads.
      const bool all_wide = std::all_of(ran.begin(), ran.end(), [&](const std::string& r) {
        return runtime::nvfp4_kernel_version(c, std::stoi(r)) == runtime::Nvfp4KernelVersion::wide;
      });
      const double kernel =
          nvlink_kernel_bytes_model(c.shape.hidden, c.shape.intermediate, c.shape.top_k, R, T_row,
                                    get_num_sms(), rin, c.fp8_combine, all_wide);
      const double s = slowest * 1e-3;
      // "8", or with a choice on the device "8 / 32 (ran 32, 8)": the table's tile, the
      // alternative and what each rank ran. Ranks whose counts give different tables (ragged
      // rows): "8, 16 (ran 8, 16)".
      std::string bm_md = std::to_string(table_bm);
      const std::string tables_csv = join(tables, ";"), bm_csv = join(ran, ";"),
                        passes_csv = join(passes, ";"), ran_list = join(ran, ", ");
      const bool one_table = std::all_of(tables.begin(), tables.end(),
                                         [&](const std::string& t) { return t == tables.front(); });
      std::vector<std::string> times_us;
      for (const std::string& t : times) {
        char us[32];
        std::snprintf(us, sizeof(us), "%.1f", std::atof(t.c_str()) * 1e3);
        times_us.emplace_back(us);
      }
      const std::string times_csv = join(times_us, ";");
      if (!one_table) {
        bm_md = join(tables, ", ") + " (ran " + ran_list + ")";
      } else if (const std::optional<int> alt = get_device_choice_block_m_for_mega_moe(c, T)) {
        bm_md += " / " + std::to_string(*alt) + " (ran " + ran_list + ")";
      }
      char md[640], csv[640];
      std::snprintf(md, sizeof(md),
                    "| %s | %d | %s | %s | %.1f | %lld | %.3f | %.1f | %.3f | %.1f | %s |\n",
                    preset_name.c_str(), R, label.c_str(), bm_md.c_str(), slowest * 1e3,
                    static_cast<long long>(rin), payload / 1e6, payload / s / 1e9, kernel / 1e6,
                    kernel / s / 1e9, check.c_str());
      std::snprintf(csv, sizeof(csv), "%s,%d,%s,%s,%.3f,%lld,%.0f,%.3f,%.0f,%.3f,%s,%s,%s,%s\n",
                    preset_name.c_str(), R, label.c_str(),
                    one_table ? tables.front().c_str() : tables_csv.c_str(), slowest * 1e3,
                    static_cast<long long>(rin), payload, payload / s / 1e9, kernel,
                    kernel / s / 1e9, check.c_str(), bm_csv.c_str(), passes_csv.c_str(),
                    times_csv.c_str());
      table.row(md, csv);
    }
    ch.phase(preset_name + ": teardown");
    // Window deregistration is collective: every rank frees its buffer at the same point.
    ch.barrier();
  }
  if (me == 0 && !o.out_prefix.empty()) {
    for (const auto& [ext, text] : {std::pair{".md", &table.md}, std::pair{".csv", &table.csv}}) {
      if (FILE* f = std::fopen((o.out_prefix + ext).c_str(), "w")) {
        std::fputs(text->c_str(), f);
        std::fclose(f);
      }
    }
  }
  ch.phase("nccl-destroy");
  MEGAMOE_NCCL(nccl::library().ncclCommDestroy(comm));
  ch.report(me == 0 ? table.md : std::string());
  return all_ok ? 0 : 1;
}

}  // namespace megamoe::tool
