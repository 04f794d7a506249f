# Finds Kokkos and Kokkos Kernels and guarantees working targets
# Kokkos::kokkos and Kokkos::kokkoskernels. Standalone Kokkos 4.x exports
# both. The Trilinos-built Kokkos 3.4 that Debian ships exports
# trilinos_kokkos* targets without include directories, and a Kokkos::kokkos
# whose include directory is computed one level off (/usr/lib/include); the
# shim below points both at the real headers.
# An installed package's config sets KokkosMLA_KOKKOS_HINT and
# KokkosMLA_KOKKOSKERNELS_HINT to the packages it was built with.
macro(kokkosmla_find_dependencies)
  find_package(Kokkos REQUIRED HINTS "${KokkosMLA_KOKKOS_HINT}")
  find_package(KokkosKernels REQUIRED HINTS "${KokkosMLA_KOKKOSKERNELS_HINT}")
  if(Kokkos_ENABLE_CUDA)
    find_package(CUDAToolkit REQUIRED)  # cuBLAS, for 16-bit GEMMs
  endif()
  if(TARGET trilinos_kokkoscore)
    find_path(KokkosMLA_KOKKOS_INCLUDE_DIR Kokkos_Core.hpp REQUIRED
      HINTS ${Kokkos_INCLUDE_DIRS} ${Kokkos_DIR}/../../../../include
      PATH_SUFFIXES trilinos)
    if(NOT TARGET Kokkos::kokkos)
      add_library(Kokkos::kokkos INTERFACE IMPORTED)
    endif()
    set_target_properties(Kokkos::kokkos PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${KokkosMLA_KOKKOS_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "trilinos_kokkoscontainers;trilinos_kokkoscore")
    if(NOT TARGET Kokkos::kokkoskernels)
      add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
      set_target_properties(Kokkos::kokkoskernels PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${KokkosMLA_KOKKOS_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "trilinos_kokkoskernels;Kokkos::kokkos")
    endif()
  endif()
  foreach(target Kokkos::kokkos Kokkos::kokkoskernels)
    if(NOT TARGET ${target})
      message(FATAL_ERROR "KokkosMLA: Kokkos (${Kokkos_DIR}) and Kokkos Kernels (${KokkosKernels_DIR}) provide no ${target}")
    endif()
  endforeach()
endmacro()
