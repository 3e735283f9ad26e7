"""Speed benchmarks: ``ltdrnn bench`` (also ``python -m ltdrnn.bench``).

Every registry entry (and the named variants the speed targets need) is built through
:class:`ltdrnn.Recurrent` and measured against ``nn.LSTM`` and ``nn.GRU`` in the same process (the two
references also alone, each in a fresh process; the ratios use the faster time):

* ``train``: one training step, forward + backward of the mean of the outputs, batch first;
* ``inference``: one forward pass under ``torch.no_grad``;
* ``stream``: one streaming step at batch 1, ``cell(x_t, state)`` against ``nn.LSTMCell`` and
  ``Recurrent.step`` against a one-step ``nn.LSTM``;
* ``memory``: peak resident memory of inference and of a training step, each subject in a fresh
  subprocess (peak RSS above the process's own baseline);
* ``scaling``: training step time at several sequence lengths and the log-log slope (1 = linear);
* ``flops``: achieved GFLOP/s against the FLOPs the cell needs and the machine's sgemm peak;
* ``skip``: SA-RNN's skipping inference path at forced skip fractions;
* ``malloc``: the effect of glibc's malloc settings on training steps (subprocesses).

Timings are medians over ``repeats`` runs after ``warmup`` runs; within a section the subjects are
interleaved (each round runs every subject once, in a freshly shuffled order), so machine load
affects all of them alike and the ratios stay meaningful on a busy machine. The results go to a
JSON file and a markdown table with the speed targets (see ``docs/benchmarks.md``).

The package, by concern: :mod:`.subjects` (shapes, variants, targets, subjects), :mod:`.timing`
(interleaved medians, ratios, the settings, the machine), :mod:`.sections` (the in-process sections),
:mod:`.alone` (the references timed alone, and the check of how much the interleaving slowed them),
:mod:`.probes` (memory and malloc, in subprocesses), :mod:`.report` (target verdicts, markdown) and
:mod:`.runner` (the settings and the run of the chosen sections). The command line is
:mod:`ltdrnn.cli.bench`.
"""

from .alone import SLOWED_LIMIT, alone_probe, reference_checks
from .probes import run_probe, subject_spec, timing_probe
from .report import evaluate_targets, render_markdown, stream_subjects, target_verdict
from .runner import SCHEMA, SECTIONS, parse_options, parse_shapes, run, settings_from, split_names
from .sections import loglog_slope
from .subjects import RATE_TARGETS, SHAPES, TRAIN_TARGETS, VARIANTS, Shape, Subject, registry_subjects
from .timing import interleaved_samples

__all__ = [
    "SCHEMA",
    "SECTIONS",
    "SHAPES",
    "SLOWED_LIMIT",
    "RATE_TARGETS",
    "TRAIN_TARGETS",
    "VARIANTS",
    "Shape",
    "Subject",
    "alone_probe",
    "evaluate_targets",
    "interleaved_samples",
    "loglog_slope",
    "parse_options",
    "parse_shapes",
    "reference_checks",
    "registry_subjects",
    "render_markdown",
    "run",
    "run_probe",
    "settings_from",
    "stream_subjects",
    "split_names",
    "subject_spec",
    "target_verdict",
    "timing_probe",
]
