// The allocator's checking modes, private to the runtime (runner.cc, tensor.cu) and its tests.
// Task code cannot include this (it is not under runtime/include), so no public API tells a task
// whether a call is watched (Note [Watched and unwatched calls] in runner.cc).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fk::detail {

/// While on, fk::empty poisons fresh memory with 0xFF bytes (NaN in every float dtype).
void set_poison_allocations(bool on);

/// While on, fk::empty surrounds every tensor with guard bytes (Note [Guard regions] in tensor.cu).
void set_guard_allocations(bool on);
/// Verifies the guards of every live guarded tensor and reports violations recorded since the
/// last call (also those found when guarded tensors were freed). Synchronises the device.
/// Returns "" when no guard byte changed, else a description of the out-of-bounds write.
std::string check_guards();
/// A guarded tensor's memory (without its guards) and its allocation serial number.
struct LiveAllocation {
  const void* data;
  size_t bytes;
  unsigned long long serial;
};
std::vector<LiveAllocation> live_guarded_allocations();
/// While on, the fills fk::empty makes (poison, guards) run on a private stream and complete
/// before fk::empty returns, instead of on the current stream (Note [Stream gate] in runner.cc).
void set_allocator_side_fills(bool on);
/// Whether an allocation ran out of memory while side fills held freed blocks back (and clears
/// it): the gated call of a case that only fits with block reuse (Note [Stream gate]).
bool take_deferred_oom();

}  // namespace fk::detail
