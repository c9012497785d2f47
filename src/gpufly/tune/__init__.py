"""The tuner: measure optimizations (knobs) on a workload, each trial in its own process, and keep the best safe one.

``Search`` runs a plan of trials through a runner and a ``ResultsLog``; ``KNOBS`` lists every knob; ``best``
picks the winner; ``gpufly.apply`` (``gpufly.tune.apply``) puts it into a training script. Importing this
package does not import torch.
"""

from gpufly.tune.knobs import KNOBS, Knob, Target, code_for, offered
from gpufly.tune.results import ResultsLog, run_identity
from gpufly.tune.search import GreedyPlan, Search, Stage, StagePlan
from gpufly.tune.trial import SubprocessRunner, Trial, TrialResult
from gpufly.tune.verdict import best, judge
from gpufly.tune.workload import Workload, WorkloadOption

__all__ = ["KNOBS", "GreedyPlan", "Knob", "ResultsLog", "Search", "Stage", "StagePlan", "SubprocessRunner", "Target",
           "Trial", "TrialResult", "Workload", "WorkloadOption", "best", "code_for", "judge", "offered",
           "run_identity"]
