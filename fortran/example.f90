! Runs KokkosMLA from Fortran on a small double problem, twice: through the
! array wrapper kokkosmla_attention, and through the C-level functions on
! memory from kokkosmla_malloc (what code that keeps its arrays on a GPU does).
! Compares both with a plain Fortran reference; exits with status 1 when the
! maximum error exceeds 1e-12 (1e-5 for a float run of the same problem).
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
  real(c_double) :: worst, worst_f

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
    call check(kokkosmla_free(dq), "kokkosmla_free")
    call check(kokkosmla_free(dl), "kokkosmla_free")
    call check(kokkosmla_free(dk), "kokkosmla_free")
    call check(kokkosmla_free(dv), "kokkosmla_free")
    call check(kokkosmla_free(dout), "kokkosmla_free")
  end subroutine run_on_device_memory

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
