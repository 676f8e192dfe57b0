// store_kvcache: baseline kernel (key/value as strided views of qkv, padded slots) vs the
// reference scatter, and the harness.
#include "fk/tasks/kv_cache.h"
#include "mem_test_util.h"

namespace fk::testing {
namespace {

template <class T, int kHkv, int kD> void check_store_kvcache(int64_t tokens) {
  constexpr int kHq = 4 * kHkv;
  constexpr int64_t kRow = int64_t(kHkv) * kD, kW = (kHq + 2 * kHkv) * int64_t(kD);
  const int64_t slots = 2 * tokens + 16;
  Tensor qkv = empty({tokens, kW}, dtype_of<T>);
  fill_normal(qkv, 61);
  const T* key = qkv.data<T>() + kHq * kD;
  const T* value = key + kRow;
  Tensor kc = empty({slots, kHkv, kD}, dtype_of<T>), vc = empty({slots, kHkv, kD}, dtype_of<T>);
  Tensor kc0 = empty_like(kc), vc0 = empty_like(vc);
  fill_normal(kc0, 62);
  fill_normal(vc0, 63);
  copy_(kc, kc0);
  copy_(vc, vc0);
  // Distinct random slots; every 5th token is padding (slot -1).
  std::vector<int64_t> sm = to_host<int64_t>(fk::tasks::random_distinct_slots(tokens, slots, 64));
  for (size_t i = 3; i < sm.size(); i += 5) sm[i] = -1;
  Tensor slot_mapping = to_device(sm, {tokens});
  fk::kernels::store_kvcache<T, kHkv, kD>(key, kW, kD, value, kW, kD, kc.data<T>(), vc.data<T>(),
                                          slot_mapping.data<int64_t>(), tokens, current_stream());
  FK_CHECK_LAUNCH();
  Tensor k_ref = empty({slots, kHkv, kD}, DType::kF32), v_ref = empty({slots, kHkv, kD}, DType::kF32);
  fk::kernels::reference::store_kvcache_ref<T>(k_ref.data<float>(), kc0.data<T>(), slots, key, kW, kD,
                                               slot_mapping.data<int64_t>(), tokens, kHkv, kD, current_stream());
  fk::kernels::reference::store_kvcache_ref<T>(v_ref.data<float>(), vc0.data<T>(), slots, value, kW, kD,
                                               slot_mapping.data<int64_t>(), tokens, kHkv, kD, current_stream());
  FK_CHECK_LAUNCH();
  const Tolerance exact{0, 0, 0};
  FK_EXPECT_CLOSE(kc, k_ref, exact);
  FK_EXPECT_CLOSE(vc, v_ref, exact);
}

#define FK_KV_TESTS(D, HKV, HD)                                                                                    \
  TEST(Kernels, StoreKVCache_##D##_hkv##HKV##_d##HD##_t1) { FK_REQUIRE_GPU(); check_store_kvcache<D, HKV, HD>(1); }  \
  TEST(Kernels, StoreKVCache_##D##_hkv##HKV##_d##HD##_t7) { FK_REQUIRE_GPU(); check_store_kvcache<D, HKV, HD>(7); }  \
  TEST(Kernels, StoreKVCache_##D##_hkv##HKV##_d##HD##_t256) { FK_REQUIRE_GPU(); check_store_kvcache<D, HKV, HD>(256); } \
  TEST(Kernels, StoreKVCache_##D##_hkv##HKV##_d##HD##_t4096) { FK_REQUIRE_GPU(); check_store_kvcache<D, HKV, HD>(4096); }

FK_KV_TESTS(bf16, 8, 128)
FK_KV_TESTS(bf16, 4, 128)
FK_KV_TESTS(f16, 2, 64)
FK_KV_TESTS(f32, 8, 128)

struct KVCfg {
  static constexpr int num_kv_heads = 8, head_dim = 128;
  using scalar_t = bf16;
};
class TestStoreKVCache {  // shaped like templates/store_kvcache.cu.mustache
 public:
  void forward(const Tensor& key, const Tensor& value, Tensor& k_cache, Tensor& v_cache, const Tensor& slot_mapping) {
    fk::tasks::store_kvcache_forward<KVCfg>(key, value, k_cache, v_cache, slot_mapping);
  }
};

TEST(Tasks, StoreKVCache_bf16_hkv8_d128_t7) {
  FK_REQUIRE_GPU();
  fk::tasks::StoreKVCacheInstance<TestStoreKVCache, KVCfg> inst(tokens_case(7));
  check_task_instance(inst);
}
TEST(Tasks, StoreKVCache_bf16_hkv8_d128_t4096) {
  FK_REQUIRE_GPU();
  fk::tasks::StoreKVCacheInstance<TestStoreKVCache, KVCfg> inst(tokens_case(4096));
  check_task_instance(inst);
}

}  // namespace
}  // namespace fk::testing
