// Kokkos Tools see the library by its labels: every kernel it launches and
// every view it allocates is named "KokkosMLA::...". Kernels of Kokkos Kernels
// (the GEMMs of Decompressed) carry their own names, so they must run inside a
// "KokkosMLA::" profiling region instead.

#include "Reference.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace KokkosMLA {
namespace Test {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// What the callbacks saw. Kokkos Tools callbacks are plain function pointers,
/// so they reach the recorder through a global.
struct Recorder {
  std::vector<std::string> kernels, allocations, regions;
  std::vector<std::string> unlabelled;  ///< events not attributable to KokkosMLA

  bool inside_library_region() const {
    return std::any_of(regions.begin(), regions.end(),
                       [](const std::string& r) { return starts_with(r, "KokkosMLA::"); });
  }
};
Recorder* recorder = nullptr;

void on_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  *id = recorder->kernels.size();
  recorder->kernels.push_back(name);
  if (!starts_with(name, "KokkosMLA::") && !recorder->inside_library_region())
    recorder->unlabelled.push_back(std::string("kernel '") + name + "'");
}

void on_allocate(const Kokkos_Profiling_SpaceHandle space, const char* label, const void*,
                 const std::uint64_t bytes) {
  recorder->allocations.push_back(label);
  // "Kokkos::" labels are the runtime's own buffers (e.g. team scratch on a GPU),
  // made on demand by a launch; no library can name them.
  if (!starts_with(label, "KokkosMLA::") && !starts_with(label, "Kokkos::") &&
      !recorder->inside_library_region())
    recorder->unlabelled.push_back(std::string("allocation '") + label + "' of " + std::to_string(bytes) +
                                   " bytes in " + space.name);
}

void on_push(const char* name) { recorder->regions.push_back(name); }

void on_pop() {
  if (!recorder->regions.empty()) recorder->regions.pop_back();
}

/// Records while alive; puts back whatever callbacks were installed before.
class Recording {
 public:
  explicit Recording(Recorder& r) : saved_(Kokkos::Tools::Experimental::get_callbacks()) {
    namespace Tools = Kokkos::Tools::Experimental;
    recorder = &r;
    Tools::set_begin_parallel_for_callback(on_kernel);
    Tools::set_begin_parallel_reduce_callback(on_kernel);
    Tools::set_begin_parallel_scan_callback(on_kernel);
    Tools::set_allocate_data_callback(on_allocate);
    Tools::set_push_region_callback(on_push);
    Tools::set_pop_region_callback(on_pop);
  }
  ~Recording() {
    Kokkos::Tools::Experimental::set_callbacks(saved_);
    recorder = nullptr;
  }
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

 private:
  Kokkos::Tools::Experimental::EventSet saved_;
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

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
