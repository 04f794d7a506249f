# What a build of KokkosMLA has, declared once: CMake options (defaults from
# the Kokkos found) written into KokkosMLA_config.hpp as KOKKOSMLA_ENABLE_*,
# and the per-architecture sources each feature adds.
#   KokkosMLA_ENABLE_CUBLAS  16-bit and TF32 GEMMs through cuBLAS (CUDA builds)
#   KokkosMLA_ENABLE_SM80    mma.sync tensor-core paths (needs cuBLAS and a Kokkos
#                            CUDA architecture of compute capability 8.0 or newer)
#   KokkosMLA_ENABLE_SM90A   Hopper-only code (wgmma, TMA) in src/cuda/sm90a/*.cu,
#                            compiled by nvcc as CMake's CUDA language for sm_90a
#                            beside Kokkos' own sm_90 (nvcc_wrapper takes one arch)

macro(kokkosmla_declare_features)
  set(_cuda_arch_80 OFF)
  set(_cuda_arch_90 OFF)
  foreach(arch ${Kokkos_CUDA_ARCHITECTURES})
    if(arch GREATER_EQUAL 80)
      set(_cuda_arch_80 ON)
    endif()
    if(arch EQUAL 90)
      set(_cuda_arch_90 ON)
    endif()
  endforeach()
  kokkosmla_option_if(KokkosMLA_ENABLE_CUBLAS "16-bit and TF32 GEMMs through cuBLAS" Kokkos_ENABLE_CUDA)
  set(_sm80_default OFF)
  if(KokkosMLA_ENABLE_CUBLAS AND _cuda_arch_80)
    set(_sm80_default ON)
  endif()
  kokkosmla_option_if(KokkosMLA_ENABLE_SM80 "mma.sync tensor-core paths (compute capability 8.0+)" _sm80_default)
  set(_sm90a_default OFF)
  if(KokkosMLA_ENABLE_SM80 AND _cuda_arch_90)
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(_sm90a_default ON)
    endif()
  endif()
  kokkosmla_option_if(KokkosMLA_ENABLE_SM90A "Hopper-only code (sm_90a) beside Kokkos' sm_90" _sm90a_default)
  if(KokkosMLA_ENABLE_SM80 AND NOT KokkosMLA_ENABLE_CUBLAS)
    message(FATAL_ERROR "KokkosMLA_ENABLE_SM80 needs KokkosMLA_ENABLE_CUBLAS (the tensor-core paths' GEMMs)")
  endif()
  if(KokkosMLA_ENABLE_SM90A AND NOT KokkosMLA_ENABLE_SM80)
    message(FATAL_ERROR "KokkosMLA_ENABLE_SM90A needs KokkosMLA_ENABLE_SM80")
  endif()
  # 0/1 values for the config header.
  foreach(feature CUBLAS SM80 SM90A)
    if(KokkosMLA_ENABLE_${feature})
      set(KOKKOSMLA_ENABLE_${feature} 1)
    else()
      set(KOKKOSMLA_ENABLE_${feature} 0)
    endif()
  endforeach()
  if(KokkosMLA_ENABLE_SM90A)
    enable_language(CUDA)  # at directory scope: not possible inside a function
  endif()
  message(STATUS "KokkosMLA: cuBLAS ${KokkosMLA_ENABLE_CUBLAS}, sm_80 mma ${KokkosMLA_ENABLE_SM80}, sm_90a ${KokkosMLA_ENABLE_SM90A}")
endmacro()

function(kokkosmla_add_feature_sources target)
  if(KokkosMLA_ENABLE_CUBLAS)
    target_sources(${target} PRIVATE src/cuda/KokkosMLA_TensorGemm.cpp)
    target_link_libraries(${target} PRIVATE CUDA::cublas)
  endif()
  if(KokkosMLA_ENABLE_SM80)
    target_sources(${target} PRIVATE src/cuda/KokkosMLA_TensorPrefill.cpp src/cuda/KokkosMLA_FlashTensorSm80.cpp
                                     src/cuda/KokkosMLA_AbsorbedTensorPath.cpp
                                     src/cuda/KokkosMLA_DecodeTensorSm80.cpp)
  endif()
  if(KokkosMLA_ENABLE_SM90A)
    file(GLOB sm90a_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/sm90a/*.cu)
    target_sources(${target} PRIVATE ${sm90a_sources})
    # Kokkos' compile options reach CXX only; these files get nvcc's own, the
    # C++ standard Kokkos was built with (its headers need C++20 features then;
    # given as a flag, since CMake before 3.26 knows no C++20 for nvcc), and
    # Kokkos' include directories and definitions through the target.
    set(sm90a_standard 17)
    if(DEFINED Kokkos_CXX_STANDARD AND Kokkos_CXX_STANDARD GREATER 17)
      set(sm90a_standard ${Kokkos_CXX_STANDARD})
    endif()
    set_source_files_properties(${sm90a_sources} PROPERTIES COMPILE_OPTIONS
      "--extended-lambda;--expt-relaxed-constexpr;-gencode=arch=compute_90a,code=sm_90a;-std=c++${sm90a_standard}")
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF)
  endif()
endfunction()
