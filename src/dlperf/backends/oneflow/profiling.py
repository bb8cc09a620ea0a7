"""Why dlperf's profiled steps are unavailable with OneFlow 0.9.0's profiler
(:mod:`dlperf.worker.profile`): ``oneflow.profiler.profile`` is wired in name only, every case
records ``profile.unavailable`` with the reason below, never a made-up split.

- Totals, not intervals: ``DisableProfilerAndReturnResult`` hands back JSON events of a name, a
  total time and a count per operator (``Events``/``key_averages``), with no start times, so the
  operators cannot be placed on a timeline. Laying the totals end to end would only be honest if
  the operators ran one after another on one thread, and they do not: eager ops are queued to
  OneFlow's virtual machine, whose stream threads run them while Python dispatches ahead, with
  copies and frees on streams of their own.
- A CUDA build without a usable CUDA driver (a CPU host running the cu* wheel, as dlperf's
  environment installs it): the profiler's stop calls ``cudaDeviceSynchronize`` unconditionally
  and its failed check is a glog FATAL, which aborts the whole worker process (seen with 0.9.0
  on a CPU host, CPU activity alone). It is never started there.
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
ABORTS = ("oneflow.profiler (OneFlow %s, a CUDA build) calls cudaDeviceSynchronize when it "
          "stops and aborts the process where no CUDA driver answers (this CPU host): not "
          "started" % flow.__version__)
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

