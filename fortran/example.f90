! Runs KokkosMLA from Fortran on a small double problem, twice: through the
! array wrapper kokkosmla_attention, and through the C-level functions on
! memory from kokkosmla_malloc (what code that keeps its arrays on a GPU does).
! Then one decoding step over a paged latent cache with RoPE keys: append each
! sequence's new token, attend with a cache plan; and the same over an FP8
! cache (e4m3 with per-tensor scales), checked on the values it decodes to. Compares everything with
! plain Fortran references; exits with status 1 when the maximum error
! exceeds 1e-12 (1e-5 for a float run of the first problem).
!
! Arrays are dimensioned in reverse order, q(D, H, T, B) and so on: the same
! memory as the library's row-major (B, T, H, D).
program kokkosmla_fortran_example
  use, intrinsic :: iso_c_binding
  use kokkosmla
  implicit none

  integer, parameter :: nb = 2, nt = 3, ns = 5, nh = 2, nd = 4, nr = 6
  real(c_double), target :: q(nd, nh, nt, nb), latent(nr, ns, nb), w_uk(nd, nh, nr), w_uv(nd, nh, nr)
  real(c_double), target :: out(nd, nh, nt, nb), out_c(nd, nh, nt, nb), expected(nd, nh, nt, nb)
  real(c_float) :: out_f(nd, nh, nt, nb)
  type(kokkosmla_options) :: opt
  character(len=:), allocatable :: errmsg
  integer(c_int) :: status
  real(c_double) :: worst, worst_f, worst_decode

  call check(kokkosmla_initialize(), "kokkosmla_initialize")
  call fill(q, size(q), 1.0d0)
  call fill(latent, size(latent), 2.0d0)
  call fill(w_uk, size(w_uk), 3.0d0)
  call fill(w_uv, size(w_uv), 4.0d0)
  w_uk = 0.5d0 * w_uk
  w_uv = 0.5d0 * w_uv

  opt = kokkosmla_options_default()  ! causal, scale 1/sqrt(D), algorithm chosen by the library
  status = kokkosmla_attention(q, latent, w_uk, w_uv, out, opt, errmsg)
  call check(status, errmsg)
  call run_on_device_memory(out_c)
  call reference(expected)
  worst = max(maxval(abs(out - expected)), maxval(abs(out_c - expected)))
  print '(a, es10.3)', "kokkosmla Fortran example: max error ", worst

  ! The same in float, through the generic name.
  status = kokkosmla_attention(real(q, c_float), real(latent, c_float), real(w_uk, c_float), &
                               real(w_uv, c_float), out_f, errmsg=errmsg)
  call check(status, errmsg)
  worst_f = maxval(abs(out_f - expected))
  print '(a, es10.3)', "float: max error ", worst_f

  ! A shape mismatch is reported, not run.
  if (kokkosmla_attention(q, latent(:, :, 1:1), w_uk, w_uv, out, errmsg=errmsg) &
      /= KOKKOSMLA_ERROR_INVALID_ARGUMENT) stop "expected KOKKOSMLA_ERROR_INVALID_ARGUMENT"
  print '(2a)', "rejected as expected: ", errmsg
  deallocate(errmsg)  ! main-program variables are never freed otherwise; leak checkers would report it

  worst_decode = decode_step()
  print '(a, es10.3)', "decode step over a paged cache: max error ", worst_decode
  worst = max(worst, worst_decode)
  worst_decode = fp8_step()
  print '(a, es10.3)', "FP8 cache: max error against the decoded values ", worst_decode
  worst = max(worst, worst_decode)

  call check(kokkosmla_finalize(), "kokkosmla_finalize")
  if (.not. (worst <= 1d-12 .and. worst_f <= 1d-5)) then
    print '(a)', "FAILED: error above 1e-12 (double) or 1e-5 (float)"
    stop 1
  end if

contains

  !> Stops with the message when status is not KOKKOSMLA_SUCCESS.
  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= KOKKOSMLA_SUCCESS) then
      print '(a, i0, 2a)', "error ", status, ": ", what
      print '(a)', kokkosmla_error_message()
      stop 1
    end if
  end subroutine check

  !> Frees device arrays, each free checked.
  subroutine free_on_device(pointers)
    type(c_ptr), intent(in) :: pointers(:)
    integer :: i
    do i = 1, size(pointers)
      call check(kokkosmla_free(pointers(i)), "kokkosmla_free")
    end do
  end subroutine free_on_device

  !> Deterministic values in [-1, 1]; x is any array of n elements.
  subroutine fill(x, n, seed)
    integer, intent(in) :: n
    real(c_double), intent(out) :: x(n)
    real(c_double), intent(in) :: seed
    integer :: i
    do i = 1, n
      x(i) = sin(0.7d0 * i + 1.3d0 * seed)
    end do
  end subroutine fill

  !> The C-level functions on default-memory-space buffers, with a plan.
  subroutine run_on_device_memory(result)
    real(c_double), intent(out), target :: result(nd, nh, nt, nb)
    type(c_ptr) :: dq, dl, dk, dv, dout, plan
    integer(c_int) :: algorithm
    dq = to_device(c_loc(q), size(q))
    dl = to_device(c_loc(latent), size(latent))
    dk = to_device(c_loc(w_uk), size(w_uk))
    dv = to_device(c_loc(w_uv), size(w_uv))
    dout = to_device(c_loc(result), size(result))
    call check(kokkosmla_attention_d(dq, dl, dk, dv, dout, int(nb, c_int64_t), int(nt, c_int64_t), &
                                     int(ns, c_int64_t), int(nh, c_int64_t), int(nd, c_int64_t), &
                                     int(nr, c_int64_t), opt), "kokkosmla_attention_d")
    call check(kokkosmla_copy_to_host(c_loc(result), dout, bytes(size(result))), "kokkosmla_copy_to_host")
    if (maxval(abs(result - out)) > 1d-12) stop "kokkosmla_attention_d and kokkosmla_attention differ"

    ! A plan, for many calls of one shape: chosen and allocated once.
    call check(kokkosmla_plan_create_d(plan, int(nb, c_int64_t), int(nt, c_int64_t), int(ns, c_int64_t), &
                                       int(nh, c_int64_t), int(nd, c_int64_t), int(nr, c_int64_t), opt), &
               "kokkosmla_plan_create_d")
    call check(kokkosmla_plan_algorithm_d(plan, algorithm), "kokkosmla_plan_algorithm_d")
    print '(a, i0)', "plan algorithm: ", algorithm
    call check(kokkosmla_plan_execute_d(plan, dq, dl, dk, dv, dout), "kokkosmla_plan_execute_d")
    call check(kokkosmla_plan_destroy_d(plan), "kokkosmla_plan_destroy_d")
    call check(kokkosmla_copy_to_host(c_loc(result), dout, bytes(size(result))), "kokkosmla_copy_to_host")
    call free_on_device([dq, dl, dk, dv, dout])
  end subroutine run_on_device_memory

  !> One decoding step of nb sequences, one query each (Tq = 1), over a paged
  !> cache of latent width nr and RoPE width dr: pages of ps tokens, pps pages
  !> per sequence, block table in a scattered order. Appends each sequence's
  !> new token, attends through a cache plan (scale 1/sqrt(nd + dr)) and
  !> returns the largest error of out and lse against a Fortran reference.
  real(c_double) function decode_step() result(worst)
    integer, parameter :: dr = 2, ps = 4, pps = 2, pages = 4
    integer(c_int), target :: table(pps, nb), lengths(nb)
    real(c_double), target :: cache_latent(nr, ps, pages), cache_rope(dr, ps, pages)
    real(c_double), target :: new_latent(nr, 1, nb), new_rope(dr, 1, nb)
    real(c_double), target :: qd(nd, nh, 1, nb), qr(dr, nh, 1, nb), od(nd, nh, 1, nb), lse(nh, 1, nb)
    real(c_double), target :: projection(nd + dr, nh, 1, nb), wide_out(nd + dr, nh, 1, nb)
    real(c_double) :: k(nd), v(nd, pps * ps), p(pps * ps), acc(nd), scale, want
    type(kokkosmla_cache) :: cache
    type(c_ptr) :: dq, dqr, dk, dv, dout, dlse, dnew, dnew_rope, plan, dprojection, dwide_out
    integer :: b, h, s, r, page, row, keys
    table = reshape([3, 1, 0, 2], [pps, nb])  ! 0-based page indices, as the C interface takes them
    lengths = [5, 7]                           ! tokens held, the new one included
    call fill(cache_latent, size(cache_latent), 5.0d0)
    call fill(cache_rope, size(cache_rope), 6.0d0)
    call fill(new_latent, size(new_latent), 7.0d0)
    call fill(new_rope, size(new_rope), 8.0d0)
    call fill(qd, size(qd), 9.0d0)
    call fill(qr, size(qr), 10.0d0)

    cache%latent = to_device(c_loc(cache_latent), size(cache_latent))
    cache%k_rope = to_device(c_loc(cache_rope), size(cache_rope))
    cache%block_table = kokkosmla_malloc(c_sizeof(table))
    cache%seqlens = kokkosmla_malloc(c_sizeof(lengths))
    call check(kokkosmla_copy_to_device(cache%block_table, c_loc(table), c_sizeof(table)), "copy table")
    call check(kokkosmla_copy_to_device(cache%seqlens, c_loc(lengths), c_sizeof(lengths)), "copy seqlens")
    cache%pages = pages
    cache%page_size = ps
    cache%pages_per_sequence = pps
    cache%latent_dim = nr
    cache%rope_dim = dr
    dnew = to_device(c_loc(new_latent), size(new_latent))
    dnew_rope = to_device(c_loc(new_rope), size(new_rope))
    dq = to_device(c_loc(qd), size(qd))
    dqr = to_device(c_loc(qr), size(qr))
    dk = to_device(c_loc(w_uk), size(w_uk))
    dv = to_device(c_loc(w_uv), size(w_uv))
    dout = kokkosmla_malloc(bytes(size(od)))
    dlse = kokkosmla_malloc(bytes(size(lse)))

    call check(kokkosmla_append_to_cache_d(cache, dnew, dnew_rope, int(nb, c_int64_t), 1_c_int64_t, &
                                           kokkosmla_options_default()), "kokkosmla_append_to_cache_d")
    call check(kokkosmla_cache_plan_create_d(plan, int(nb, c_int64_t), 1_c_int64_t, int(nh, c_int64_t), &
                                             int(nd, c_int64_t), int(nr, c_int64_t), int(dr, c_int64_t), &
                                             int(pps * ps, c_int64_t), kokkosmla_options_default()), &
               "kokkosmla_cache_plan_create_d")
    call check(kokkosmla_cache_plan_execute_d(plan, dq, dqr, cache, dk, dv, dout, dlse), &
               "kokkosmla_cache_plan_execute_d")
    call check(kokkosmla_copy_to_host(c_loc(od), dout, bytes(size(od))), "copy out")
    call check(kokkosmla_copy_to_host(c_loc(lse), dlse, bytes(size(lse))), "copy lse")

    ! q and q_rope as the two parts of one projection (nd + dr values per
    ! head), passed by strides in elements, and out written into the first
    ! nd of nd + dr columns of another such array: the same result, bit for bit.
    projection(1:nd, :, :, :) = qd
    projection(nd + 1:, :, :, :) = qr
    dprojection = to_device(c_loc(projection), size(projection))
    wide_out = -1
    dwide_out = to_device(c_loc(wide_out), size(wide_out))
    call check(kokkosmla_cache_plan_execute_strided_d(plan, dprojection, int(nh * (nd + dr), c_int64_t), &
                                                      int(nd + dr, c_int64_t), &
                                                      advanced(dprojection, nd), &
                                                      int(nh * (nd + dr), c_int64_t), int(nd + dr, c_int64_t), &
                                                      cache, dk, dv, dwide_out, int(nh * (nd + dr), c_int64_t), &
                                                      int(nd + dr, c_int64_t), dlse, 0_c_int64_t), &
               "kokkosmla_cache_plan_execute_strided_d")
    call check(kokkosmla_copy_to_host(c_loc(wide_out), dwide_out, bytes(size(wide_out))), "copy out")
    call check(kokkosmla_cache_plan_destroy_d(plan), "kokkosmla_cache_plan_destroy_d")
    if (maxval(abs(wide_out(1:nd, :, :, :) - od)) > 0 .or. maxval(abs(wide_out(nd + 1:, :, :, :) + 1)) > 0) then
      print *, "the strided call differs from the contiguous one"
      stop 1
    end if

    ! The reference: the new tokens written where append puts them, then
    ! softmax over all keys of each sequence (the query is its newest token).
    scale = 1d0 / sqrt(real(nd + dr, c_double))
    worst = 0
    do b = 1, nb
      page = table((lengths(b) - 1) / ps + 1, b) + 1
      row = mod(lengths(b) - 1, ps) + 1
      cache_latent(:, row, page) = new_latent(:, 1, b)
      cache_rope(:, row, page) = new_rope(:, 1, b)
      keys = lengths(b)
      do h = 1, nh
        do s = 1, keys
          page = table((s - 1) / ps + 1, b) + 1
          row = mod(s - 1, ps) + 1
          k = 0
          v(:, s) = 0
          do r = 1, nr
            k = k + cache_latent(r, row, page) * w_uk(:, h, r)
            v(:, s) = v(:, s) + cache_latent(r, row, page) * w_uv(:, h, r)
          end do
          p(s) = scale * (dot_product(qd(:, h, 1, b), k) + dot_product(qr(:, h, 1, b), cache_rope(:, row, page)))
        end do
        want = maxval(p(1:keys))
        p(1:keys) = exp(p(1:keys) - want)
        want = want + log(sum(p(1:keys)))
        acc = matmul(v(:, 1:keys), p(1:keys))
        worst = max(worst, maxval(abs(od(:, h, 1, b) - acc / sum(p(1:keys)))), abs(lse(h, 1, b) - want))
      end do
    end do

    call free_on_device([cache%latent, cache%k_rope, cache%block_table, cache%seqlens, dnew, dnew_rope, &
                         dq, dqr, dk, dv, dout, dlse, dprojection, dwide_out])
  end function decode_step

  !> The value of an e4m3 byte (OCP E4M3: bias 7, subnormals k 2^-9; no NaN here).
  real(c_double) function e4m3(byte)
    integer(c_int8_t), intent(in) :: byte
    integer :: code, e, m
    code = iand(int(byte), 255)
    e = iand(ishft(code, -3), 15)
    m = iand(code, 7)
    if (e == 0) then
      e4m3 = m * 2d0**(-9)
    else
      e4m3 = (8 + m) * 2d0**(e - 10)
    end if
    if (code >= 128) e4m3 = -e4m3
  end function e4m3

  !> An FP8 cache (KOKKOSMLA_CACHE_FP8_PER_TENSOR, contiguous, nb sequences of
  !> at most cap tokens): append ns2 tokens to each, read the bytes back and
  !> decode them (e4m3 x scale), then attend with the newest token of each
  !> sequence as the query through a storage plan. Returns the largest error
  !> of out against a Fortran reference over the decoded values; stops when a
  !> decoded value is farther from its input than e4m3 rounding allows.
  real(c_double) function fp8_step() result(worst)
    integer, parameter :: dr = 2, cap = 6, ns2 = 5
    integer(c_int8_t), target :: tokens(nr + dr, cap, nb)
    integer(c_int), target :: lengths(nb)
    integer(c_int64_t) :: token_bytes
    real(c_double), target :: new_latent(nr, ns2, nb), new_rope(dr, ns2, nb)
    real(c_double), target :: qd(nd, nh, 1, nb), qr(dr, nh, 1, nb), od(nd, nh, 1, nb)
    real(c_double) :: lat(nr, cap, nb), rope(dr, cap, nb), k(nd), v(nd, cap), p(cap), acc(nd), scale, top
    type(kokkosmla_cache) :: cache
    type(c_ptr) :: dq, dqr, dk, dv, dout, dnew, dnew_rope, plan
    integer :: b, h, s, r
    call check(kokkosmla_fp8_token_bytes(KOKKOSMLA_CACHE_FP8_PER_TENSOR, int(nr, c_int64_t), &
                                         int(dr, c_int64_t), token_bytes), "kokkosmla_fp8_token_bytes")
    if (token_bytes /= nr + dr) stop "kokkosmla_fp8_token_bytes: unexpected size"
    lengths = ns2
    call fill(new_latent, size(new_latent), 11.0d0)
    call fill(new_rope, size(new_rope), 12.0d0)
    call fill(qd, size(qd), 13.0d0)
    call fill(qr, size(qr), 14.0d0)

    cache%storage = KOKKOSMLA_CACHE_FP8_PER_TENSOR
    cache%fp8_latent_scale = 1.0 / 64  ! powers of two: the decoded products are exact
    cache%fp8_rope_scale = 1.0 / 128
    cache%latent = kokkosmla_malloc(c_sizeof(tokens))
    cache%seqlens = kokkosmla_malloc(c_sizeof(lengths))
    call check(kokkosmla_copy_to_device(cache%seqlens, c_loc(lengths), c_sizeof(lengths)), "copy seqlens")
    cache%page_size = cap  ! contiguous: block_table stays c_null_ptr
    cache%latent_dim = nr
    cache%rope_dim = dr
    dnew = to_device(c_loc(new_latent), size(new_latent))
    dnew_rope = to_device(c_loc(new_rope), size(new_rope))
    call check(kokkosmla_append_to_cache_d(cache, dnew, dnew_rope, int(nb, c_int64_t), int(ns2, c_int64_t), &
                                           kokkosmla_options_default()), "kokkosmla_append_to_cache_d")
    call check(kokkosmla_copy_to_host(c_loc(tokens), cache%latent, c_sizeof(tokens)), "copy tokens")
    do b = 1, nb
      do s = 1, ns2
        do r = 1, nr
          lat(r, s, b) = e4m3(tokens(r, s, b)) * cache%fp8_latent_scale
        end do
        do r = 1, dr
          rope(r, s, b) = e4m3(tokens(nr + r, s, b)) * cache%fp8_rope_scale
        end do
        if (any(abs(lat(:, s, b) - new_latent(:, s, b)) > abs(new_latent(:, s, b)) / 16 + 2d0**(-16)) .or. &
            any(abs(rope(:, s, b) - new_rope(:, s, b)) > abs(new_rope(:, s, b)) / 16 + 2d0**(-17))) &
          stop "FP8 cache: a decoded value is beyond e4m3 rounding"
      end do
    end do

    dq = to_device(c_loc(qd), size(qd))
    dqr = to_device(c_loc(qr), size(qr))
    dk = to_device(c_loc(w_uk), size(w_uk))
    dv = to_device(c_loc(w_uv), size(w_uv))
    dout = kokkosmla_malloc(bytes(size(od)))
    call check(kokkosmla_cache_plan_create_storage_d(plan, int(nb, c_int64_t), 1_c_int64_t, int(nh, c_int64_t), &
                                                     int(nd, c_int64_t), int(nr, c_int64_t), int(dr, c_int64_t), &
                                                     int(cap, c_int64_t), KOKKOSMLA_CACHE_FP8_PER_TENSOR, &
                                                     kokkosmla_options_default()), &
               "kokkosmla_cache_plan_create_storage_d")
    call check(kokkosmla_cache_plan_execute_d(plan, dq, dqr, cache, dk, dv, dout, c_null_ptr), &
               "kokkosmla_cache_plan_execute_d")
    call check(kokkosmla_cache_plan_destroy_d(plan), "kokkosmla_cache_plan_destroy_d")
    call check(kokkosmla_copy_to_host(c_loc(od), dout, bytes(size(od))), "copy out")

    scale = 1d0 / sqrt(real(nd + dr, c_double))
    worst = 0
    do b = 1, nb
      do h = 1, nh
        do s = 1, ns2
          k = 0
          v(:, s) = 0
          do r = 1, nr
            k = k + lat(r, s, b) * w_uk(:, h, r)
            v(:, s) = v(:, s) + lat(r, s, b) * w_uv(:, h, r)
          end do
          p(s) = scale * (dot_product(qd(:, h, 1, b), k) + dot_product(qr(:, h, 1, b), rope(:, s, b)))
        end do
        top = maxval(p(1:ns2))
        p(1:ns2) = exp(p(1:ns2) - top)
        acc = matmul(v(:, 1:ns2), p(1:ns2))
        worst = max(worst, maxval(abs(od(:, h, 1, b) - acc / sum(p(1:ns2)))))
      end do
    end do

    call free_on_device([cache%latent, cache%seqlens, dnew, dnew_rope, dq, dqr, dk, dv, dout])
  end function fp8_step

  integer(c_size_t) function bytes(n)
    integer, intent(in) :: n
    bytes = int(n, c_size_t) * c_sizeof(0.0_c_double)
  end function bytes

  type(c_ptr) function to_device(host, n)
    type(c_ptr), intent(in) :: host
    integer, intent(in) :: n
    to_device = kokkosmla_malloc(bytes(n))
    if (.not. c_associated(to_device)) call check(KOKKOSMLA_ERROR_INTERNAL, "kokkosmla_malloc")
    call check(kokkosmla_copy_to_device(to_device, host, bytes(n)), "kokkosmla_copy_to_device")
  end function to_device

  !> The device address n doubles past p.
  type(c_ptr) function advanced(p, n)
    type(c_ptr), intent(in) :: p
    integer, intent(in) :: n
    advanced = transfer(transfer(p, 0_c_intptr_t) + int(bytes(n), c_intptr_t), p)
  end function advanced

  !> Decompress K and V, then a two-pass causal softmax per query; query t sits
  !> at key position ns - nt + t.
  subroutine reference(o)
    real(c_double), intent(out) :: o(nd, nh, nt, nb)
    real(c_double) :: k(nd, nh, ns, nb), v(nd, nh, ns, nb), p(ns), scale
    integer :: b, t, h, s, r, keys
    k = 0
    v = 0
    do b = 1, nb
      do s = 1, ns
        do r = 1, nr
          k(:, :, s, b) = k(:, :, s, b) + latent(r, s, b) * w_uk(:, :, r)
          v(:, :, s, b) = v(:, :, s, b) + latent(r, s, b) * w_uv(:, :, r)
        end do
      end do
    end do
    scale = 1d0 / sqrt(real(nd, c_double))
    do b = 1, nb
      do t = 1, nt
        keys = ns - nt + t
        do h = 1, nh
          do s = 1, keys
            p(s) = scale * dot_product(q(:, h, t, b), k(:, h, s, b))
          end do
          p(1:keys) = exp(p(1:keys) - maxval(p(1:keys)))
          o(:, h, t, b) = 0
          do s = 1, keys
            o(:, h, t, b) = o(:, h, t, b) + p(s) * v(:, h, s, b)
          end do
          o(:, h, t, b) = o(:, h, t, b) / sum(p(1:keys))
        end do
      end do
    end do
  end subroutine reference

end program kokkosmla_fortran_example
