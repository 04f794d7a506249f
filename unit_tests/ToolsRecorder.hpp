#ifndef KOKKOSMLA_TEST_TOOLSRECORDER_HPP
#define KOKKOSMLA_TEST_TOOLSRECORDER_HPP
// What Kokkos Tools see of the library while a Recording lives: the kernels
// it launches, the views it allocates, its profiling regions.

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace KokkosMLA {
namespace Test {

inline bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

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
inline Recorder* recorder = nullptr;

inline void on_kernel(const char* name, const std::uint32_t, std::uint64_t* id) {
  *id = recorder->kernels.size();
  recorder->kernels.push_back(name);
  if (!starts_with(name, "KokkosMLA::") && !recorder->inside_library_region())
    recorder->unlabelled.push_back(std::string("kernel '") + name + "'");
}

inline void on_allocate(const Kokkos_Profiling_SpaceHandle space, const char* label, const void*,
                        const std::uint64_t bytes) {
  recorder->allocations.push_back(label);
  // "Kokkos::" labels are the runtime's own buffers (e.g. team scratch on a GPU),
  // made on demand by a launch; no library can name them.
  if (!starts_with(label, "KokkosMLA::") && !starts_with(label, "Kokkos::") &&
      !recorder->inside_library_region())
    recorder->unlabelled.push_back(std::string("allocation '") + label + "' of " + std::to_string(bytes) +
                                   " bytes in " + space.name);
}

inline void on_push(const char* name) { recorder->regions.push_back(name); }

inline void on_pop() {
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

inline std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

/// Allocations labelled `label` that r saw.
inline std::size_t allocations_named(const Recorder& r, const char* label) {
  return std::size_t(std::count(r.allocations.begin(), r.allocations.end(), label));
}

}  // namespace Test
}  // namespace KokkosMLA

#endif
