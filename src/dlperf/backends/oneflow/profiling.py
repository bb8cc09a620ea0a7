"""Why dlperf's profiled steps are unavailable with OneFlow 0.9.0's profiler
(:mod:`dlperf.worker.profile`): ``oneflow.profiler.profile`` is wired in name only, every case
records ``profile.unavailable`` with the reason below, never a made-up split.

- Durations, not intervals: ``DisableProfilerAndReturnResult`` hands back JSON events of a
  name, a duration and input shapes each (``IEvent::ToJson``, oneflow/core/profiler/event.cpp;
  Python sums them per name: ``Events``/``key_averages``), with no start time and no thread, so
  the operators cannot be placed on a timeline. Laying the totals end to end would only be honest if
  the operators ran one after another on one thread, and they do not: eager ops are queued to
  OneFlow's virtual machine, whose stream threads run them while Python dispatches ahead, with
  copies and frees on streams of their own.
- A CUDA build without a usable CUDA driver (a CPU host running the cu* wheel, as dlperf's
  environment installs it): ``DisableProfilerAndReturnResult``, the only call that hands the
  records back, runs ``OF_CUDA_CHECK(cudaDeviceSynchronize())`` under ``#if
  defined(WITH_CUDA)`` whatever activities were asked for (oneflow/core/profiler/profiler.cpp,
  v0.9.0), and the failed check is a glog FATAL that aborts the whole worker process. Tried,
  each in a subprocess, on this build: ``profile(activities=[ProfilerActivity.CPU],
  record_shapes=False)``; ``_oneflow_internal.profiler.EnableProfiler(True, False, False,
  False)`` then ``DisableProfilerAndReturnResult()``; both with ``CUDA_VISIBLE_DEVICES`` empty
  and with ``ONEFLOW_PROFILER_KERNEL_PROFILE_KERNEL_FORWARD_RANGE=1``: all abort (SIGABRT,
  "Check failed: cudaDeviceSynchronize()"). The other knobs record nothing readable here:
  ``record_function`` (``StartRecord``) needs a running profile, ``ONEFLOW_PROFILER_*`` only
  add NVTX ranges or CUDA-event bandwidth (oneflow/core/profiler/kernel.cpp), ``range_push`` is
  NVTX, and ``oneflow.autoprof`` times single operators in isolation through the same
  profiler. So it is never started there.
- nn.Graph (``compile``): the graph's operators run inside the lazy job's actors, not as eager
  VM instructions, and the profiler's per-op records are those of eager instructions; the
  compiled step would show no operators even where the profiler runs.
"""

import oneflow as flow
import oneflow.sysconfig

from dlperf.worker.profile import ProfileUnavailable

TOTALS_ONLY = ("oneflow.profiler (OneFlow %s) records per-operator totals without start times, "
               "and the operators run on the virtual machine's stream threads while Python "
               "dispatches ahead, not one after another on one thread: no intervals to attribute"
               % flow.__version__)
ABORTS = ("oneflow.profiler (OneFlow %s, a CUDA build) aborts the process where no CUDA driver "
          "answers (this CPU host): DisableProfilerAndReturnResult, the only call that returns "
          "its records, checks cudaDeviceSynchronize() whatever the activities (tried: CPU "
          "activity only with record_shapes off, the internal EnableProfiler(cpu only), "
          "CUDA_VISIBLE_DEVICES empty, ONEFLOW_PROFILER_* variables: all abort; record_function "
          "needs a running profile, autoprof wraps the same profiler): not started"
          % flow.__version__)
GRAPH = ("nn.Graph runs its operators inside the lazy job's actors; oneflow.profiler (OneFlow "
         "%s) records eager operators only, and only their totals" % flow.__version__)


def unavailable(compiled):
    # type: (bool) -> ProfileUnavailable
    """The reason this workload has no profile: the first that applies."""
    if oneflow.sysconfig.with_cuda() and not flow.cuda.is_available():
        return ProfileUnavailable(ABORTS)
    if compiled:
        return ProfileUnavailable(GRAPH)
    return ProfileUnavailable(TOTALS_ONLY)

