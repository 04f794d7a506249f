#ifndef KOKKOSMLA_HPP
#define KOKKOSMLA_HPP
/// Umbrella header: multi-head latent attention on Kokkos.
#include <KokkosMLA_config.hpp>
#include <KokkosMLA_Options.hpp>
#include <KokkosMLA_Attention.hpp>
#include <KokkosMLA_Merge.hpp>
#include <KokkosMLA_Fp8.hpp>
#include <KokkosMLA_Cache.hpp>
#endif
