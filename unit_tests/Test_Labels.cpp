// Kokkos Tools see the library by its labels: every kernel it launches and
// every view it allocates is named "KokkosMLA::...". Kernels of Kokkos Kernels
// (the GEMMs of Decompressed) carry their own names, so they must run inside a
// "KokkosMLA::" profiling region instead.

#include "Reference.hpp"
#include "ToolsRecorder.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace KokkosMLA {
namespace Test {
namespace {

TEST(Labels, EveryKernelAndAllocationIsNamedKokkosMLA) {
  const Shape s{2, 5, 7, 3, 4, 6};
  Problem<float> p(s, 1);  // the test's own views, made before recording starts
  for (Algorithm a : kAlgorithms) {
    Options opt;
    opt.algorithm = a;
    Recorder r;
    {
      Recording recording(r);
      {
        Plan<float, Space> plan(Space(), s, opt);
        plan.execute(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out);
        Space().fence();
      }
      attention(Space(), p.q, p.latent, p.w_uk, p.w_uv, p.out, opt);
      Space().fence();
    }
    const std::string what =
        to_string(a) + ": kernels [" + joined(r.kernels) + "], allocations [" + joined(r.allocations) + "]";
    EXPECT_TRUE(r.unlabelled.empty()) << joined(r.unlabelled) << "\n" << what;
    EXPECT_TRUE(r.regions.empty()) << "unbalanced regions: " << joined(r.regions);
    EXPECT_TRUE(std::any_of(r.kernels.begin(), r.kernels.end(),
                            [](const std::string& k) { return starts_with(k, "KokkosMLA::"); }))
        << "no KokkosMLA kernel seen: " << what;
    const bool has_workspace = a != Algorithm::Fused;
    const auto workspaces =
        std::count(r.allocations.begin(), r.allocations.end(), "KokkosMLA::Plan::workspace");
    EXPECT_EQ(workspaces, has_workspace ? 2 : 0) << "one workspace per Plan: " << what;
  }
}

/// A kernel body (a functor: a GPU lambda may not sit in a test's private TestBody).
struct Nothing {
  KOKKOS_INLINE_FUNCTION void operator()(int) const {}
};

// The recorder itself: a foreign name is caught outside a KokkosMLA region and
// accepted inside one.
TEST(Labels, RecorderTellsForeignNames) {
  Recorder r;
  {
    Recording recording(r);
    Kokkos::parallel_for("other::kernel", Kokkos::RangePolicy<Space>(0, 1), Nothing());
    Kokkos::Profiling::pushRegion("KokkosMLA::test");
    Kokkos::parallel_for("inside::kernel", Kokkos::RangePolicy<Space>(0, 1), Nothing());
    Kokkos::View<float*, Space> unlabelled("other::view", 1);
    Kokkos::Profiling::popRegion();
    Kokkos::View<float*, Space> labelled(Kokkos::view_alloc(Kokkos::WithoutInitializing, "KokkosMLA::v"), 1);
    Space().fence();
  }
  ASSERT_EQ(r.unlabelled.size(), 1u) << joined(r.unlabelled);
  EXPECT_EQ(r.unlabelled[0], "kernel 'other::kernel'");
  EXPECT_EQ(r.kernels.front(), "other::kernel");
}

TEST(Labels, CallbacksAreRestored) {
  const auto before = Kokkos::Tools::Experimental::get_callbacks();
  {
    Recorder r;
    Recording recording(r);
  }
  const auto after = Kokkos::Tools::Experimental::get_callbacks();
  EXPECT_EQ(after.begin_parallel_for, before.begin_parallel_for);
  EXPECT_EQ(after.allocate_data, before.allocate_data);
  EXPECT_EQ(after.push_region, before.push_region);
  EXPECT_EQ(after.pop_region, before.pop_region);
}

}  // namespace
}  // namespace Test
}  // namespace KokkosMLA
