#ifndef KOKKOSMLA_PATHLISTS_HPP
#define KOKKOSMLA_PATHLISTS_HPP
// The ordered lists a Plan and a CachePlan choose from: fastest first, the
// portable paths last (the last of each list takes every problem of its
// types). A unit not built for a Scalar, space or build is skipped at compile time.

#include "KokkosMLA_CachePaths.hpp"
#include "KokkosMLA_DecompressedPaths.hpp"
#include "KokkosMLA_LatentPaths.hpp"
#include "KokkosMLA_WidenedPaths.hpp"
#include "cuda/KokkosMLA_DecodeSm90.hpp"
#include "cuda/KokkosMLA_DecodeTensorSm80.hpp"
#include "cuda/KokkosMLA_FlashSm90.hpp"
#include "cuda/KokkosMLA_FlashTensorSm80.hpp"

namespace KokkosMLA {
namespace Impl {

/// Prefill: 16-bit types end at Widened, float and double at Fused.
using PrefillPaths = PathList<FlashSm90Path, FlashTensorSm80Path, WidenedPrefillPath, DecompressedHostPath,
                              DecompressedGemmPath, DecompressedBlockedPath, DecompressedPortablePath,
                              AbsorbedPath, FusedRowPath, FusedPath>;

/// Cache attention: 16-bit types end at Widened, float and double at CacheLatent.
/// FP8 caches the tensor-core paths do not take go to Fp8CachePath (Widened).
using CachePaths = PathList<DecodeSm90Path, DecodeTensorSm80Path, Fp8CachePath, WidenedCachePath,
                            CacheHostPath, CacheGemmPath, CacheBlockedPath, CacheRegistersPath, CacheLatentPath>;

}  // namespace Impl
}  // namespace KokkosMLA

#endif
