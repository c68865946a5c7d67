// EpNvfp4Ranks: deterministic per-rank weights and inputs for the NVFP4 layer on any provider.
#include "runtime/ep_nvfp4_ranks.hpp"

#include <cuda.h>

#include <algorithm>
#include <span>
#include <string>

#include "jit/compiler.hpp"
#include "megamoe/error.hpp"
#include "runtime/cuda_driver.hpp"
#include "runtime/device_select.hpp"
#include "runtime/module.hpp"
#include "runtime/nvfp4_kernel_weight_storage.hpp"

namespace megamoe::runtime {
namespace {

// Byte i of a fill is a function of (seed, i) alone, so any process reproduces any rank's
// weights. The mix is the SplitMix64 finalizer. Scale bytes are UE4M3 with exponent field 5..9
// (2^-2 .. 2^2) and any mantissa: finite, positive, no subnormals.
const char* kFillSource = R"(
extern "C" __global__ void megamoe_ep_fill(unsigned char* p, unsigned long long n,
                                           unsigned long long seed, int scale_bytes) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    unsigned long long z = seed + (i + 1ull) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    unsigned v = (unsigned)z & 0xFFu;
    if (scale_bytes) v = ((5u + (unsigned)(z >> 8) % 5u) << 3) | ((unsigned)(z >> 16) & 7u);
    p[i] = (unsigned char)v;
  }
}
)";

CUfunction fill_function() {
  jit::KernelRequest r;
  r.name = "ep_nvfp4_fill";
  r.source = kFillSource;
  r.entry = "megamoe_ep_fill";
  return load(*jit::compile(r));
}

void fill(const DeviceBuffer& b, std::uint64_t seed, bool scale_bytes, CUstream stream) {
  LaunchConfig cfg;
  cfg.grid = {1024, 1, 1};
  cfg.block = {256, 1, 1};
  cfg.stream = stream;
  const CUdeviceptr p = b.get();
  const unsigned long long n = b.size();
  const unsigned long long s = seed;
  const int mode = scale_bytes ? 1 : 0;
  launch_kernel(fill_function(), cfg, p, n, s, mode);
}

// Distinct, exactly representable per-expert global scales: (1 + j/8) / 512, j = global
// expert id mod 5; fc2 input scale 2^-9.
std::vector<float> global_scales(std::int64_t first_expert, std::int64_t experts) {
  std::vector<float> g(static_cast<std::size_t>(experts));
  for (std::int64_t e = 0; e < experts; ++e) {
    g[static_cast<std::size_t>(e)] =
        (1.0f + static_cast<float>((first_expert + e) % 5) / 8.0f) / 512.0f;
  }
  return g;
}

std::uint64_t rank_seed(std::uint64_t seed, int rank, std::uint64_t tensor) {
  return seed * 0x100000001B3ull + static_cast<std::uint64_t>(rank) * 16 + tensor;
}

}  // namespace

struct EpNvfp4Ranks::Rank {
  int rank = 0;
  std::unique_ptr<Nvfp4KernelWeightStorage> kernel;  // kernel layout and per-expert scales
  DeviceBuffer x, ids, weights, out;
};

EpNvfp4Ranks::EpNvfp4Ranks(const EpNvfp4Setup& setup, const SymmBuffer& buffer)
    : setup_(setup), buffer_(buffer) {
  const MoEConfig& c = setup_.config;
  if (!buffer.memory) throw_invalid("buffer.memory", "is required (allocate the buffer first)");
  if (buffer.plan.config.num_ranks != c.num_ranks ||
      buffer.plan.config.shape.hidden != c.shape.hidden ||
      buffer.plan.config.shape.intermediate != c.shape.intermediate ||
      buffer.plan.config.shape.num_experts != c.shape.num_experts ||
      buffer.plan.config.shape.top_k != c.shape.top_k ||
      buffer.plan.config.max_tokens_per_rank != c.max_tokens_per_rank) {
    throw_invalid("buffer", "must be planned for setup.config", describe(buffer.plan.config));
  }
  driven_ = buffer.memory->driven_ranks();
  const std::int64_t el = c.experts_per_rank(), h = c.shape.hidden, i = c.shape.intermediate;
  for (const int r : driven_) {
    auto rk = std::make_unique<Rank>();
    rk->rank = r;
    // Checkpoint tensors live only until the transform has run.
    Nvfp4CheckpointStorage ck;
    ck.w13 = DeviceBuffer(static_cast<std::size_t>(el * 2 * i * h / 2));
    ck.w13_sf = DeviceBuffer(static_cast<std::size_t>(el * 2 * i * h / 16));
    ck.w2 = DeviceBuffer(static_cast<std::size_t>(el * h * i / 2));
    ck.w2_sf = DeviceBuffer(static_cast<std::size_t>(el * h * i / 16));
    fill(ck.w13, rank_seed(setup_.seed, r, 0), false, nullptr);
    fill(ck.w13_sf, rank_seed(setup_.seed, r, 1), true, nullptr);
    fill(ck.w2, rank_seed(setup_.seed, r, 2), false, nullptr);
    fill(ck.w2_sf, rank_seed(setup_.seed, r, 3), true, nullptr);
    ck.w13_global = upload(global_scales(r * el, el));
    ck.w2_global = upload(global_scales(r * el + 2, el));
    ck.fc2_input_scale = upload(std::vector<float>(static_cast<std::size_t>(el), 1.0f / 512.0f));
    const Nvfp4CheckpointWeights in = ck.view(c);

    rk->kernel = transform_into_storage(c, in);
    weight_views_.push_back(rk->kernel->view);
    ranks_.push_back(std::move(rk));
  }
}

EpNvfp4Ranks::~EpNvfp4Ranks() = default;

void EpNvfp4Ranks::set_tokens(std::int64_t tokens) {
  const MoEConfig& c = setup_.config;
  if (tokens < 1 || tokens > c.max_tokens_per_rank) {
    throw_invalid(
        "tokens",
        "must be in [1, max_tokens_per_rank = " + std::to_string(c.max_tokens_per_rank) + "]",
        std::to_string(tokens));
  }
  set_rank_tokens(std::vector<std::int64_t>(static_cast<std::size_t>(c.num_ranks), tokens));
}

void EpNvfp4Ranks::set_rank_tokens(const std::vector<std::int64_t>& counts) {
  const Device gpu = cuda::current_gpu();  // every tensor is tagged with it
  const MoEConfig& c = setup_.config;
  if (counts.size() != static_cast<std::size_t>(c.num_ranks)) {
    throw_invalid("counts", "must have one entry per rank (" + std::to_string(c.num_ranks) + ")",
                  std::to_string(counts.size()) + " entries");
  }
  std::int64_t largest = 0;
  std::uint64_t mix = 0;
  for (const std::int64_t t : counts) {
    if (t < 0 || t > c.max_tokens_per_rank) {
      throw_invalid("counts",
                    "entries must be in [0, max_tokens_per_rank = " +
                        std::to_string(c.max_tokens_per_rank) + "]",
                    std::to_string(t));
    }
    largest = std::max(largest, t);
    mix = mix * 1000003ull + static_cast<std::uint64_t>(t) + 1;
  }
  const bool uniform = std::all_of(counts.begin(), counts.end(),
                                   [&](std::int64_t t) { return t == counts.front(); });
  // One input set per row of counts, the same in every process (uniform rows keep the seed they
  // always had): largest tokens per rank drawn (at least one), each rank keeping its first
  // counts[r].
  const std::uint64_t seed = setup_.seed * 1000003ull + static_cast<std::uint64_t>(largest) +
                             (uniform ? 0 : mix * 0x9E3779B97F4A7C15ull);
  const std::int64_t drawn = std::max<std::int64_t>(largest, 1);
  const reference::MoEInputs full = reference::random_inputs(c, drawn, setup_.routing, seed);
  const std::int64_t h = c.shape.hidden, k = c.shape.top_k;
  inputs_ = reference::first_tokens_of_each_rank(c, full, drawn, counts);
  rank_tokens_ = counts;
  pd_.clear();
  outputs_.clear();
  for (const std::unique_ptr<Rank>& rk : ranks_) {
    const std::int64_t r = rk->rank;
    const std::int64_t t = counts[static_cast<std::size_t>(r)], t0 = first_token(rk->rank);
    const std::vector<std::uint16_t> xb = reference::to_bf16_bits(
        std::span<const float>(inputs_.x.data() + t0 * h, static_cast<std::size_t>(t * h)));
    rk->x = upload(xb);
    rk->ids = upload(std::span<const std::int64_t>(inputs_.topk_idx.data() + t0 * k,
                                                   static_cast<std::size_t>(t * k)));
    rk->weights = upload(std::span<const float>(inputs_.topk_weights.data() + t0 * k,
                                                static_cast<std::size_t>(t * k)));
    rk->out = DeviceBuffer(static_cast<std::size_t>(t * h * 2));
    rk->out.fill_bytes(0xFF);
    // An idle rank's tensors are empty with null data, as torch's empty tensors are.
    PreDispatchInputs p;
    p.rank = rk->rank;
    p.x = TensorView::contiguous(rk->x.as<void>(), DType::bf16, {t, h}, gpu);
    p.topk_idx = TensorView::contiguous(rk->ids.as<void>(), DType::i64, {t, k}, gpu);
    p.topk_weights = TensorView::contiguous(rk->weights.as<void>(), DType::f32, {t, k}, gpu);
    pd_.push_back(p);
    outputs_.push_back(
        {rk->rank, TensorView::contiguous(rk->out.as<void>(), DType::bf16, {t, h}, gpu)});
  }
}

std::int64_t EpNvfp4Ranks::tokens(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(rank_tokens_.size())) {
    throw_invalid("rank", "must be a rank of the last set_rank_tokens", std::to_string(rank));
  }
  return rank_tokens_[static_cast<std::size_t>(rank)];
}

std::int64_t EpNvfp4Ranks::first_token(int rank) const {
  std::int64_t n = 0;
  for (int r = 0; r < rank; ++r) n += rank_tokens_[static_cast<std::size_t>(r)];
  return n;
}

EpRouteCounts EpNvfp4Ranks::route_counts() const {
  const MoEConfig& c = setup_.config;
  const std::int64_t k = c.shape.top_k, el = c.experts_per_rank(), e = c.shape.num_experts;
  EpRouteCounts rc;
  rc.remote_in.assign(static_cast<std::size_t>(c.num_ranks), 0);
  rc.remote_out.assign(static_cast<std::size_t>(c.num_ranks), 0);
  for (int src = 0; src < c.num_ranks; ++src) {
    const std::int64_t t0 = first_token(src), t1 = t0 + tokens(src);
    for (std::int64_t j = t0 * k; j < t1 * k; ++j) {
      const std::int64_t id = inputs_.topk_idx[static_cast<std::size_t>(j)];
      if (id < 0 || id >= e) continue;
      ++rc.live;
      const std::int64_t owner = id / el;
      if (owner == src) continue;
      ++rc.remote_out[static_cast<std::size_t>(src)];
      ++rc.remote_in[static_cast<std::size_t>(owner)];
    }
  }
  return rc;
}

std::vector<std::int64_t> EpNvfp4Ranks::expert_route_counts() const {
  const std::int64_t e = setup_.config.shape.num_experts;
  std::vector<std::int64_t> count(static_cast<std::size_t>(e), 0);
  for (const std::int64_t id : inputs_.topk_idx) {
    if (id >= 0 && id < e) ++count[static_cast<std::size_t>(id)];
  }
  return count;
}

void EpNvfp4Ranks::pre_dispatch(megamoe::Stream stream) {
  if (rank_tokens_.empty()) throw_invalid("tokens", "set_tokens must run before pre_dispatch");
  mega_moe_pre_dispatch(buffer_, pd_, stream);
}

void EpNvfp4Ranks::moe(megamoe::Stream stream, bool share_largest) {
  if (rank_tokens_.empty()) throw_invalid("tokens", "set_tokens must run before moe");
  const std::int64_t largest = *std::max_element(rank_tokens_.begin(), rank_tokens_.end());
  nvfp4_mega_moe(buffer_, weight_views_, outputs_, stream, share_largest ? largest : 0);
}

std::vector<std::uint16_t> EpNvfp4Ranks::output(int rank) const {
  for (const std::unique_ptr<Rank>& rk : ranks_) {
    if (rk->rank != rank) continue;
    std::vector<std::uint16_t> host(rk->out.size() / 2);
    rk->out.copy_to_host(std::as_writable_bytes(std::span<std::uint16_t>(host)));
    return host;
  }
  throw_invalid("rank", "must be a rank this process drives", std::to_string(rank));
}

std::int64_t first_difference(const std::vector<std::uint16_t>& a,
                              const std::vector<std::uint16_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t j = 0; j < n; ++j) {
    if (a[j] != b[j]) return static_cast<std::int64_t>(j);
  }
  return a.size() == b.size() ? -1 : static_cast<std::int64_t>(n);
}

std::int64_t count_poison(const std::vector<std::uint16_t>& v) {
  std::int64_t n = 0;
  for (const std::uint16_t x : v) n += x == 0xFFFFu ? 1 : 0;
  return n;
}

}  // namespace megamoe::runtime
