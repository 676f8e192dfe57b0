// The checking and timing protocol against tasks that cheat (docs/candidates.md, "What each
// defence guarantees"): one synthetic task per class of exploit, each caught with its status and
// reason, and an honest one that passes. The candidate-level suite is
// tests/fixtures/candidates_runtime/ (run through scripts/bench_candidates.py on the GPU).
#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "fk/runtime/check.h"
#include "fk/runtime/cuda_check.h"
#include "fk/runtime/random.h"
#include "fk/runtime/runner.h"
#include "fk/runtime/task.h"
#include "fk/runtime/tensor.h"
#include "checking_modes.h"
#include "kernel_trace.h"
#include "fk/tasks/moe.h"
#include "gpu_test_util.h"

namespace {

enum class Cheat {
  kNone,
  kSkipWhenUnwatched,   // computes only when its fresh output reads as poison (a checked call)
  kMutateWhenUnwatched, // correct, but scribbles on its input when its output is not poisoned
  kZeros,               // writes zeros (the tolerance below would let them through)
  kEcho,                // returns a copy of its input (likewise)
  kRunThrows,           // forward raises
  kReferenceThrows,     // the harness's reference raises (not the task's fault)
  kLeavesCudaError,     // correct, but a CUDA call of its forward fails and it does not check (Note [Pending CUDA errors])
  kWrongShape,          // returns one element more than the reference (an output kept from a larger case)
};

__global__ void scale2_kernel(const float* x, float* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = 2.f * x[i] + 0.25f;
}

/// out = 2 x + 1/4 over n floats, 4 rotating sets; `loose` makes the tolerance accept anything
/// finite, so only the degenerate probes can reject a degenerate output.
class Scale2Instance final : public fk::TaskInstance {
 public:
  Scale2Instance(Cheat cheat, bool loose, int64_t n = 4096) : cheat_(cheat), loose_(loose), n_(n) {
    for (int s = 0; s < 4; ++s) x_.push_back(fk::empty({n_}, fk::DType::kF32));
    out_.resize(4);
  }
  int num_sets() const override { return 4; }
  void randomize(uint64_t seed) override {
    for (int s = 0; s < 4; ++s) refresh(s, fk::mix_seed(seed, s));
  }
  void refresh(int s, uint64_t seed) override { fk::fill_normal(x_[s], seed); }
  void run(int s) override {
    if (cheat_ == Cheat::kRunThrows) throw std::runtime_error("forward failed");
    fk::Tensor out = fk::empty({n_}, fk::DType::kF32);
    // What a cheating kernel can read on the device (a host read here, for brevity; it makes the
    // gated call inconclusive, which is fine for these tests).
    const bool watched =
        (cheat_ == Cheat::kSkipWhenUnwatched || cheat_ == Cheat::kMutateWhenUnwatched) && looks_poisoned(out);
    cudaStream_t st = fk::current_stream();
    switch (cheat_) {
      case Cheat::kZeros: FK_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), st)); break;
      case Cheat::kEcho: fk::copy_(out, x_[s]); break;
      case Cheat::kSkipWhenUnwatched:
        if (watched) launch(s, out);
        break;
      case Cheat::kMutateWhenUnwatched:
        launch(s, out);
        if (!watched) FK_CUDA_CHECK(cudaMemsetAsync(x_[s].data_ptr(), 0, 4, st));
        break;
      case Cheat::kWrongShape:
        out = fk::empty({n_ + 1}, fk::DType::kF32);
        launch(s, out);
        break;
      case Cheat::kLeavesCudaError:
        launch(s, out);
        (void)cudaSetDevice(-1);  // refused (no such device): the error stays pending
        break;
      default: launch(s, out);
    }
    out_[s] = out;
  }
  std::vector<fk::Tensor> inputs(int s) override { return {x_[s]}; }
  std::vector<fk::CheckedOutput> reference(int s) override {
    if (cheat_ == Cheat::kReferenceThrows) throw std::runtime_error("reference failed");
    std::vector<float> x = fk::to_host<float>(x_[s]), e(x.size());
    for (size_t i = 0; i < x.size(); ++i) e[i] = 2.f * x[i] + 0.25f;
    fk::Tolerance tol{1e-5, 1e-5, 1e-5};
    if (loose_) tol = {1e30, 1e30, 1e30};
    return {{"out", out_[s], fk::to_device(e, {n_}), tol}};
  }
  fk::Cost cost() const override { return {double(n_) * 2, double(n_) * 8}; }

 private:
  static bool looks_poisoned(const fk::Tensor& t) {
    uint32_t w = 0;
    FK_CUDA_CHECK(cudaStreamSynchronize(fk::current_stream()));
    FK_CUDA_CHECK(cudaMemcpy(&w, t.data_ptr(), 4, cudaMemcpyDeviceToHost));
    return w == 0xFFFFFFFFu;
  }
  void launch(int s, fk::Tensor& out) {
    scale2_kernel<<<static_cast<unsigned>((n_ + 255) / 256), 256, 0, fk::current_stream()>>>(x_[s].data<float>(),
                                                                                               out.data<float>(), n_);
    FK_CHECK_LAUNCH();
  }
  Cheat cheat_;
  bool loose_;
  int64_t n_;
  std::vector<fk::Tensor> x_, out_;
};

fk::CheckOutcome bench(Cheat cheat, bool loose = false) {
  Scale2Instance inst(cheat, loose);
  fk::TimingOptions t;
  t.warmup = 2;
  t.min_iters = 20;
  t.max_iters = 40;
  t.target_ms = 1e9;  // run all 40: several batches, so the random spot check happens
  return fk::check_and_time_instance(inst, 2, 77, t);
}

TEST(Protocol, HonestTaskPassesCheckedAndTimed) {
  FK_REQUIRE_GPU();
  const fk::CheckOutcome o = bench(Cheat::kNone);
  EXPECT_EQ(o.status, "PASSED") << o.message;
}

TEST(Protocol, SkippingWorkWhenUnwatchedIsCaughtInTimedCalls) {
  FK_REQUIRE_GPU();
  // Passes every watched (poisoned) check; its timed calls do nothing.
  Scale2Instance inst(Cheat::kSkipWhenUnwatched, false);
  EXPECT_EQ(fk::check_instance(inst, 3, 5).status, "PASSED") << "the watched checks alone cannot see it";
  const fk::CheckOutcome o = bench(Cheat::kSkipWhenUnwatched);
  EXPECT_EQ(o.status, "INCORRECT");
  EXPECT_EQ(o.reason, "timed-output") << o.message;
}

TEST(Protocol, InputMutatedInATimedCallIsCaught) {
  FK_REQUIRE_GPU();
  const fk::CheckOutcome o = bench(Cheat::kMutateWhenUnwatched);
  EXPECT_EQ(o.status, "INCORRECT");
  EXPECT_EQ(o.reason, "timed-output") << o.message;
  EXPECT_NE(o.message.find("modified an input"), std::string::npos) << o.message;
}

/// A degenerate output under a tolerance that accepts anything finite: only the probe can reject it.
void expect_degenerate(Cheat cheat, const std::string& needle) {
  Scale2Instance inst(cheat, /*loose=*/true);
  const fk::CheckOutcome o = fk::check_instance(inst, 2, 5);
  EXPECT_EQ(o.status, "INCORRECT");
  EXPECT_EQ(o.reason, "degenerate-output") << o.message;
  EXPECT_NE(o.message.find(needle), std::string::npos) << o.message;
}

TEST(Protocol, ConstantOutputIsDegenerateEvenInsideTolerance) {
  FK_REQUIRE_GPU();
  expect_degenerate(Cheat::kZeros, "one value repeated");
}

TEST(Protocol, EchoedInputIsDegenerateEvenInsideTolerance) {
  FK_REQUIRE_GPU();
  expect_degenerate(Cheat::kEcho, "byte for byte input 0");
}

TEST(Protocol, AnOutputOfAnotherShapeIsIncorrectNotAnInfraError) {
  FK_REQUIRE_GPU();
  Scale2Instance inst(Cheat::kWrongShape, false);
  const fk::CheckOutcome o = fk::check_instance(inst, 2, 5);
  EXPECT_EQ(o.status, "INCORRECT") << o.message;
  EXPECT_EQ(o.reason, "wrong-shape") << o.message;
  EXPECT_NE(o.message.find("f32[4097]"), std::string::npos) << o.message;
}

TEST(Protocol, ErrorsInTaskCodeAreRuntimeErrorsAndOthersInfraErrors) {
  FK_REQUIRE_GPU();
  Scale2Instance throws_in_forward(Cheat::kRunThrows, false);
  const fk::CheckOutcome a = fk::check_instance(throws_in_forward, 1, 5);
  EXPECT_EQ(a.status, "RUNTIME_ERROR") << a.message;
  Scale2Instance throws_in_reference(Cheat::kReferenceThrows, false);
  const fk::CheckOutcome b = fk::check_instance(throws_in_reference, 1, 5);
  EXPECT_EQ(b.status, "INFRA_ERROR") << b.message;
  EXPECT_EQ(b.reason, "infra");
  // A CUDA error the forward leaves pending is the task's, not the next checker's (Note [Pending CUDA errors]).
  Scale2Instance leaves_error(Cheat::kLeavesCudaError, false);
  const fk::CheckOutcome c = fk::check_instance(leaves_error, 1, 5);
  EXPECT_EQ(c.status, "RUNTIME_ERROR") << c.message;
  EXPECT_NE(c.message.find("left a CUDA error pending"), std::string::npos) << c.message;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(bench(Cheat::kNone).status, "PASSED");  // and the next case runs clean
}

TEST(Protocol, FingerprintSeesOneByteAtAnUnalignedStart) {
  FK_REQUIRE_GPU();
  fk::Tensor t = fk::empty({1 << 12, 3}, fk::DType::kBF16);
  fk::fill_normal(t, 3);
  const fk::Tensor v = t.narrow_first(1, (1 << 12) - 1);  // starts 6 bytes in: the byte-wise path
  const uint64_t before = fk::fingerprint(v);
  unsigned char byte = 0x11;
  FK_CUDA_CHECK(cudaMemcpy(static_cast<char*>(v.data_ptr()) + 777, &byte, 1, cudaMemcpyHostToDevice));
  EXPECT_NE(before, fk::fingerprint(v));
}

// Off-registry shapes are host-side: no GPU needed.
fk::TaskInfo task_with(std::vector<fk::ShapeCase> cases) {
  fk::TaskInfo t;
  t.name = "demo_task";
  t.cases = std::move(cases);
  return t;
}

std::vector<const fk::ShapeCase*> all_of(const fk::TaskInfo& t) {
  std::vector<const fk::ShapeCase*> v;
  for (const auto& c : t.cases) v.push_back(&c);
  return v;
}

bool prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

TEST(OffRegistry, TokenCountsArePrimesOffTheRegistryAndFollowTheSeed) {
  const fk::TaskInfo t = task_with({{"t1", "decode", {{"num_tokens", 1}}},
                                    {"t256", "decode", {{"num_tokens", 256}}},
                                    {"t4096", "prefill", {{"num_tokens", 4096}}}});
  std::set<std::string> names;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const auto xs = fk::off_registry_cases(t, all_of(t), seed, 1);
    ASSERT_EQ(xs.size(), 2u);
    for (const auto& x : xs) {
      const int64_t n = x.get("num_tokens");
      EXPECT_TRUE(prime(n)) << x.name;
      EXPECT_TRUE(n != 1 && n != 256 && n != 4096) << x.name;
      EXPECT_EQ(x.name, "xt" + std::to_string(n));
      names.insert(x.regime + x.name);
    }
    EXPECT_LE(xs[0].get("num_tokens"), 256);  // decode: within the decode range
    const auto again = fk::off_registry_cases(t, all_of(t), seed, 1);
    EXPECT_EQ(again[0].name, xs[0].name) << "the same seed draws the same cases";
  }
  EXPECT_GT(names.size(), 20u) << "different seeds draw different cases";
}

// The sequence-parallel tasks' dim (Note [Collective tasks]): a prime number of rows per rank, so that every drawn
// case divides over the ranks, named xr<p>.
TEST(OffRegistry, RowsPerRankArePrimesNamedXr) {
  const fk::TaskInfo t = task_with({{"t64", "decode", {{"rows_per_rank", 32}}},
                                    {"t256", "decode", {{"rows_per_rank", 128}}},
                                    {"t1024", "prefill", {{"rows_per_rank", 512}}},
                                    {"t16384", "prefill", {{"rows_per_rank", 8192}}}});
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const auto xs = fk::off_registry_cases(t, all_of(t), seed, 1);
    ASSERT_EQ(xs.size(), 2u);
    for (const auto& x : xs) {
      const int64_t r = x.get("rows_per_rank");
      EXPECT_TRUE(prime(r)) << x.name;
      EXPECT_EQ(x.name, "xr" + std::to_string(r));
      EXPECT_EQ(x.dims.size(), 1u) << x.name;
    }
    EXPECT_LE(xs[0].get("rows_per_rank"), 128);  // decode: within the decode range
    EXPECT_GE(xs[1].get("rows_per_rank"), 256);  // prefill: widened at most to half the smallest
  }
}

TEST(OffRegistry, BatchesAreRaggedWithOddOffGridLengths) {
  const fk::TaskInfo t = task_with({{"b1_kv2048", "decode", {{"batch", 1}, {"kv_len", 2048}}},
                                    {"b8_kv8192", "decode", {{"batch", 8}, {"kv_len", 8192}}},
                                    {"b8_s2048", "prefill", {{"batch", 8}, {"seq_len", 2048}}}});
  int ragged = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    for (const auto& x : fk::off_registry_cases(t, all_of(t), seed, 1)) {
      const std::string key = x.regime == "decode" ? "kv_len" : "seq_len";
      const int64_t l = x.get(key), b = x.get("batch");
      EXPECT_EQ(l % 2, 1) << x.name;
      EXPECT_GE(b, 1);
      EXPECT_LE(b, 8);
      EXPECT_EQ(x.has("ragged"), b > 1) << x.name;
      ragged += x.has("ragged");
    }
  }
  EXPECT_GT(ragged, 0);
}

TEST(OffRegistry, UnknownDimsGetNoneAndSaySo) {
  const fk::TaskInfo t = task_with({{"e8", "decode", {{"experts", 8}}}});
  std::string note;
  EXPECT_TRUE(fk::off_registry_cases(t, all_of(t), 1, 1, &note).empty());
  EXPECT_NE(note.find("experts"), std::string::npos) << note;
  EXPECT_TRUE(fk::off_registry_cases(task_with({{"t1", "decode", {{"num_tokens", 1}}}}), {}, 1, 0).empty());
}

// Note [Capped cases] (host only): lengths capped, batch and other dims kept, renamed, nullopt when within.
TEST(CappedCases, LengthsAreCappedAndTheCaseRenamed) {
  const fk::ShapeCase prefill{"b2_s1024", "prefill", {{"batch", 2}, {"seq_len", 1024}}};
  const auto x = fk::capped_case(prefill, 64);
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->name, "b2_s1024_cap64");
  EXPECT_EQ(x->regime, "prefill");
  EXPECT_EQ(x->get("seq_len"), 64);
  EXPECT_EQ(x->get("batch"), 2) << "batch is not a length";
  const fk::ShapeCase decode{"b1_kv2048", "decode", {{"batch", 1}, {"kv_len", 2048}}};
  EXPECT_EQ(fk::capped_case(decode, 100)->get("kv_len"), 100);
  const fk::ShapeCase tokens{"t4096", "prefill", {{"num_tokens", 4096}}};
  EXPECT_EQ(fk::capped_case(tokens, 7)->get("num_tokens"), 7);
  EXPECT_FALSE(fk::capped_case(fk::ShapeCase{"t1", "decode", {{"num_tokens", 1}}}, 64).has_value())
      << "a case within the cap runs as it is";
  EXPECT_FALSE(fk::capped_case(fk::ShapeCase{"e8", "decode", {{"experts", 8}}}, 4).has_value())
      << "only lengths are capped";
}

// Note [Routing near-ties] (host only): 8 experts in 4 groups of 2, top-2 from the best 2 groups.
TEST(RoutingNearTie, AcceptsOnlySelectionsWithinTheTie) {
  const fk::tasks::RoutingRowSpec r{8, 2, 4, 2, true};
  // Groups: {0,1} 1.0+0.2, {2,3} 0.9+0.3, {4,5} 0.5+0.4, {6,7} 0.1+0.0: kept {0,1} and {2,3}.
  std::vector<double> c{1.0, 0.2, 0.9, 0.3, 0.5, 0.4, 0.1, 0.0};
  const int32_t exact[2] = {0, 2}, swapped[2] = {2, 0}, wrong[2] = {0, 3}, dup[2] = {0, 0}, out_of_range[2] = {0, 8};
  EXPECT_TRUE(fk::tasks::routing_near_tie(c, r, exact, 2e-6));
  EXPECT_TRUE(fk::tasks::routing_near_tie(c, r, swapped, 2e-6)) << "the same experts in another order";
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, wrong, 2e-6));
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, dup, 2e-6));
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, out_of_range, 2e-6));
  // Expert 3 within 1e-7 of expert 2: either is a valid second choice; 1e-3 away it is not.
  c[3] = 0.9 - 1e-7;
  EXPECT_TRUE(fk::tasks::routing_near_tie(c, r, wrong, 2e-6));
  c[3] = 0.9 - 1e-3;
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, wrong, 2e-6));
  // Group {4,5} scores 0.75 + 0.4 = 1.15 against the kept groups' 1.2: not a tie, so picking from it
  // is wrong; at 0.75 + 0.45 = 1.2 the three groups tie and {0, 4} (the best of groups 0 and 2) is valid.
  c = {1.0, 0.2, 0.9, 0.3, 0.75, 0.4, 0.1, 0.0};
  const int32_t other_group[2] = {0, 4}, other_group_not_best[2] = {0, 5};
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, other_group, 2e-6));
  c[5] = 0.45;
  EXPECT_TRUE(fk::tasks::routing_near_tie(c, r, other_group, 2e-6));
  EXPECT_FALSE(fk::tasks::routing_near_tie(c, r, other_group_not_best, 2e-6)) << "not the best of the groups it used";
}

}  // namespace

// ---- Note [CUPTI cross-check] (runtime/src/kernel_trace.cc) ------------------------------------

namespace cupti_test {

using fk::detail::CallKind;
using fk::detail::TracedCall;
using fk::detail::TracedOp;

TracedCall call(CallKind kind, std::vector<std::string> names, uint64_t t0 = 0, uint64_t each_ns = 10000) {
  TracedCall c;
  c.kind = kind;
  for (const auto& n : names) {
    c.ops.push_back({n, t0, t0 + each_ns});
    t0 += each_ns;
  }
  return c;
}

TEST(CuptiCrossCheck, TimedCallsMustRunWhatSomeCheckedCallRan) {
  // Host-only. A tuning first call runs an extra kernel; the timed calls run what later checked calls ran.
  std::vector<TracedCall> calls = {call(CallKind::kChecked, {"tune", "gemm", "norm"}), call(CallKind::kChecked, {"gemm", "norm"}),
                                   call(CallKind::kTimed, {"gemm", "norm"}), call(CallKind::kTimed, {"norm", "gemm"})};
  std::string suspect;
  nlohmann::json r = fk::detail::cross_check(calls, 25.0, &suspect);
  EXPECT_EQ(r["verdict"], "consistent") << suspect;
  EXPECT_TRUE(suspect.empty());
  EXPECT_EQ(r["timed_mismatches"], 0);
  EXPECT_EQ(r["distinct_checked_sets"], 2);
  EXPECT_DOUBLE_EQ(r["median_span_us"].get<double>(), 20.0);
  // A timed call that skips a kernel, or runs another one.
  calls.push_back(call(CallKind::kTimed, {"gemm"}));
  calls.push_back(call(CallKind::kTimed, {"gemm", "cheap"}));
  r = fk::detail::cross_check(calls, 25.0, &suspect);
  EXPECT_EQ(r["verdict"], "kernel-set");
  EXPECT_EQ(r["timed_mismatches"], 2);
  EXPECT_NE(suspect.find("2 of 4 timed calls ran other GPU work than any checked call (timed call 2: gemm; the last checked call: "
                         "gemm, norm)"),
            std::string::npos)
      << suspect;
  // Twice the same kernel where the checked calls ran it once is another multiset.
  r = fk::detail::cross_check({call(CallKind::kChecked, {"k"}), call(CallKind::kTimed, {"k", "k"})}, 25.0, &suspect);
  EXPECT_EQ(r["verdict"], "kernel-set");
  EXPECT_NE(suspect.find("timed call 0: k x2"), std::string::npos) << suspect;
}

TEST(CuptiCrossCheck, TimedCallsThatRanNothingAreSuspect) {
  // Host-only. Every task launches something on its stream; a case whose timed calls ran nothing
  // there (and whose checked calls did not either, so the kernel sets agree) is not consistent.
  std::string suspect;
  nlohmann::json r = fk::detail::cross_check({call(CallKind::kChecked, {}), call(CallKind::kTimed, {})}, 25.0, &suspect);
  EXPECT_EQ(r["verdict"], "no-work");
  EXPECT_NE(suspect.find("no GPU work on the task's stream in any of 1 timed calls"), std::string::npos) << suspect;
  r = fk::detail::cross_check({call(CallKind::kChecked, {"k"}), call(CallKind::kTimed, {"k"})}, 25.0, &suspect);
  EXPECT_EQ(r["verdict"], "consistent") << suspect;
}

TEST(CuptiCrossCheck, EventTimesShorterThanTheWorkAreSuspect) {
  // Host-only. The timed calls' own work spans 40 us; events that say 20 us did not time it.
  const std::vector<TracedCall> calls = {call(CallKind::kChecked, {"a", "b"}, 0, 20000), call(CallKind::kTimed, {"a", "b"}, 0, 20000)};
  std::string suspect;
  EXPECT_EQ(fk::detail::cross_check(calls, 40.5, &suspect)["verdict"], "consistent") << suspect;
  nlohmann::json r = fk::detail::cross_check(calls, 20.0, &suspect);
  EXPECT_EQ(r["verdict"], "event-time");
  EXPECT_NE(suspect.find("below 0.8 x the median span"), std::string::npos) << suspect;
}

__global__ void traced_kernel(float* x) { x[threadIdx.x] += 1.f; }

TEST(CuptiCrossCheck, TraceAttributesEachCallsWorkOnItsStream) {
  FK_REQUIRE_GPU();
  if (!fk::detail::KernelTrace::built_with_cupti()) GTEST_SKIP() << "built without CUPTI";
  fk::Tensor x = fk::empty({32}, fk::DType::kF32);
  FK_CUDA_CHECK(cudaMemset(x.data<float>(), 0, 32 * sizeof(float)));
  cudaStream_t s;
  FK_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    fk::detail::KernelTrace trace;
    ASSERT_EQ(fk::detail::KernelTrace::active(), &trace);
    traced_kernel<<<1, 32, 0, s>>>(x.data<float>());  // outside any call: not counted
    trace.begin_call(CallKind::kChecked, s);
    traced_kernel<<<1, 32, 0, s>>>(x.data<float>());
    FK_CUDA_CHECK(cudaMemsetAsync(x.data<float>(), 0, 4, s));
    traced_kernel<<<1, 32, 0, nullptr>>>(x.data<float>());  // another stream: not counted
    {
      // The allocator's guard and poison fills, and the guard check of a guarded tensor freed
      // inside the call, are the runtime's work: not counted.
      fk::StreamGuard on_s(s);
      fk::detail::set_guard_allocations(true);
      fk::detail::set_poison_allocations(true);
      fk::Tensor scratch = fk::empty({64}, fk::DType::kF32);
      fk::detail::set_poison_allocations(false);
      fk::detail::set_guard_allocations(false);
    }
    trace.end_call();
    trace.begin_call(CallKind::kTimed, s);
    traced_kernel<<<1, 32, 0, s>>>(x.data<float>());
    trace.end_call();
    uint64_t dropped = 1;
    const std::vector<TracedCall> calls = trace.take(&dropped);
    EXPECT_EQ(dropped, 0u);
    ASSERT_EQ(calls.size(), 2u);
    ASSERT_EQ(calls[0].ops.size(), 2u);
    EXPECT_NE(calls[0].ops[0].name.find("traced_kernel"), std::string::npos) << calls[0].ops[0].name;
    EXPECT_EQ(calls[0].ops[1].name, "[memset]");
    ASSERT_EQ(calls[1].ops.size(), 1u);
    EXPECT_GE(calls[1].ops[0].end, calls[1].ops[0].start);
    std::string suspect;
    EXPECT_EQ(fk::detail::cross_check(calls, 1000.0, &suspect)["verdict"], "kernel-set") << "the memset is missing in the timed call";
    EXPECT_TRUE(trace.take().empty()) << "a take empties the trace";
  }
  EXPECT_EQ(fk::detail::KernelTrace::active(), nullptr);
  cudaStreamDestroy(s);
}

}  // namespace cupti_test
