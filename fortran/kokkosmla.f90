! Fortran bindings of KokkosMLA over its C interface (include/kokkosmla.h).
!
! Layout: the library takes row-major (C order) arrays. Fortran arrays are
! column-major, so reversing the order of the dimensions gives the same bytes:
!
!   library (row-major)    Fortran array
!   q      (B, T, H, D)    q(D, H, T, B)
!   latent (B, S, R)       latent(R, S, B)
!   w_uk   (R, H, D)       w_uk(D, H, R)
!   w_uv   (R, H, D)       w_uv(D, H, R)
!   out    (B, T, H, D)    out(D, H, T, B)
!
! so q(d, h, t, b) in Fortran (1-based) is q[b-1][t-1][h-1][d-1] of the library.
!
! Two levels:
!   - kokkosmla_attention(q, latent, w_uk, w_uv, out [, opt] [, errmsg]) takes
!     ordinary Fortran arrays of real(c_float) or real(c_double), takes the
!     extents from their shapes and checks them against each other. On device
!     builds it copies the arrays to the device and out back on every call; on
!     host builds it passes them directly.
!   - The bind(c) interfaces below are the C functions themselves, on c_ptr
!     arguments in Kokkos' default memory space (kokkosmla_malloc and the copy
!     functions), for code that keeps its arrays on the device.
! Every function returns a status: KOKKOSMLA_SUCCESS (0) or an error code, with
! the message in kokkosmla_error_message(). Initialisation rules are those of the
! C header: call kokkosmla_initialize() before, and kokkosmla_finalize() after,
! unless the program initializes Kokkos itself.
module kokkosmla
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! kokkosmla_status
  integer(c_int), parameter, public :: KOKKOSMLA_SUCCESS = 0
  integer(c_int), parameter, public :: KOKKOSMLA_ERROR_INVALID_ARGUMENT = 1
  integer(c_int), parameter, public :: KOKKOSMLA_ERROR_NOT_INITIALIZED = 2
  integer(c_int), parameter, public :: KOKKOSMLA_ERROR_INTERNAL = 3
  ! kokkosmla_algorithm
  integer(c_int), parameter, public :: KOKKOSMLA_AUTO = 0
  integer(c_int), parameter, public :: KOKKOSMLA_FUSED = 1
  integer(c_int), parameter, public :: KOKKOSMLA_DECOMPRESSED = 2
  integer(c_int), parameter, public :: KOKKOSMLA_ABSORBED = 3
  ! kokkosmla_cache_storage
  integer(c_int), parameter, public :: KOKKOSMLA_CACHE_NATIVE = 0
  integer(c_int), parameter, public :: KOKKOSMLA_CACHE_FP8_PER_BLOCK = 1
  integer(c_int), parameter, public :: KOKKOSMLA_CACHE_FP8_PER_TENSOR = 2

  !> The C struct kokkosmla_options. scale = 0 means the default (1/sqrt(D), and
  !> 1/sqrt(D + Dr) for cache attention); causal /= 0 is causal; the later
  !> fields are off when 0.
  type, bind(c), public :: kokkosmla_options
    real(c_double) :: scale = 0
    integer(c_int) :: causal = 1
    integer(c_int) :: algorithm = KOKKOSMLA_AUTO
    integer(c_int) :: kv_splits = 0
    integer(c_int) :: skip_index_check = 0
    integer(c_int) :: allow_tf32 = 0
    integer(c_int) :: emulate_fp32 = 0
  end type kokkosmla_options

  !> The C struct kokkosmla_cache: a latent KV cache in default-memory-space
  !> memory (see include/kokkosmla.h). In Fortran order a paged cache is
  !> latent(W, page_size, pages), k_rope(Dr, page_size, pages) and
  !> block_table(pages_per_sequence, B) of 0-based page indices; a contiguous
  !> one latent(W, page_size, B) with block_table c_null_ptr; seqlens(B).
  !> With storage KOKKOSMLA_CACHE_FP8_PER_BLOCK or _PER_TENSOR, latent holds
  !> the tokens' bytes, latent(bytes, page_size, pages) of kind c_int8_t with
  !> bytes from kokkosmla_fp8_token_bytes, k_rope is c_null_ptr and packed 0.
  type, bind(c), public :: kokkosmla_cache
    type(c_ptr) :: latent = c_null_ptr
    type(c_ptr) :: k_rope = c_null_ptr
    type(c_ptr) :: block_table = c_null_ptr
    type(c_ptr) :: seqlens = c_null_ptr
    integer(c_int64_t) :: pages = 0
    integer(c_int64_t) :: page_size = 0
    integer(c_int64_t) :: pages_per_sequence = 0
    integer(c_int64_t) :: latent_dim = 0
    integer(c_int64_t) :: rope_dim = 0
    integer(c_int) :: packed = 0
    integer(c_int) :: storage = KOKKOSMLA_CACHE_NATIVE
    integer(c_int) :: fp8_power_of_two_scales = 0
    real(c_float) :: fp8_latent_scale = 0
    real(c_float) :: fp8_rope_scale = 0
  end type kokkosmla_cache

  public :: kokkosmla_options_default, kokkosmla_initialize, kokkosmla_finalize
  public :: kokkosmla_is_initialized, kokkosmla_host_memory_is_accessible
  public :: kokkosmla_malloc, kokkosmla_free, kokkosmla_copy_to_device, kokkosmla_copy_to_host
  public :: kokkosmla_attention_f, kokkosmla_attention_d
  public :: kokkosmla_plan_create_f, kokkosmla_plan_create_d, kokkosmla_plan_execute_f
  public :: kokkosmla_plan_execute_d, kokkosmla_plan_algorithm_f, kokkosmla_plan_algorithm_d
  public :: kokkosmla_plan_destroy_f, kokkosmla_plan_destroy_d
  public :: kokkosmla_attention, kokkosmla_error_message
  public :: kokkosmla_cache_plan_create_f, kokkosmla_cache_plan_create_d
  public :: kokkosmla_cache_plan_execute_f, kokkosmla_cache_plan_execute_d
  public :: kokkosmla_plan_execute_strided_f, kokkosmla_plan_execute_strided_d
  public :: kokkosmla_cache_plan_execute_strided_f, kokkosmla_cache_plan_execute_strided_d
  public :: kokkosmla_cache_plan_splits_f, kokkosmla_cache_plan_splits_d
  public :: kokkosmla_cache_plan_destroy_f, kokkosmla_cache_plan_destroy_d
  public :: kokkosmla_cache_attention_f, kokkosmla_cache_attention_d
  public :: kokkosmla_append_to_cache_f, kokkosmla_append_to_cache_d
  public :: kokkosmla_cache_plan_create_storage_f, kokkosmla_cache_plan_create_storage_d
  public :: kokkosmla_fp8_token_bytes

  !> Attention on Fortran arrays; see the module comment.
  interface kokkosmla_attention
    module procedure attention_float, attention_double
  end interface kokkosmla_attention

  interface
    function kokkosmla_options_default() bind(c, name="kokkosmla_options_default")
      import :: kokkosmla_options
      type(kokkosmla_options) :: kokkosmla_options_default
    end function

    function kokkosmla_initialize() bind(c, name="kokkosmla_initialize")
      import :: c_int
      integer(c_int) :: kokkosmla_initialize
    end function

    function kokkosmla_finalize() bind(c, name="kokkosmla_finalize")
      import :: c_int
      integer(c_int) :: kokkosmla_finalize
    end function

    function kokkosmla_is_initialized() bind(c, name="kokkosmla_is_initialized")
      import :: c_int
      integer(c_int) :: kokkosmla_is_initialized
    end function

    function c_last_error() bind(c, name="kokkosmla_last_error")
      import :: c_ptr
      type(c_ptr) :: c_last_error
    end function

    function c_strlen(s) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function

    function kokkosmla_host_memory_is_accessible() bind(c, name="kokkosmla_host_memory_is_accessible")
      import :: c_int
      integer(c_int) :: kokkosmla_host_memory_is_accessible
    end function

    function kokkosmla_malloc(bytes) bind(c, name="kokkosmla_malloc")
      import :: c_ptr, c_size_t
      integer(c_size_t), value :: bytes
      type(c_ptr) :: kokkosmla_malloc
    end function

    function kokkosmla_free(ptr) bind(c, name="kokkosmla_free")
      import :: c_ptr, c_int
      type(c_ptr), value :: ptr
      integer(c_int) :: kokkosmla_free
    end function

    function kokkosmla_copy_to_device(device_dst, host_src, bytes) bind(c, name="kokkosmla_copy_to_device")
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: device_dst, host_src
      integer(c_size_t), value :: bytes
      integer(c_int) :: kokkosmla_copy_to_device
    end function

    function kokkosmla_copy_to_host(host_dst, device_src, bytes) bind(c, name="kokkosmla_copy_to_host")
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: host_dst, device_src
      integer(c_size_t), value :: bytes
      integer(c_int) :: kokkosmla_copy_to_host
    end function

    ! q, latent, w_uk, w_uv, out: c_ptr to default-memory-space arrays; opt by reference.
    function kokkosmla_attention_f(q, latent, w_uk, w_uv, out, b, t, s, h, d, r, opt) &
        bind(c, name="kokkosmla_attention_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), value :: q, latent, w_uk, w_uv, out
      integer(c_int64_t), value :: b, t, s, h, d, r
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_attention_f
    end function

    function kokkosmla_attention_d(q, latent, w_uk, w_uv, out, b, t, s, h, d, r, opt) &
        bind(c, name="kokkosmla_attention_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), value :: q, latent, w_uk, w_uv, out
      integer(c_int64_t), value :: b, t, s, h, d, r
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_attention_d
    end function

    ! Plans: plan is a c_ptr handle, c_null_ptr after a failed create.
    function kokkosmla_plan_create_f(plan, b, t, s, h, d, r, opt) bind(c, name="kokkosmla_plan_create_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, t, s, h, d, r
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_plan_create_f
    end function

    function kokkosmla_plan_create_d(plan, b, t, s, h, d, r, opt) bind(c, name="kokkosmla_plan_create_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, t, s, h, d, r
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_plan_create_d
    end function

    function kokkosmla_plan_execute_f(plan, q, latent, w_uk, w_uv, out) &
        bind(c, name="kokkosmla_plan_execute_f")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, q, latent, w_uk, w_uv, out
      integer(c_int) :: kokkosmla_plan_execute_f
    end function

    function kokkosmla_plan_execute_d(plan, q, latent, w_uk, w_uv, out) &
        bind(c, name="kokkosmla_plan_execute_d")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan, q, latent, w_uk, w_uv, out
      integer(c_int) :: kokkosmla_plan_execute_d
    end function

    !> q, out and the latent given by strides in elements (kokkosmla.h): the
    !> first D of W columns of a C-order (B, T, H, W) array, i.e. a Fortran
    !> (W, H, T, B) one, has row stride H * W and head stride W; the first R of
    !> L columns of a Fortran (L, S, B) array has latent_row_stride = L.
    function kokkosmla_plan_execute_strided_f(plan, q, q_row_stride, q_head_stride, latent, latent_row_stride, &
                                              w_uk, w_uv, out, out_row_stride, out_head_stride) &
                                              bind(c, name="kokkosmla_plan_execute_strided_f")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: plan, q, latent, w_uk, w_uv, out
      integer(c_int64_t), value :: q_row_stride, q_head_stride, latent_row_stride, out_row_stride, out_head_stride
      integer(c_int) :: kokkosmla_plan_execute_strided_f
    end function

    function kokkosmla_plan_execute_strided_d(plan, q, q_row_stride, q_head_stride, latent, latent_row_stride, &
                                              w_uk, w_uv, out, out_row_stride, out_head_stride) &
                                              bind(c, name="kokkosmla_plan_execute_strided_d")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: plan, q, latent, w_uk, w_uv, out
      integer(c_int64_t), value :: q_row_stride, q_head_stride, latent_row_stride, out_row_stride, out_head_stride
      integer(c_int) :: kokkosmla_plan_execute_strided_d
    end function

    function kokkosmla_plan_algorithm_f(plan, algorithm) bind(c, name="kokkosmla_plan_algorithm_f")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), intent(out) :: algorithm
      integer(c_int) :: kokkosmla_plan_algorithm_f
    end function

    function kokkosmla_plan_algorithm_d(plan, algorithm) bind(c, name="kokkosmla_plan_algorithm_d")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), intent(out) :: algorithm
      integer(c_int) :: kokkosmla_plan_algorithm_d
    end function

    function kokkosmla_plan_destroy_f(plan) bind(c, name="kokkosmla_plan_destroy_f")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int) :: kokkosmla_plan_destroy_f
    end function

    function kokkosmla_plan_destroy_d(plan) bind(c, name="kokkosmla_plan_destroy_d")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int) :: kokkosmla_plan_destroy_d
    end function

    ! Cache attention (serving): arrays as c_ptr in the default memory space,
    ! q_rope and lse c_null_ptr when absent; the cache by reference.

    function kokkosmla_cache_plan_create_f(plan, b, tq, h, d, r, dr, capacity, opt) &
        bind(c, name="kokkosmla_cache_plan_create_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, tq, h, d, r, dr, capacity
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_plan_create_f
    end function

    function kokkosmla_cache_plan_create_storage_f(plan, b, tq, h, d, r, dr, capacity, storage, opt) &
        bind(c, name="kokkosmla_cache_plan_create_storage_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, tq, h, d, r, dr, capacity
      integer(c_int), value :: storage
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_plan_create_storage_f
    end function

    function kokkosmla_cache_plan_execute_f(plan, q, q_rope, cache, w_uk, w_uv, out, lse) &
        bind(c, name="kokkosmla_cache_plan_execute_f")
      import :: c_ptr, c_int, kokkosmla_cache
      type(c_ptr), value :: plan, q, q_rope
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int) :: kokkosmla_cache_plan_execute_f
    end function

    function kokkosmla_cache_plan_splits_f(plan, splits) bind(c, name="kokkosmla_cache_plan_splits_f")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), intent(out) :: splits
      integer(c_int) :: kokkosmla_cache_plan_splits_f
    end function

    function kokkosmla_cache_plan_destroy_f(plan) bind(c, name="kokkosmla_cache_plan_destroy_f")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int) :: kokkosmla_cache_plan_destroy_f
    end function

    function kokkosmla_cache_attention_f(q, q_rope, cache, w_uk, w_uv, out, lse, b, tq, h, d, opt) &
        bind(c, name="kokkosmla_cache_attention_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_cache, kokkosmla_options
      type(c_ptr), value :: q, q_rope
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int64_t), value :: b, tq, h, d
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_attention_f
    end function

    function kokkosmla_append_to_cache_f(cache, new_latent, new_k_rope, b, tn, opt) &
        bind(c, name="kokkosmla_append_to_cache_f")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_cache, kokkosmla_options
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: new_latent, new_k_rope
      integer(c_int64_t), value :: b, tn
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_append_to_cache_f
    end function

    function kokkosmla_cache_plan_create_d(plan, b, tq, h, d, r, dr, capacity, opt) &
        bind(c, name="kokkosmla_cache_plan_create_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, tq, h, d, r, dr, capacity
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_plan_create_d
    end function

    function kokkosmla_cache_plan_create_storage_d(plan, b, tq, h, d, r, dr, capacity, storage, opt) &
        bind(c, name="kokkosmla_cache_plan_create_storage_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_options
      type(c_ptr), intent(out) :: plan
      integer(c_int64_t), value :: b, tq, h, d, r, dr, capacity
      integer(c_int), value :: storage
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_plan_create_storage_d
    end function

    !> Bytes of one token of an FP8 storage (656 for R = 512, Dr = 64 per block).
    function kokkosmla_fp8_token_bytes(storage, r, dr, bytes) bind(c, name="kokkosmla_fp8_token_bytes")
      import :: c_int, c_int64_t
      integer(c_int), value :: storage
      integer(c_int64_t), value :: r, dr
      integer(c_int64_t), intent(out) :: bytes
      integer(c_int) :: kokkosmla_fp8_token_bytes
    end function

    function kokkosmla_cache_plan_execute_d(plan, q, q_rope, cache, w_uk, w_uv, out, lse) &
        bind(c, name="kokkosmla_cache_plan_execute_d")
      import :: c_ptr, c_int, kokkosmla_cache
      type(c_ptr), value :: plan, q, q_rope
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int) :: kokkosmla_cache_plan_execute_d
    end function

    !> q, q_rope and out given by row and head strides in elements, lse by a
    !> row stride (kokkosmla.h; 0: contiguous), e.g. the two parts of one
    !> projection p of C-order (B, Tq, H, D + Dr): q = p and q_rope = p + D
    !> elements, both with strides H * (D + Dr) and D + Dr.
    function kokkosmla_cache_plan_execute_strided_f(plan, q, q_row_stride, q_head_stride, q_rope, &
                                                    q_rope_row_stride, q_rope_head_stride, cache, w_uk, w_uv, &
                                                    out, out_row_stride, out_head_stride, lse, lse_row_stride) &
                                                    bind(c, name="kokkosmla_cache_plan_execute_strided_f")
      import :: c_ptr, c_int, c_int64_t, kokkosmla_cache
      type(c_ptr), value :: plan, q, q_rope
      integer(c_int64_t), value :: q_row_stride, q_head_stride, q_rope_row_stride, q_rope_head_stride
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int64_t), value :: out_row_stride, out_head_stride, lse_row_stride
      integer(c_int) :: kokkosmla_cache_plan_execute_strided_f
    end function

    function kokkosmla_cache_plan_execute_strided_d(plan, q, q_row_stride, q_head_stride, q_rope, &
                                                    q_rope_row_stride, q_rope_head_stride, cache, w_uk, w_uv, &
                                                    out, out_row_stride, out_head_stride, lse, lse_row_stride) &
                                                    bind(c, name="kokkosmla_cache_plan_execute_strided_d")
      import :: c_ptr, c_int, c_int64_t, kokkosmla_cache
      type(c_ptr), value :: plan, q, q_rope
      integer(c_int64_t), value :: q_row_stride, q_head_stride, q_rope_row_stride, q_rope_head_stride
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int64_t), value :: out_row_stride, out_head_stride, lse_row_stride
      integer(c_int) :: kokkosmla_cache_plan_execute_strided_d
    end function

    function kokkosmla_cache_plan_splits_d(plan, splits) bind(c, name="kokkosmla_cache_plan_splits_d")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int), intent(out) :: splits
      integer(c_int) :: kokkosmla_cache_plan_splits_d
    end function

    function kokkosmla_cache_plan_destroy_d(plan) bind(c, name="kokkosmla_cache_plan_destroy_d")
      import :: c_ptr, c_int
      type(c_ptr), value :: plan
      integer(c_int) :: kokkosmla_cache_plan_destroy_d
    end function

    function kokkosmla_cache_attention_d(q, q_rope, cache, w_uk, w_uv, out, lse, b, tq, h, d, opt) &
        bind(c, name="kokkosmla_cache_attention_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_cache, kokkosmla_options
      type(c_ptr), value :: q, q_rope
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: w_uk, w_uv, out, lse
      integer(c_int64_t), value :: b, tq, h, d
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_cache_attention_d
    end function

    function kokkosmla_append_to_cache_d(cache, new_latent, new_k_rope, b, tn, opt) &
        bind(c, name="kokkosmla_append_to_cache_d")
      import :: c_ptr, c_int64_t, c_int, kokkosmla_cache, kokkosmla_options
      type(kokkosmla_cache), intent(in) :: cache
      type(c_ptr), value :: new_latent, new_k_rope
      integer(c_int64_t), value :: b, tn
      type(kokkosmla_options), intent(in) :: opt
      integer(c_int) :: kokkosmla_append_to_cache_d
    end function
  end interface

contains

  !> kokkosmla_last_error() as a Fortran string: the latest failure on this thread, or "".
  function kokkosmla_error_message() result(message)
    character(len=:), allocatable :: message
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = c_last_error()
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: message)
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function kokkosmla_error_message

  !> The extents (b, t, s, h, d, r) of Fortran arrays of shapes q(D,H,T,B), latent(R,S,B),
  !> w_uk(D,H,R), w_uv(D,H,R) and out(D,H,T,B); mismatch is "" or what does not match.
  subroutine extents_of(q, latent, w_uk, w_uv, out, e, mismatch)
    integer(c_int64_t), intent(in) :: q(4), latent(3), w_uk(3), w_uv(3), out(4)
    integer(c_int64_t), intent(out) :: e(6)
    character(len=:), allocatable, intent(out) :: mismatch
    e = [q(4), q(3), latent(2), q(2), q(1), latent(1)]
    mismatch = ""
    if (latent(3) /= q(4)) then
      mismatch = "size(latent, 3) /= size(q, 4) (batch)"
    else if (any(w_uk /= [q(1), q(2), latent(1)])) then
      mismatch = "shape(w_uk) /= [size(q, 1), size(q, 2), size(latent, 1)] (D, H, R)"
    else if (any(w_uv /= w_uk)) then
      mismatch = "shape(w_uv) /= shape(w_uk)"
    else if (any(out /= q)) then
      mismatch = "shape(out) /= shape(q)"
    end if
  end subroutine extents_of

  !> The C call of the precision at hand, on default-memory-space addresses.
  function call_c(is_double, dev, e, opt) result(status)
    logical, intent(in) :: is_double
    type(c_ptr), intent(in) :: dev(5)
    integer(c_int64_t), intent(in) :: e(6)
    type(kokkosmla_options), intent(in) :: opt
    integer(c_int) :: status
    if (is_double) then
      status = kokkosmla_attention_d(dev(1), dev(2), dev(3), dev(4), dev(5), &
                                     e(1), e(2), e(3), e(4), e(5), e(6), opt)
    else
      status = kokkosmla_attention_f(dev(1), dev(2), dev(3), dev(4), dev(5), &
                                     e(1), e(2), e(3), e(4), e(5), e(6), opt)
    end if
  end function call_c

  !> Addresses the default execution space can read for the five host arrays:
  !> the arrays themselves on host backends, else fresh device copies of the
  !> inputs and room for out (index 5).
  function stage(host, bytes, dev) result(status)
    type(c_ptr), intent(in) :: host(5)
    integer(c_size_t), intent(in) :: bytes(5)
    type(c_ptr), intent(out) :: dev(5)
    integer(c_int) :: status
    integer :: i
    status = KOKKOSMLA_SUCCESS
    if (kokkosmla_host_memory_is_accessible() /= 0) then
      dev = host
      return
    end if
    dev = c_null_ptr
    do i = 1, 5
      dev(i) = kokkosmla_malloc(bytes(i))
      if (.not. c_associated(dev(i))) then
        status = KOKKOSMLA_ERROR_INTERNAL
        return
      end if
      if (i < 5) status = kokkosmla_copy_to_device(dev(i), host(i), bytes(i))
      if (status /= KOKKOSMLA_SUCCESS) return
    end do
  end function stage

  !> Copies out back after a successful call and frees what stage allocated.
  subroutine unstage(host, bytes, dev, status)
    type(c_ptr), intent(in) :: host(5), dev(5)
    integer(c_size_t), intent(in) :: bytes(5)
    integer(c_int), intent(inout) :: status
    integer(c_int) :: ignored
    integer :: i
    if (kokkosmla_host_memory_is_accessible() /= 0) return
    if (status == KOKKOSMLA_SUCCESS) status = kokkosmla_copy_to_host(host(5), dev(5), bytes(5))
    do i = 1, 5
      ignored = kokkosmla_free(dev(i))
    end do
  end subroutine unstage

  !> What both precisions share: check shapes, stage, call, copy back, report.
  function run(is_double, element, shapes, host, opt, message) result(status)
    logical, intent(in) :: is_double
    integer(c_size_t), intent(in) :: element
    integer(c_int64_t), intent(in) :: shapes(17)  ! shapes of q, latent, w_uk, w_uv, out in a row
    type(c_ptr), intent(in) :: host(5)
    type(kokkosmla_options), intent(in), optional :: opt
    character(len=:), allocatable, intent(out) :: message
    integer(c_int) :: status
    type(kokkosmla_options) :: o
    integer(c_int64_t) :: e(6)
    character(len=:), allocatable :: mismatch
    type(c_ptr) :: dev(5)
    integer(c_size_t) :: bytes(5)
    call extents_of(shapes(1:4), shapes(5:7), shapes(8:10), shapes(11:13), shapes(14:17), e, mismatch)
    if (len(mismatch) > 0) then
      status = KOKKOSMLA_ERROR_INVALID_ARGUMENT
      message = "kokkosmla_attention: " // mismatch
      return
    end if
    o = kokkosmla_options_default()
    if (present(opt)) o = opt
    if (any(e < 1)) then
      dev = c_null_ptr
      status = call_c(is_double, dev, e, o)  ! the C call names the empty extent
    else
      bytes = element * int([product(shapes(1:4)), product(shapes(5:7)), product(shapes(8:10)), &
                             product(shapes(11:13)), product(shapes(14:17))], c_size_t)
      status = stage(host, bytes, dev)
      if (status == KOKKOSMLA_SUCCESS) status = call_c(is_double, dev, e, o)
      call unstage(host, bytes, dev, status)
    end if
    message = ""
    if (status /= KOKKOSMLA_SUCCESS) message = kokkosmla_error_message()
  end function run

  function attention_double(q, latent, w_uk, w_uv, out, opt, errmsg) result(status)
    real(c_double), intent(in), contiguous, target :: q(:, :, :, :), latent(:, :, :)
    real(c_double), intent(in), contiguous, target :: w_uk(:, :, :), w_uv(:, :, :)
    real(c_double), intent(inout), contiguous, target :: out(:, :, :, :)
    type(kokkosmla_options), intent(in), optional :: opt
    character(len=:), allocatable, intent(out), optional :: errmsg
    integer(c_int) :: status
    type(c_ptr) :: host(5)
    character(len=:), allocatable :: message
    host = c_null_ptr  ! c_loc needs arrays of positive size
    if (min(size(q), size(latent), size(w_uk), size(w_uv), size(out)) > 0) &
      host = [c_loc(q), c_loc(latent), c_loc(w_uk), c_loc(w_uv), c_loc(out)]
    status = run(.true., c_sizeof(0.0_c_double), &
                 [shape(q, c_int64_t), shape(latent, c_int64_t), shape(w_uk, c_int64_t), &
                  shape(w_uv, c_int64_t), shape(out, c_int64_t)], host, opt, message)
    ! Through a local: gfortran 12 mishandles an optional deferred-length dummy passed on.
    if (present(errmsg)) errmsg = message
  end function attention_double

  function attention_float(q, latent, w_uk, w_uv, out, opt, errmsg) result(status)
    real(c_float), intent(in), contiguous, target :: q(:, :, :, :), latent(:, :, :)
    real(c_float), intent(in), contiguous, target :: w_uk(:, :, :), w_uv(:, :, :)
    real(c_float), intent(inout), contiguous, target :: out(:, :, :, :)
    type(kokkosmla_options), intent(in), optional :: opt
    character(len=:), allocatable, intent(out), optional :: errmsg
    integer(c_int) :: status
    type(c_ptr) :: host(5)
    character(len=:), allocatable :: message
    host = c_null_ptr
    if (min(size(q), size(latent), size(w_uk), size(w_uv), size(out)) > 0) &
      host = [c_loc(q), c_loc(latent), c_loc(w_uk), c_loc(w_uv), c_loc(out)]
    status = run(.false., c_sizeof(0.0_c_float), &
                 [shape(q, c_int64_t), shape(latent, c_int64_t), shape(w_uk, c_int64_t), &
                  shape(w_uv, c_int64_t), shape(out, c_int64_t)], host, opt, message)
    ! Through a local: gfortran 12 mishandles an optional deferred-length dummy passed on.
    if (present(errmsg)) errmsg = message
  end function attention_float

end module kokkosmla
