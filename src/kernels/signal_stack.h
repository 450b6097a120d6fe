// src/kernels/signal_stack.h — an alternate signal stack for every thread that runs oneDNN for tfm.
//
// The JIT float32 GEMM of oneDNN 2.6 (the build links 2.6.3; dnnl_sgemm's jit_avx512_common_gemm_f32,
// and its AVX2 sibling) points rsp at a heap workspace while it runs (oneDNN issue #4845, which reports
// it for 3.11.1 and older versions; fixed upstream by pull request #4855). A signal handled on that
// thread meanwhile makes the kernel write the signal frame below rsp, into the heap: a Ctrl-C to
// `tfm train`, or to Python during a tfm call, could abort the process later with a corrupted heap.
// A handler installed with SA_ONSTACK runs on the thread's alternate signal stack instead, if it has
// one: `tfm train` installs its handlers so, and so does CPython (3.10 and later). ensure_signal_stacks()
// gives the calling thread, and outside a parallel region its OpenMP team, such a stack.
#pragma once

namespace tfm::kernels {

// The calling thread's alternate signal stack (one it had is kept), and each thread of the OpenMP team it
// starts when called outside a parallel region. Cheap once done: a thread-local check of the team size
// already covered. Never throws: a thread whose stack cannot be set keeps the default (the signal frame
// on its stack), as before.
void ensure_signal_stacks();

}  // namespace tfm::kernels
